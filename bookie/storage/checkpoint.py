"""Checkpoint files: the manifest (journal position covered) and one file per ledger.

Manifest `CHECKPOINT`: [magic u32][version u16][pad u16][journal seq u64][journal offset u64]
                      [crc32c of the preceding bytes u32]
Ledger file `ledgers/<scope:016x>-<ledger:016x>.ldg`: LEDGER_HEADER, master key, then per
index page PAGE_HEADER (first id, slots), locations (int64 each), lengths (int32 each); then
crc32c of everything before it. Arrays are stored little endian.

Every file is replaced atomically (tmp, fsync, rename, fsync dir). A ledger file may be newer
than the manifest (crash between the two): replaying the journal from the older manifest
position over it is harmless because every journal record is idempotent and monotonic.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from crc32c import crc32c

from bookie.storage.durable_files import atomic_write, fsync_dir, write_tmp_synced
from bookie.storage.errors import CheckpointCorruptionError, InvariantError
from bookie.storage.journal import JournalPosition
from bookie.storage.ledger_index import LedgerIndex, LedgerMeta

MANIFEST_NAME = "CHECKPOINT"
MANIFEST_MAGIC = 0xC4EC_4B01
MANIFEST_VERSION = 1
MANIFEST = struct.Struct("<IHxxQQ")
CRC = struct.Struct("<I")

LEDGER_FILE_SUFFIX = ".ldg"
LEDGER_MAGIC = 0x1ED6_E401
LEDGER_VERSION = 1
# magic, version, flags, scope, ledger, lac, pages, entry count, size bytes, key len
LEDGER_HEADER = struct.Struct("<IHHQQqIQQH")
PAGE_HEADER = struct.Struct("<qI")  # first entry id, slots
FLAG_FENCED = 1
FLAG_DELETED = 2
FLAG_HAS_KEY = 4

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
    header = LEDGER_HEADER.pack(
        LEDGER_MAGIC, LEDGER_VERSION, flags, key[0], key[1], meta.lac, len(index.pages),
        index.count, index.size_bytes, len(mkey),
    )
    parts = [header, mkey]
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
    if magic != LEDGER_MAGIC or version != LEDGER_VERSION:
        raise bad(f"magic={magic:#x} version={version}")
    pos = LEDGER_HEADER.size
    end = len(raw) - CRC.size
    if pos + key_len > end:
        raise bad("key past the end")
    meta = LedgerMeta(bytes(raw[pos : pos + key_len]) if flags & FLAG_HAS_KEY else None)
    pos += key_len
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


def write_ledger_files(directory: Path, snapshots: list[tuple[tuple[int, int], list[bytes]]],
                       fsync: bool) -> None:
    """Write every snapshot to a tmp file, fsync each, then rename all and fsync the dir once."""
    renames: list[tuple[Path, Path]] = []
    for key, parts in snapshots:
        body = b"".join(parts)
        path = ledger_file_path(directory, key)
        renames.append((write_tmp_synced(path, body + CRC.pack(crc32c(body)), fsync), path))
    for tmp, path in renames:
        os.replace(tmp, path)
    if renames and fsync:
        fsync_dir(directory)


def load_ledger_files(directory: Path) -> Iterator[LoadedLedger]:
    for path in sorted(directory.glob("*" + LEDGER_FILE_SUFFIX)):
        loaded = decode_ledger(path.read_bytes(), path)
        if ledger_file_path(directory, loaded.key).name != path.name:
            raise CheckpointCorruptionError(f"ledger file {path} holds ledger {loaded.key}", path)
        yield loaded
