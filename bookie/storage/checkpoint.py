"""Checkpoint state: the manifest (journal position covered) and one snapshot per ledger, kept
in the bookie's index store (index_store.py: one SQLite file; older data directories held one
file per ledger, migrated on open).

Manifest `CHECKPOINT`: [magic u32][version u16][pad u16][journal seq u64][journal offset u64]
                      [crc32c of the preceding bytes u32]
Ledger snapshot (a store row's body; formerly the file `ledgers/<scope:016x>-<ledger:016x>.ldg`):
LEDGER_HEADER, master key, then per index page PAGE_HEADER (first id, slots), locations (int64
each), lengths (int32 each); then crc32c of everything before it. Arrays are little endian.

A checkpoint writes its dirty ledgers in one store transaction, then the manifest. A snapshot
may be newer than the manifest (crash between the two): replaying the journal from the older
manifest position over it is harmless because every journal record is idempotent and monotonic.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from bookie.storage.durable_files import atomic_write, fsync_dir
from bookie.storage.errors import CheckpointCorruptionError, InvariantError
from bookie.storage.index_store import IndexStore
from bookie.storage.journal import JournalPosition
from bookie.storage.ledger_index import LedgerIndex, LedgerMeta

MANIFEST_NAME = "CHECKPOINT"
MANIFEST_MAGIC = 0xC4EC_4B01
MANIFEST_VERSION = 1
MANIFEST = struct.Struct("<IHxxQQ")
CRC = struct.Struct("<I")

LEDGER_FILE_SUFFIX = ".ldg"
LEDGER_MAGIC = 0x1ED6_E401
# Version 2 adds the closed last entry (FLAG_CLOSED_LAST, then an int64 after the key): the
# dirty-tail cap GC learned from metadata, so a restart never serves a tail before the next GC
# round. Version 1 files (no cap) are still read.
LEDGER_VERSION = 2
LEDGER_VERSIONS_READ = (1, 2)
# magic, version, flags, scope, ledger, lac, pages, entry count, size bytes, key len
LEDGER_HEADER = struct.Struct("<IHHQQqIQQH")
CLOSED_LAST = struct.Struct("<q")
PAGE_HEADER = struct.Struct("<qI")  # first entry id, slots
FLAG_FENCED = 1
FLAG_DELETED = 2
FLAG_HAS_KEY = 4
FLAG_CLOSED_LAST = 8

_BIG_ENDIAN = sys.byteorder == "big"


def write_manifest(data_dir: Path, position: JournalPosition, fsync: bool) -> None:
    head = MANIFEST.pack(MANIFEST_MAGIC, MANIFEST_VERSION, position.seq, position.offset)
    atomic_write(data_dir / MANIFEST_NAME, head + CRC.pack(crc32c(head)), fsync)


def read_manifest(data_dir: Path) -> JournalPosition | None:
    path = data_dir / MANIFEST_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != MANIFEST.size + CRC.size or CRC.unpack_from(raw, MANIFEST.size)[0] != crc32c(
        raw[: MANIFEST.size]
    ):
        raise CheckpointCorruptionError(
            f"checkpoint manifest {path} is damaged (size or checksum). Move the data directory "
            f"aside and re-replicate this bookie.",
            path,
        )
    magic, version, seq, offset = MANIFEST.unpack_from(raw, 0)
    if magic != MANIFEST_MAGIC or version != MANIFEST_VERSION:
        raise CheckpointCorruptionError(f"checkpoint manifest {path} has magic={magic:#x} "
                                        f"version={version}: not written by this engine", path)
    return JournalPosition(seq, offset)


def ledger_file_path(directory: Path, key: tuple[int, int]) -> Path:
    return directory / f"{key[0]:016x}-{key[1]:016x}{LEDGER_FILE_SUFFIX}"


def _le(arr: array[int]) -> bytes:
    if _BIG_ENDIAN:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def encode_ledger(key: tuple[int, int], meta: LedgerMeta) -> list[bytes]:
    """Snapshot of one ledger as file parts (the crc is added by `write_ledger_files`).
    Called under the engine lock: it copies, it does not checksum or write."""
    index = meta.index
    flags = (FLAG_FENCED if meta.fenced else 0) | (FLAG_DELETED if meta.deleted else 0)
    mkey = meta.key or b""
    if meta.key is not None:
        flags |= FLAG_HAS_KEY
    if meta.closed_last is not None:
        flags |= FLAG_CLOSED_LAST
    header = LEDGER_HEADER.pack(
        LEDGER_MAGIC, LEDGER_VERSION, flags, key[0], key[1], meta.lac, len(index.pages),
        index.count, index.size_bytes, len(mkey),
    )
    parts = [header, mkey]
    if meta.closed_last is not None:
        parts.append(CLOSED_LAST.pack(meta.closed_last))
    for page_no in sorted(index.pages):
        page = index.pages[page_no]
        parts += [PAGE_HEADER.pack(page.base, len(page.locs)), _le(page.locs), _le(page.lens)]
    return parts


@dataclass
class LoadedLedger:
    key: tuple[int, int]
    meta: LedgerMeta


def decode_ledger(raw: bytes, path: Path) -> LoadedLedger:
    def bad(why: str) -> CheckpointCorruptionError:
        return CheckpointCorruptionError(
            f"ledger index file {path} is damaged ({why}). Move the data directory aside and "
            f"re-replicate this bookie, or restore the file.",
            path,
        )

    if len(raw) < LEDGER_HEADER.size + CRC.size:
        raise bad("too short")
    if CRC.unpack_from(raw, len(raw) - CRC.size)[0] != crc32c(memoryview(raw)[: -CRC.size]):
        raise bad("checksum mismatch")
    (magic, version, flags, scope, ledger, lac, page_count, count, size_bytes,
     key_len) = LEDGER_HEADER.unpack_from(raw, 0)
    if magic != LEDGER_MAGIC or version not in LEDGER_VERSIONS_READ:
        raise bad(f"magic={magic:#x} version={version}")
    pos = LEDGER_HEADER.size
    end = len(raw) - CRC.size
    if pos + key_len > end:
        raise bad("key past the end")
    meta = LedgerMeta(bytes(raw[pos : pos + key_len]) if flags & FLAG_HAS_KEY else None)
    pos += key_len
    if version >= 2 and flags & FLAG_CLOSED_LAST:
        if pos + CLOSED_LAST.size > end:
            raise bad("closed last entry past the end")
        meta.closed_last = CLOSED_LAST.unpack_from(raw, pos)[0]
        pos += CLOSED_LAST.size
    meta.fenced = bool(flags & FLAG_FENCED)
    meta.deleted = bool(flags & FLAG_DELETED)
    meta.lac = lac
    index = LedgerIndex()
    for _ in range(page_count):
        if pos + PAGE_HEADER.size > end:
            raise bad("page header past the end")
        base, slots = PAGE_HEADER.unpack_from(raw, pos)
        pos += PAGE_HEADER.size
        if pos + 12 * slots > end:
            raise bad("page past the end")
        locs, lens = array("q"), array("i")
        locs.frombytes(raw[pos : pos + 8 * slots])
        pos += 8 * slots
        lens.frombytes(raw[pos : pos + 4 * slots])
        pos += 4 * slots
        if _BIG_ENDIAN:
            locs.byteswap()
            lens.byteswap()
        try:
            index.restore_page(base, locs, lens)
        except InvariantError as e:
            raise bad(str(e)) from e
    if pos != end:
        raise bad(f"{end - pos} trailing bytes")
    index.count = count
    index.size_bytes = size_bytes
    meta.index = index
    return LoadedLedger((scope, ledger), meta)


def write_ledger_snapshots(store: IndexStore, snapshots: list[tuple[tuple[int, int], list[bytes]]]) -> None:
    """Write every snapshot (with its crc) to the index store in one transaction."""

    def rows() -> Iterator[tuple[tuple[int, int], bytes]]:
        for key, parts in snapshots:
            body = b"".join(parts)
            yield key, body + CRC.pack(crc32c(body))

    store.put_many(rows())


def load_ledger_snapshots(store: IndexStore, legacy_dir: Path, fsync: bool) -> Iterator[LoadedLedger]:
    """Every ledger's snapshot, after migrating per-ledger files left in `legacy_dir`."""
    migrate_ledger_files(store, legacy_dir, fsync)
    for key, body in store.rows():
        where = Path(f"{store.path}#{key[0]:016x}-{key[1]:016x}")
        loaded = decode_ledger(body, where)
        if loaded.key != key:
            raise CheckpointCorruptionError(f"index store row {key} holds ledger {loaded.key}", store.path)
        yield loaded


def migrate_ledger_files(store: IndexStore, directory: Path, fsync: bool) -> int:
    """Move per-ledger files (the first design) into the store: all in one transaction, each
    checked first; the files are deleted only once it committed. How many were moved."""
    paths = sorted(directory.glob("*" + LEDGER_FILE_SUFFIX))
    rows = []
    for path in paths:
        raw = path.read_bytes()
        loaded = decode_ledger(raw, path)
        if ledger_file_path(directory, loaded.key).name != path.name:
            raise CheckpointCorruptionError(f"ledger file {path} holds ledger {loaded.key}", path)
        rows.append((loaded.key, raw))
    store.put_many(rows)
    for path in paths:
        path.unlink()
    if paths and fsync:
        fsync_dir(directory)
    return len(paths)
