"""glibc malloc settings for processes that move MiB-sized buffers (range read responses).

A range read makes a few buffers of up to tens of MiB per response (the entries read, the
protobuf message, its serialization). glibc serves an allocation above its mmap threshold (128
KiB, raised only as such buffers are freed) with a fresh mapping that it unmaps on free, and it
trims the heap top beyond twice that threshold, so nearly every such buffer is touched page by
page for the first time. On the 2-core reference VM those page faults were about a third of a
bookie's read CPU: reading 100-byte entries, bookie CPU per entry 0.60 -> 0.37 us and client
0.53 -> 0.40 us with the settings below. Buffers up to 32 MiB (glibc's largest threshold on
64-bit) then stay in the heap, which may keep up to 64 MiB free at its top for reuse.

A no-op off glibc, when opted out with PYSPARK_LEDGER_MALLOC_TUNING=0, or when the process was
started with MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ (the operator's choice wins).
bookie.server.main applies it at start; Spark executors apply it once per Python worker, when
they first read (pyspark_ledger/datasource/read/reader.py); a LedgerClient once per process (a
writer's batches and entries are ~128 KiB buffers, the sender's frames of small entries too).
A leaf module (the standard library and bookie.opt_out only), so the client may import it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from bookie.opt_out import opted_out

MMAP_THRESHOLD_BYTES = 32 * 2**20
TRIM_THRESHOLD_BYTES = 64 * 2**20
OPT_OUT_ENV = "PYSPARK_LEDGER_MALLOC_TUNING"
_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3


def tune_malloc(environ: Mapping[str, str] = os.environ) -> bool:
    """Apply the settings above to this process; True if they were applied."""
    if opted_out(OPT_OUT_ENV, environ):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in environ or "MALLOC_TRIM_THRESHOLD_" in environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
