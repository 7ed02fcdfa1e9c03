"""Engine configuration and the named limits every queue, wait and read is bounded by."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bookie.storage.errors import ensure

# Identifier ranges. Ledger keys are (scope id, ledger id), both unsigned 64-bit (BP-35).
LEDGER_ID_MAX = 2**64 - 1
# Entry ids and LACs are BookKeeper longs: signed 64-bit, entries >= 0, LAC >= -1 (none).
ENTRY_ID_MAX = 2**63 - 1
LAC_NONE = -1
# BookKeeper master keys are 20-byte digests; anything far larger is a malformed request.
MASTER_KEY_BYTES_MAX = 1024

# Reads: one call never builds more than this, whatever the caller asks for.
READ_RANGE_ENTRIES_MAX = 65_536
READ_RANGE_BYTES_MAX = 256 * 2**20
# Contiguous entries are coalesced into one pread of at most this many bytes.
READ_PREAD_BYTES_MAX = 8 * 2**20
# Long-poll LAC waits are clamped to this, whatever the caller asks for.
WAIT_LAC_TIMEOUT_MAX_S = 300.0

# The journal thread wakes at least this often when idle, to notice close().
JOURNAL_IDLE_WAKE_S = 0.2
# close() waits at most this long for the journal thread to drain and for in-flight reads.
CLOSE_TIMEOUT_S = 30.0

# Entry-log locations are packed into one int64: log id in the high bits, byte offset in the
# low LOCATION_OFFSET_BITS (1 TiB per log file).
LOCATION_OFFSET_BITS = 40
LOCATION_LOG_ID_MAX = 2 ** (63 - LOCATION_OFFSET_BITS) - 1

# The index splits entry ids into pages of 2**INDEX_PAGE_BITS ids; holes are only ever
# allocated inside a touched page (at most 12 bytes * 16384 = 192 KiB per page).
INDEX_PAGE_BITS = 14


@dataclass(frozen=True)
class StorageConfig:
    # The journal directory: journal files, the index store, the checkpoint manifest, the lock.
    data_dir: Path
    # Where entry logs go (each gets an entries/ subdirectory); empty: data_dir alone.
    ledger_dirs: tuple[Path, ...] = ()
    fsync: bool = True
    journal_file_max_bytes: int = 256 * 2**20
    journal_max_group_bytes: int = 8 * 2**20
    journal_max_group_wait_ms: float = 0.0
    entry_log_max_bytes: int = 1 * 2**30
    entry_log_cache_window_bytes: int = 256 * 2**20  # 0 = keep every page (page_cache.py)
    checkpoint_interval_s: float = 60.0
    max_entry_size_bytes: int = 5 * 2**20
    max_pending_add_bytes: int = 64 * 2**20
    add_enqueue_timeout_ms: int = 1000
    repair_journal: bool = False

    @property
    def entry_log_parents(self) -> tuple[Path, ...]:
        """The ledger directories entry logs live under."""
        return self.ledger_dirs or (self.data_dir,)

    def validate(self) -> None:
        """Reject configurations the on-disk formats cannot represent."""
        resolved = [Path(d).resolve() for d in self.entry_log_parents]
        ensure(len(set(resolved)) == len(resolved), f"ledger directories given twice: {list(self.ledger_dirs)}")
        ensure(self.journal_file_max_bytes > 0, "journal_file_max_bytes must be > 0")
        ensure(self.journal_max_group_bytes > 0, "journal_max_group_bytes must be > 0")
        ensure(self.journal_max_group_wait_ms >= 0, "journal_max_group_wait_ms must be >= 0")
        ensure(
            0 < self.entry_log_max_bytes < 2**LOCATION_OFFSET_BITS,
            f"entry_log_max_bytes must be in (0, 2**{LOCATION_OFFSET_BITS})",
        )
        ensure(self.checkpoint_interval_s >= 0, "checkpoint_interval_s must be >= 0 (0 = off)")
        ensure(self.entry_log_cache_window_bytes >= 0, "entry_log_cache_window_bytes must be >= 0 (0 = keep all)")
        # Entry lengths are stored as uint32 on disk and int32 in the index.
        ensure(0 < self.max_entry_size_bytes < 2**31, "max_entry_size_bytes must be in (0, 2**31)")
        ensure(self.max_pending_add_bytes > 0, "max_pending_add_bytes must be > 0")
        ensure(self.add_enqueue_timeout_ms >= 0, "add_enqueue_timeout_ms must be >= 0")
