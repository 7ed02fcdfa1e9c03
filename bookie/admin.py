"""The bookie's admin surface: storage statistics (`ledger bookieinfo`), GC and compaction on
demand (`ledger triggergc`), and the storage gauges of the Prometheus endpoint.

Garbage collection and compaction belong to the storage engine (issue 18 items 1-2, another
change). This module reads what the engine reports and leaves out what it does not, so it works
before and after: the GC figures come from `storage.gc_stats()` if the engine has it, else from
the same keys in `storage.stats()`; GC runs through `storage.run_gc_now(progress=...)` (or without
the progress argument) if the engine has it. Keys read: GC_STAT_KEYS.
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bookie.status import Status

log = logging.getLogger(__name__)

GC_STAT_KEYS = ("live_bytes", "dead_bytes", "last_gc_unix_s", "last_compaction_unix_s",
                "reclaimed_bytes_total", "compaction_runs_total", "entry_log_count")
GC_RUN_METHOD = "run_gc_now"
GC_STATS_METHOD = "gc_stats"
# Files counted per directory for stored_bytes: bounded (a bookie with more only undercounts).
STORED_FILES_MAX = 200_000
# A triggered GC run reports at least this often (a heartbeat when it says nothing itself), and
# the stream ends after GC_RUN_TIMEOUT_S even if the run goes on.
PROGRESS_POLL_S = 1.0
GC_RUN_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DirectoryReport:
    path: str
    role: str
    used_bytes: int
    capacity_bytes: int
    stored_bytes: int


@dataclass(frozen=True)
class ProgressEvent:
    phase: str
    done: int
    total: int
    finished: bool = False
    status: Status = Status.OK
    message: str = ""
    reclaimed_bytes: int | None = None


def stored_bytes(directory: Path, files_max: int = STORED_FILES_MAX) -> int:
    total = seen = 0
    for root, _dirs, files in os.walk(directory):
        for name in files[: max(files_max - seen, 0)]:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue  # removed meanwhile (a checkpoint, GC)
        seen += len(files)
        if seen >= files_max:
            break
    return total


def directory_roles(data_dir: Path, ledger_dirs: Sequence[Path] = ()) -> list[tuple[str, Path]]:
    """(role, path) of each ledger directory (entry logs; the index too when it is the journal's
    directory) and of the journal; `data_dir` is the journal directory."""
    return [*(("ledgers", d) for d in (ledger_dirs or (data_dir,))), ("journal", data_dir / "journal")]


def directory_reports(data_dir: Path, ledger_dirs: Sequence[Path] = ()) -> list[DirectoryReport]:
    """The ledger directories and the journal directory of a bookie."""
    out = []
    for role, path in directory_roles(data_dir, ledger_dirs):
        if not path.exists():
            continue
        usage = shutil.disk_usage(path)
        stored = stored_bytes(path)
        if role == "ledgers" and path == data_dir:  # the journal is reported on its own line
            stored -= stored_bytes(data_dir / "journal")
        out.append(DirectoryReport(str(path), role, usage.used, usage.total, max(stored, 0)))
    return out


def entry_log_count(data_dir: Path) -> int:
    entries = data_dir / "entries"
    return sum(1 for p in entries.glob("*.log")) if entries.exists() else 0


def gc_stats(storage: Any) -> dict[str, Any]:
    """The GC figures the storage reports (an empty dict before it has a garbage collector)."""
    fn = getattr(storage, GC_STATS_METHOD, None)
    source = fn() if callable(fn) else storage.stats()
    return {k: source[k] for k in GC_STAT_KEYS if source.get(k) is not None}


def gc_available(storage: Any) -> bool:
    return callable(getattr(storage, GC_RUN_METHOD, None))


def run_gc(storage: Any, timeout_s: float = GC_RUN_TIMEOUT_S) -> Iterator[ProgressEvent]:
    """Run the storage's GC and compaction now, yielding progress; the last event is finished."""
    run: Callable[..., Any] | None = getattr(storage, GC_RUN_METHOD, None)
    if not callable(run):
        yield ProgressEvent("", 0, 0, True, Status.INVALID_REQUEST,
                            "this bookie's storage has no garbage collector yet")
        return
    events: queue.Queue[ProgressEvent] = queue.Queue(maxsize=1000)

    def progress(phase: str, done: int, total: int) -> None:
        try:
            events.put_nowait(ProgressEvent(phase, done, total))
        except queue.Full:
            pass  # a slow reader misses intermediate steps, never the end

    def body() -> None:
        try:
            takes_progress = "progress" in inspect.signature(run).parameters
            result = run(progress=progress) if takes_progress else run()
            reclaimed = result.get("reclaimed_bytes") if isinstance(result, dict) else None
            final = ProgressEvent("done", 1, 1, True, Status.OK, "", reclaimed)
        except Exception as e:
            log.exception("triggered GC failed")
            final = ProgressEvent("failed", 0, 0, True, Status.INTERNAL_ERROR, repr(e))
        try:
            events.put(final, timeout=timeout_s)  # the reader drains until it sees this one
        except queue.Full:
            log.warning("triggered GC finished with nobody reading its progress status=%s", final.status.name)

    threading.Thread(target=body, name="gc-trigger", daemon=True).start()
    waited = 0.0
    while waited < timeout_s:
        try:
            event = events.get(timeout=PROGRESS_POLL_S)
        except queue.Empty:
            waited += PROGRESS_POLL_S
            continue
        yield event
        if event.finished:
            return
    yield ProgressEvent("", 0, 0, True, Status.TIMEOUT, f"still running after {timeout_s:.0f} s")


