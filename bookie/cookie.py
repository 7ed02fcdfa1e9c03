"""Bookie identity cookies (BookKeeper's Cookie): one copy in each data dir, one in metadata.

A bookie's entries are only trustworthy if the bookie that serves them is the same one that
acknowledged them. On first start the bookie writes its identity (bookie id, a fresh instance
id, directories) to its journal directory and every ledger directory (fsynced) and to metadata;
on every later start the copies must agree. A wiped or swapped journal directory, a directory of
another bookie or incarnation, or directories started against a different metadata service refuse
to start with a message saying what happened and what to do.

The one mismatch that does not refuse: a ledger directory (not the journal directory) that is
empty and has no cookie, on a bookie metadata knows. It is a wiped or replaced disk, or a new one:
the bookie adopts it (writes the cookie) and starts. The index lives in the journal directory, so
the storage engine still knows which entries were in that directory's entry logs: it answers
UNKNOWN_ENTRY_STATE for them and the bookie marks their ledgers under-replicated (server.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bookie.errors import BookieError
from metadata import MetadataStore, NodeExistsError
from metadata.paths import cookie_path

log = logging.getLogger(__name__)

COOKIE_FILE = "COOKIE"
COOKIE_FORMAT_VERSION = 1


class CookieMismatchError(BookieError, RuntimeError):
    """The bookie's stored identity does not match: refusing to start."""


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    instance_id: str
    data_dirs: tuple[str, ...]
    created_ms: int
    format_version: int = COOKIE_FORMAT_VERSION

    def to_bytes(self) -> bytes:
        d = asdict(self)
        d["data_dirs"] = list(self.data_dirs)
        return json.dumps(d, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Cookie:
        try:
            d = json.loads(data.decode())
            if d.get("format_version", 0) > COOKIE_FORMAT_VERSION:
                raise CookieMismatchError(f"cookie in {where} has a newer format {d['format_version']}; upgrade the bookie")
            return cls(d["bookie_id"], d["instance_id"], tuple(d["data_dirs"]), int(d["created_ms"]), int(d["format_version"]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CookieMismatchError(f"cookie in {where} is unreadable ({exc}); the data dir may be damaged") from exc


def _write_local(path: Path, cookie: Cookie) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(cookie.to_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _data_dir_has_data(d: Path) -> bool:
    return any(p.name != COOKIE_FILE and not p.name.startswith(".") for p in d.iterdir())


def _holds_files(d: Path) -> bool:
    """A ledger directory holds data: any file but the cookie (an empty entries/ or a fresh file
    system's lost+found hold none)."""
    return any(f.is_file() for f in d.rglob("*") if f.name != COOKIE_FILE and not f.name.startswith("."))


def verify_or_create_cookie(store: MetadataStore, bookie_id: str, journal_dir: Path,
                            ledger_dirs: Sequence[Path] = ()) -> Cookie:
    """Check the cookie in the journal directory and every ledger directory against the one in
    metadata; create them all on first start; adopt an empty ledger directory without one."""
    data_dirs = [journal_dir] + [d for d in ledger_dirs if d.resolve() != journal_dir.resolve()]
    path_in_meta = cookie_path(bookie_id)
    stored = store.get(path_in_meta)
    meta_cookie = Cookie.from_bytes(stored.value, f"metadata {path_in_meta}") if stored else None
    locals_: dict[Path, Cookie | None] = {}
    for d in data_dirs:
        f = d / COOKIE_FILE
        try:
            if d != journal_dir and not d.is_dir():
                raise NotADirectoryError(f"{d} is not a directory")
            locals_[d] = Cookie.from_bytes(f.read_bytes(), str(f)) if f.exists() else None
        except OSError as exc:
            if d == journal_dir:
                raise
            # A failed ledger disk: the storage leaves it out and reports what it held as lost.
            log.error("ledger directory unreadable, left out: its entries count as lost dir=%s error=%r", d, exc)
            data_dirs = [x for x in data_dirs if x != d]

    present = {d: c for d, c in locals_.items() if c is not None}
    missing = [d for d, c in locals_.items() if c is None]

    for d, c in present.items():
        if c.bookie_id != bookie_id:
            raise CookieMismatchError(
                f"data dir {d} belongs to bookie {c.bookie_id!r} (instance {c.instance_id}), not {bookie_id!r}: "
                f"start it with --bookie-id {c.bookie_id}, or give this bookie its own data dir"
            )
        if meta_cookie is None:
            raise CookieMismatchError(
                f"data dir {d} has a cookie for bookie {bookie_id} (instance {c.instance_id}) but the metadata "
                f"service {store.uri} has none: is --metadata-uri pointing at the right cluster? If the metadata "
                "was deliberately rebuilt, remove the COOKIE file to adopt this data dir"
            )
        if c.instance_id != meta_cookie.instance_id:
            raise CookieMismatchError(
                f"data dir {d} holds instance {c.instance_id} of bookie {bookie_id} but metadata expects instance "
                f"{meta_cookie.instance_id}: this data dir comes from a different incarnation of the bookie"
            )

    adopted = [d for d in missing if d != journal_dir and not _holds_files(d)]
    missing = [d for d in missing if d not in adopted]
    if meta_cookie is not None and missing:
        raise CookieMismatchError(
            f"bookie {bookie_id} is registered in metadata (instance {meta_cookie.instance_id}, created "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(meta_cookie.created_ms / 1000))} UTC) but data dir(s) "
            f"{', '.join(map(str, missing))} have no cookie: the data was wiped or replaced, so entries this bookie "
            "acknowledged are gone. Refusing to start, because serving as if nothing happened could lose "
            "acknowledged entries. Recover its ledgers first (`ledger recover --bookie "
            f"{bookie_id}`), then either start it under a new --bookie-id or remove its cookie with "
            f"`bookie --metadata-uri {store.uri} --bookie-id {bookie_id} --delete-cookie`"
        )

    if meta_cookie is not None:
        for d in adopted:
            log.warning("ledger directory has no cookie and is empty (a wiped, replaced or new disk): adopting it; "
                        "entries this bookie held there are lost and get re-replicated dir=%s bookie=%s", d, bookie_id)
            _write_local(d / COOKIE_FILE, meta_cookie)
        return meta_cookie

    # First start: the data dirs must not hold data from some other, cookie-less past.
    for d in data_dirs:
        if _data_dir_has_data(d):
            raise CookieMismatchError(
                f"data dir {d} already holds data but has no cookie, and bookie {bookie_id} is new to "
                f"{store.uri}: refusing to adopt unknown data. Use an empty directory."
            )
    cookie = Cookie(bookie_id, uuid.uuid4().hex, tuple(str(d.resolve()) for d in data_dirs), int(time.time() * 1000))
    try:
        store.create(path_in_meta, cookie.to_bytes())
    except NodeExistsError:
        raise CookieMismatchError(f"another bookie registered the id {bookie_id} at the same moment") from None
    for d in data_dirs:
        _write_local(d / COOKIE_FILE, cookie)
    log.info("new bookie cookie bookie=%s instance=%s", bookie_id, cookie.instance_id)
    return cookie


def delete_cookie(store: MetadataStore, bookie_id: str) -> bool:
    """Remove a bookie's cookie from metadata (after its ledgers were recovered elsewhere)."""
    path = cookie_path(bookie_id)
    if store.get(path) is None:
        return False
    store.delete(path)
    log.info("deleted bookie cookie bookie=%s", bookie_id)
    return True
