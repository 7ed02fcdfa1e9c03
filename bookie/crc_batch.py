"""Checking the crc32c of many equal-length pieces with one pass over their bytes.

Why: a bulk read holds tens of thousands of small entries end to end, each with its own stored
crc32c. A crc32c call per entry costs ~0.2 us of Python call overhead, more than the bytes
themselves (the crc32c package runs at GB/s). CRC is linear, so the crc of pieces laid end to
end follows from the pieces' own crcs (zlib's crc32_combine): crc(A || B) = shift_|B|(crc(A))
^ crc(B), where shift_l (the CRC register run over l zero bytes) is a linear map on 32 bits.
So we compute, from the stored crcs alone, what the crc of the whole buffer must be, and
compare it with one crc32c call over the buffer. Equal: every piece is as stored (a single
CRC-32C over the buffer detects every error of up to 3 bits in buffers under 256 MiB, every
burst up to 32 bits, and anything else with probability 1 - 2**-32). Different: the caller
checks piece by piece to find which.

The combination is a tree over the pieces, from the right: level k pairs blocks of
length * 2**k bytes, so a level is a few numpy operations over all its blocks, and shift_l is
applied through four 256-entry tables (one per byte of the 32-bit value).

A leaf module (numpy and crc32c only): the bookie checks its stored entries with it, and the
client (pyspark_ledger.datasource.read.codec) the entries' digests.
"""

from __future__ import annotations

import threading

import numpy as np
from crc32c import crc32c

_MASK = 0xFFFFFFFF
_UNIT = np.array([1 << j for j in range(32)], dtype=np.uint32)  # bits 0..31 as values
# Below this many pieces a crc32c call per piece (about 0.17 us each) beats the tree's fixed
# cost (about a dozen numpy calls per level; measured break-even ~700 pieces of 145 bytes):
# callers check piece by piece instead.
PIECES_MIN = 1024


def _shift_by_zeros(value: int, nbytes: int) -> int:
    """shift_nbytes(value): the raw CRC register `value` run over nbytes zero bytes. crc32c()
    conditions its register (xor with all ones on the way in and out); undo that."""
    return crc32c(bytes(nbytes), value ^ _MASK) ^ _MASK


def byte_tables(basis: np.ndarray) -> np.ndarray:
    """Lookup tables of a map that is linear (over GF(2)) in the bits of m bytes: basis[k, j] is
    the image of bit j of byte k alone; the result T (m x 256) has T[k][b] = the image of byte
    value b at byte k, so the image of any m bytes is the XOR of one lookup per byte."""
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)  # bits[b, j]: bit j of b
    return np.bitwise_xor.reduce(np.where(bits[None], basis[:, None, :], np.uint32(0)), axis=2).astype(np.uint32)


def _tables(basis: np.ndarray) -> np.ndarray:
    """The 4 x 256 tables of the linear map on 32-bit values whose images of bits 0..31 are
    `basis`: map(x) = T[0][x & 255] ^ T[1][(x >> 8) & 255] ^ T[2][(x >> 16) & 255] ^ T[3][x >> 24]."""
    return byte_tables(basis.reshape(4, 8))


def _apply(tables: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (tables[0].take(x & 0xFF) ^ tables[1].take((x >> 8) & 0xFF)
            ^ tables[2].take((x >> 16) & 0xFF) ^ tables[3].take(x >> 24))


# Per piece length, the tables of each tree level built so far (levels are built as deep as
# the longest list asked for); a few lengths only, as runs of fixed-size records have one.
_levels: dict[int, list[np.ndarray]] = {}
_levels_lock = threading.Lock()
_LENGTHS_CACHED = 16


def _level_tables(length: int, count: int) -> list[np.ndarray]:
    """Tables of shift_{length * 2**k} for k = 0 .. count-1 (shift_{2l} is shift_l twice)."""
    with _levels_lock:
        levels = _levels.get(length)
        if levels is None:
            if len(_levels) >= _LENGTHS_CACHED:
                del _levels[next(iter(_levels))]  # the oldest length
            basis = np.array([_shift_by_zeros(1 << j, length) for j in range(32)], dtype=np.uint32)
            levels = _levels[length] = [_tables(basis)]
        while len(levels) < count:
            last = levels[-1]
            levels.append(_tables(_apply(last, _apply(last, _UNIT))))
        return levels[:count]


def combined_crc(crcs: np.ndarray, length: int) -> int:
    """The crc32c of n pieces of `length` bytes each laid end to end, given each piece's own
    crc32c (crcs[i] for piece i, in order)."""
    v = np.ascontiguousarray(crcs[::-1], dtype=np.uint32)  # v[j]: the j-th piece from the right
    if len(v) == 0:
        return 0
    for tables in _level_tables(length, (len(v) - 1).bit_length()):
        if len(v) % 2:
            v = np.append(v, np.uint32(0))  # shift(0) = 0: a missing left block adds nothing
        v = _apply(tables, v[1::2]) ^ v[0::2]  # each pair: shift(left) ^ right
    return int(v[0])


def all_match(data: bytes | memoryview, crcs: np.ndarray, length: int) -> bool:
    """Do the len(crcs) pieces of `length` bytes that make up `data` all have their crcs?
    (True means yes, up to the CRC's detection power over len(data); False means at least
    one piece does not, or `data` is not exactly that many pieces long.)"""
    if len(data) != len(crcs) * length:
        return False
    return crc32c(data) == combined_crc(crcs, length)


# shift_{2**k} for k = 0 .. 31 as Python lists (4 x 256 each): `extend` applies a few of them per
# call, where numpy's per-call cost would be more than the crc pass it saves.
_POWERS: list[list[list[int]]] = []
_POWERS_COUNT = 32  # lengths below 2**32


def extend(crc_a: int, crc_b: int, length_b: int) -> int:
    """crc32c(A || B) from crc32c(A), crc32c(B) and len(B), without B's bytes: shift_|B| is
    applied as the shifts by the powers of two that make up |B| (a few microseconds), so a
    large piece whose own crc is known is not read a second time."""
    if not 0 <= length_b < 2**_POWERS_COUNT:
        raise ValueError(f"length {length_b} out of range")
    if not _POWERS:
        # Built once; two threads may both build it, to the same values (assignment is atomic).
        _POWERS[:] = [[[int(x) for x in row] for row in tables] for tables in _level_tables(1, _POWERS_COUNT)]
    v, k = crc_a, 0
    while length_b:
        if length_b & 1:
            t = _POWERS[k]
            v = t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][v >> 24]
        length_b >>= 1
        k += 1
    return v ^ crc_b


def shift(crcs: np.ndarray, nbytes: int) -> np.ndarray:
    """shift_nbytes of every value: crc(A || B) ^ crc(B) for each crc(A) in `crcs`, |B| = nbytes."""
    return _apply(_level_tables(nbytes, 1)[0], np.ascontiguousarray(crcs, dtype=np.uint32))