def install_storage_metrics(metrics: Any, storage: Any, data_dir: Path, journal_reopens: Callable[[], int],
                            ledger_dirs: Sequence[Path] = ()) -> None:
    """Usage and capacity per directory, journal state, and the GC figures once the storage has
    them (until then those metrics are left out of the page, not shown as 0)."""

    def per_directory(field: str) -> Callable[[], list[tuple[dict[str, str], float]]]:
        def samples() -> list[tuple[dict[str, str], float]]:
            out = []
            for role, path in directory_roles(data_dir, ledger_dirs):
                usage = shutil.disk_usage(path)
                out.append(({"dir": str(path), "role": role}, float(getattr(usage, field))))
            return out
        return samples

    def gc_value(key: str) -> Callable[[], list[tuple[dict[str, str], float]]]:
        return lambda: [({}, float(v))] if (v := gc_stats(storage).get(key)) is not None else []

    def live_fraction() -> list[tuple[dict[str, str], float]]:
        gc = gc_stats(storage)
        if "live_bytes" not in gc:
            return []
        stored = gc["live_bytes"] + gc.get("dead_bytes", 0)
        return [({}, gc["live_bytes"] / stored if stored else 1.0)]

    def log_count() -> list[tuple[dict[str, str], float]]:
        return [({}, float(gc_stats(storage).get("entry_log_count", entry_log_count(data_dir))))]

    metrics.family("bookie_directory_used_bytes", "gauge", "used bytes of the file system holding the directory",
                   per_directory("used"))
    metrics.family("bookie_directory_capacity_bytes", "gauge", "size of the file system holding the directory",
                   per_directory("total"))
    metrics.family("bookie_journal_failed", "gauge", "1 after a journal write or fdatasync failed, until reopened",
                   lambda: [({}, float(storage.journal_failed))])
    metrics.family("bookie_journal_reopens_total", "counter", "journals replaced after a failure, without a restart",
                   lambda: [({}, float(journal_reopens()))])
    metrics.family("bookie_entry_log_count", "gauge", "entry log files", log_count)
    metrics.family("bookie_live_bytes", "gauge", "entry-log bytes of live ledgers", gc_value("live_bytes"))
    metrics.family("bookie_dead_bytes", "gauge", "entry-log bytes of deleted ledgers not yet reclaimed",
                   gc_value("dead_bytes"))
    metrics.family("bookie_entry_log_live_fraction", "gauge", "live bytes / stored entry-log bytes", live_fraction)
    metrics.family("bookie_gc_reclaimed_bytes_total", "counter", "entry-log bytes reclaimed by GC and compaction",
                   gc_value("reclaimed_bytes_total"))
    metrics.family("bookie_compaction_runs_total", "counter", "compaction runs", gc_value("compaction_runs_total"))
