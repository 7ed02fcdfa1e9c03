"""Keeping an append-only file's page cache to a window behind its end.

Why: on this project's VMs (free page reporting: the host takes back guest pages that stay
free), the kernel's copy of a write into a page it newly allocates costs about five times the
copy into a page it freed a moment ago (bench/write_bound_bench.py; a 2 MiB pwritev + fdatasync
loop: 1.2-1.7 ms of system CPU per MB with pages kept, 0.20-0.25 with them dropped). An entry
log whose pages all stay cached takes a new page for every 4 KiB it appends; dropping the pages
far enough behind its end lets the next appends reuse them. Entries within `window_bytes` of
the end (those tailing readers ask for) stay cached; older ones are read from disk (the bookie's
`entry_log_cache_mb`, default 256; 0 keeps every page, as before).

The advice is only advice: POSIX_FADV_DONTNEED starts the writeback of dirty pages in range
and drops the clean ones, so a range is advised again on later steps (LAG_STEPS) to drop the
pages whose writeback has finished meanwhile. Durability is untouched: the entry log's
durability is the checkpoint's fsync, as before. A leaf module (the standard library only).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

# Advice is given once per this many bytes appended (one system call per step).
STEP_BYTES = 4 * 2**20
# Each range is advised this many times as the end moves on (writeback needs time to finish).
LAG_STEPS = 4


class CacheWindow:
    """Drops the page cache of one file's bytes older than `window_bytes` behind its end, one
    step at a time. Not thread-safe: the file's one appender calls `appended`."""

    __slots__ = ("_fd", "_window_bytes", "_advised_end")

    def __init__(self, fd: int, window_bytes: int) -> None:
        if window_bytes < 0:
            raise ValueError(f"window_bytes must be >= 0, not {window_bytes}")
        self._fd = fd
        self._window_bytes = window_bytes
        self._advised_end = 0  # the file's end at the last advice

    def appended(self, end: int) -> None:
        """The file now ends at `end`: advise once a step has been appended since the last time."""
        if end - self._advised_end < STEP_BYTES:
            return
        self._advised_end = end
        upto = end - self._window_bytes
        if upto <= 0:
            return
        start = max(0, upto - LAG_STEPS * STEP_BYTES)
        try:
            os.posix_fadvise(self._fd, start, upto - start, os.POSIX_FADV_DONTNEED)
        except OSError as e:  # only advice: a file system without it loses nothing
            log.debug("page cache drop failed error=%s", e)
