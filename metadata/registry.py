"""The bookie registry: live bookies announce themselves (writable or read-only) in metadata.

A registration is an ephemeral node, so it disappears when its bookie dies (ZooKeeper session
expiry, or the embedded store's heartbeat TTL), and comes back when the bookie's session does.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from metadata.context import now_ms
from metadata.errors import CorruptMetadataError, InvalidMetadataError
from metadata.paths import BOOKIES_AVAILABLE, bookie_path, check_name
from metadata.store import MetadataStore, Registration, Watch

log = logging.getLogger(__name__)

_RACK_PART_RE = re.compile(r"[A-Za-z0-9._:\-]{1,64}")


def check_rack(rack: str) -> str:
    """A failure domain as `zone/rack` or `rack` (a leading '/' is dropped, BookKeeper writes
    `/region/rack`); "" means none given. Returns the normal form, or InvalidMetadataError."""
    if not isinstance(rack, str):
        raise InvalidMetadataError(f"bad rack {rack!r}: not a string")
    name = rack.strip().removeprefix("/")
    if not name:
        return ""
    parts = name.split("/")
    if len(parts) > 2 or not all(_RACK_PART_RE.fullmatch(p) for p in parts):
        raise InvalidMetadataError(f"bad rack {rack!r}: use 'zone/rack' or 'rack', each 1-64 characters from "
                                   "letters, digits, '.', '_', ':', '-'")
    return name


@dataclass(frozen=True, slots=True)
class BookieInfo:
    bookie_id: str
    address: str  # host:port of its gRPC service
    # host:port of its plain-TCP add listener (bookie.add_listener); "" = none, add over gRPC
    add_address: str = ""
    read_only: bool = False
    version: str = ""
    metrics_address: str = ""
    instance_id: str = ""  # from the bookie's cookie: the same instance restarting may replace its stale registration
    # The wire versions the bookie speaks (bookie/proto/versions.py); 0 = not advertised: a bookie
    # of release 0.1.0, which speaks version 1 only. Older readers ignore both fields.
    wire_version_min: int = 0
    wire_version_max: int = 0
    registered_ms: int = field(default_factory=now_ms)
    rack: str = ""  # failure domain, `zone/rack` or `rack` ("" = none given); placement spreads copies over racks

    def __post_init__(self) -> None:
        check_name("bookie id", self.bookie_id)
        object.__setattr__(self, "rack", check_rack(self.rack))

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, bookie_id: str, data: bytes) -> BookieInfo:
        try:
            raw = json.loads(data.decode())
            known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}  # newer fields are ignored
            return cls(**known)
        except (ValueError, TypeError, UnicodeDecodeError, InvalidMetadataError) as exc:
            raise CorruptMetadataError(f"bookie {bookie_id}: unreadable registration: {exc}") from exc


class BookieRegistration:
    """A live registration; `set_read_only` flips the advertised state, `close` deregisters."""

    def __init__(self, registry: BookieRegistry, info: BookieInfo, handle: Registration):
        self._registry = registry
        self.info = info
        self._handle = handle

    def set_read_only(self, read_only: bool) -> None:
        if read_only == self.info.read_only:
            return
        self.info = replace(self.info, read_only=read_only)
        self._handle.update(self.info.to_bytes())
        # Routine: the bookie's storage already warned when it turned read-only (and why).
        log.info("bookie state changed bookie=%s read_only=%s", self.info.bookie_id, read_only)

    @property
    def registered(self) -> bool:
        """False while the store may have dropped the registration (session lost, lease lapsed);
        the store re-creates it when it can, and this turns True again."""
        return bool(self._handle.registered)

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> BookieRegistration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BookieRegistry:
    def __init__(self, store: MetadataStore):
        self.store = store

    def register(self, info: BookieInfo) -> BookieRegistration:
        def same_instance(existing: bytes) -> bool:
            try:
                old = BookieInfo.from_bytes(info.bookie_id, existing)
            except CorruptMetadataError:
                return False
            return bool(info.instance_id) and old.instance_id == info.instance_id

        handle = self.store.register_ephemeral(bookie_path(info.bookie_id), info.to_bytes(), same_instance)
        log.info("bookie registered bookie=%s address=%s read_only=%s", info.bookie_id, info.address, info.read_only)
        return BookieRegistration(self, info, handle)

    def list(self, *, writable: bool = True, read_only: bool = True) -> list[BookieInfo]:
        out = []
        for name in self.store.children(BOOKIES_AVAILABLE):
            got = self.store.get(bookie_path(name))
            if got is None:
                continue  # went away between listing and reading
            try:
                info = BookieInfo.from_bytes(name, got.value)
            except CorruptMetadataError as exc:
                log.warning("skipping unreadable bookie registration bookie=%s error=%s", name, exc)
                continue
            if (info.read_only and read_only) or (not info.read_only and writable):
                out.append(info)
        return out

    def get(self, bookie_id: str) -> BookieInfo | None:
        got = self.store.get(bookie_path(bookie_id))
        return None if got is None else BookieInfo.from_bytes(bookie_id, got.value)

    # builtins.list: inside this class `list` is the method above.
    def watch(self, callback: Callable[[builtins.list[str]], None]) -> Watch:
        """Call back with the sorted bookie ids on every membership or read-only change."""
        return self.store.watch_children(BOOKIES_AVAILABLE, callback)
