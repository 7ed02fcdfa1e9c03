"""LedgerClient: create, open (optionally recovering), delete and list ledgers.

Usable without pyspark or a JVM:

    from pyspark_ledger import LedgerClient
    with LedgerClient("sqlite:///tmp/meta.db") as client:
        with client.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2) as w:
            w.add_entry(b"hello")
"""

from __future__ import annotations

import logging
from typing import Iterator, Mapping

from metadata import (
    BookieInfo,
    BookieRegistry,
    CreateContext,
    DigestType,
    LedgerId,
    LedgerIdLike,
    LedgerManager,
    LedgerMetadata,
    NodeExistsError,
    QuorumConfig,
    open_store,
)
from pyspark_ledger.bookie_pool import BookiePool
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.placement import PlacementPolicy, RandomPlacement
from pyspark_ledger.read_handle import ReadHandle
from pyspark_ledger.recovery import recover_ledger
from pyspark_ledger.write_handle import WriteHandle

log = logging.getLogger(__name__)

CREATE_ID_COLLISIONS_MAX = 10


def _password(password: bytes | str) -> bytes:
    return password.encode() if isinstance(password, str) else bytes(password)


class LedgerClient:
    def __init__(
        self,
        metadata_uri: str,
        *,
        placement: PlacementPolicy | None = None,
        add_timeout_s: float = 10.0,
        rpc_timeout_s: float = 10.0,
        explicit_lac_interval_ms: int = 20,
    ):
        self.metadata_uri = metadata_uri
        self.store = open_store(metadata_uri)
        self.ledgers = LedgerManager(self.store)
        self.registry = BookieRegistry(self.store)
        self.pool = BookiePool(self.registry, add_timeout_s=add_timeout_s, rpc_timeout_s=rpc_timeout_s)
        self.placement: PlacementPolicy = placement or RandomPlacement()
        self.add_timeout_s = add_timeout_s
        self.explicit_lac_interval_ms = explicit_lac_interval_ms
        self._handles: list[ReadHandle] = []

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 3,
        ack_quorum_size: int = 2,
        digest_type: str | DigestType = "crc32c",
        password: bytes | str = b"",
        scope_id: int | None = 0,
        *,
        create_context: CreateContext | None = None,
        custom: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        """Create a ledger on E writable bookies and return its writer. scope_id 0: the id comes
        from the metadata store; another scope: a random id in it; None: a random UUID id."""
        quorum = QuorumConfig(ensemble_size, write_quorum_size, ack_quorum_size)
        pw = _password(password)
        ensemble = self.placement.new_ensemble(ensemble_size, self.pool.writable())
        for _ in range(CREATE_ID_COLLISIONS_MAX):
            lid = self.ledgers.allocate_ledger_id(scope_id)
            meta = LedgerMetadata.new(lid, quorum, ensemble, digest_type=digest_type, password=pw,
                                      create_context=create_context, custom=custom)
            try:
                version = self.ledgers.create(meta)
                break
            except NodeExistsError:
                if scope_id == 0:
                    raise
                continue  # a random id collided: draw another
        else:
            raise LedgerError("could not find a free ledger id")
        log.info("ledger created ledger=%s ensemble=%s E=%d W=%d A=%d", lid, ensemble, *(ensemble_size, write_quorum_size, ack_quorum_size))
        handle = WriteHandle(self, meta, version, pw, explicit_lac_interval_ms=self.explicit_lac_interval_ms,
                             add_timeout_s=self.add_timeout_s)
        self._handles.append(handle)
        return handle

    def open_ledger(self, ledger_id: LedgerIdLike, recovery: bool = False, password: bytes | str = b"") -> ReadHandle:
        """Open for reading. recovery=True fences the ledger and closes it (as a new writer would)."""
        lid = LedgerId.parse(ledger_id)
        pw = _password(password)
        if recovery:
            meta, version = recover_ledger(self, lid, pw)
        else:
            meta, version = self.ledgers.read(lid)
        handle = ReadHandle(self, meta, version, pw)
        self._handles.append(handle)
        return handle

    def delete_ledger(self, ledger_id: LedgerIdLike) -> None:
        """Delete the metadata (the point of no return), then the data on every bookie (best effort:
        a bookie that is down keeps its copy until garbage collection)."""
        lid = LedgerId.parse(ledger_id)
        meta, version = self.ledgers.read(lid)
        self.ledgers.delete(lid, version)
        for b in sorted(meta.bookies()):
            try:
                self.pool.get(b).delete_ledger((lid.scope_id, lid.id), timeout_s=5.0)
            except LedgerError as exc:
                log.warning("bookie kept data of a deleted ledger (garbage collection will remove it) ledger=%s bookie=%s error=%s", lid, b, exc)
        log.info("ledger deleted ledger=%s", lid)

    def list_ledgers(self, scope_id: int | None = None) -> Iterator[LedgerId]:
        return self.ledgers.scan(scope_id)

    def ledger_metadata(self, ledger_id: LedgerIdLike) -> LedgerMetadata:
        return self.ledgers.read(ledger_id)[0]

    def bookies(self, *, writable: bool = True, read_only: bool = True) -> list[BookieInfo]:
        return self.registry.list(writable=writable, read_only=read_only)

    def close(self) -> None:
        for h in self._handles:
            try:
                if isinstance(h, WriteHandle):
                    h._close_quietly()  # noqa: SLF001
                else:
                    h.close()
            except Exception:  # noqa: BLE001 - closing everything, best effort
                log.debug("handle close failed", exc_info=True)
        self._handles.clear()
        self.pool.close()
        self.store.close()

    def __enter__(self) -> "LedgerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
