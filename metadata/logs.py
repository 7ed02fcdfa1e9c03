"""LogManager: named logs in the metadata store, changed only by compare-and-set on the head.

The full LogRecord is the view every caller works with; storage is segmented (metadata.log_segments):
a bounded head plus immutable segments, so a commit writes a bounded number of bytes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import replace

from metadata import log_queries
from metadata import log_segments as segs
from metadata.errors import (  # the two log errors are re-exported: callers import them from here
    BadVersionError,
    LogExistsError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    NoSuchLogError,
)
from metadata.log_lookup import LedgerLookup
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.paths import (
    LOGS,
    check_name,
    log_path,
    log_queries_path,
    log_segment_path,
    log_segments_path,
    log_subscriptions_path,
    sink_epochs_path,
    sink_progress_log_path,
)
from metadata.store import MetadataStore, RetryPolicy, Versioned, Watch, cas_update

SEGMENT_CACHE_MAX = 4096  # immutable segments kept decoded (about 256 ledgers each)


class LogManager:
    def __init__(self, store: MetadataStore, retry: RetryPolicy | None = None):
        self.store = store
        self.retry = retry or RetryPolicy()
        self._segments: OrderedDict[tuple[str, int], tuple[LogLedger, ...]] = OrderedDict()

    def create(self, record: LogRecord) -> int:
        change = segs.plan_change(LogHead(LogRecord(record.name)), [], record)
        self._write_segments(record.name, change)
        try:
            return self.store.create(log_path(record.name), segs.encode_head(change.head))
        except NodeExistsError:
            raise LogExistsError(f"log {record.name!r} already exists") from None

    # ---- reads --------------------------------------------------------------------------------

    def read_head(self, name: str) -> tuple[LogHead, int]:
        got = self.store.get(log_path(name))
        if got is None:
            raise NoSuchLogError(f"no such log {name!r}")
        return segs.decode_head(got.value, name), got.version

    def segment(self, name: str, index: int) -> tuple[LogLedger, ...]:
        """One immutable segment, from the cache when it was read before."""
        key = (name, index)
        hit = self._segments.get(key)
        if hit is not None:
            self._segments.move_to_end(key)
            return hit
        path = log_segment_path(name, index)
        got = self.store.get(path)
        if got is None:
            raise MetadataError(f"log {name!r}: segment {index} referenced by the head is missing")
        ledgers = segs.decode_segment(got.value, f"log {name!r} segment {index}")
        self._segments[key] = ledgers
        while len(self._segments) > SEGMENT_CACHE_MAX:
            self._segments.popitem(last=False)
        return ledgers

    def sealed_ledgers(self, name: str, head: LogHead, from_seq: int = 0) -> list[LogLedger]:
        """The sealed ledgers with seq >= max(from_seq, trim): only the segments that can hold them."""
        low = max(from_seq, head.trim_seq)
        out: list[LogLedger] = []
        for index in range(max(head.seg_first, low // segs.SEGMENT_LEDGERS), head.seg_next):
            out.extend(lg for lg in self.segment(name, index) if lg.seq >= low)
        return out

    def iter_ledgers(self, name: str, head: LogHead, from_seq: int = 0) -> Iterator[LogLedger]:
        """The ledgers with seq >= max(from_seq, trim), lazily: a segment is fetched (or taken from
        the cache) only when the iteration reaches it, then the head's tail."""
        low = max(from_seq, head.trim_seq)
        for index in range(max(head.seg_first, low // segs.SEGMENT_LEDGERS), head.seg_next):
            yield from (lg for lg in self.segment(name, index) if lg.seq >= low)
        yield from (lg for lg in head.record.ledgers if lg.seq >= low)

    def ledger_at_or_after(self, name: str, head: LogHead, seq: int) -> LogLedger | None:
        """The first ledger with seq >= `seq`: the one segment that holds it, or the tail."""
        return next(self.iter_ledgers(name, head, seq), None)

    def lookup(self, name: str) -> LedgerLookup:
        """Which ledgers the log holds, walked from the newest back, bounded (metadata.log_lookup)."""
        return LedgerLookup(self, name)

    def get_tail(self, name: str) -> tuple[LogRecord, int] | None:
        """read_tail, or None when there is no such log."""
        try:
            return self.read_tail(name)
        except NoSuchLogError:
            return None

    def read(self, name: str) -> tuple[LogRecord, int]:
        head, version = self.read_head(name)
        return self._full(name, head), version

    def _full(self, name: str, head: LogHead) -> LogRecord:
        if head.seg_next == 0:
            return head.record
        return replace(head.record, ledgers=tuple(self.sealed_ledgers(name, head)) + head.record.ledgers)

    def get(self, name: str) -> tuple[LogRecord, int] | None:
        try:
            return self.read(name)
        except NoSuchLogError:
            return None

    # ---- writes -------------------------------------------------------------------------------

    def compare_and_set(self, record: LogRecord, expected_version: int) -> int:
        """One CAS on the head: the commit point, for a change of the FULL view (read()). Lists
        every sealed seq: the rare callers that need the whole log only; hot paths use
        update_head."""
        name = record.name
        old, version = self.read_head(name)
        if version != expected_version:
            raise BadVersionError(log_path(name), expected_version, version)
        sealed = [lg.seq for lg in self.sealed_ledgers(name, old)] if old.seg_next else []
        kept = self._stage_batches(name, record)
        change = segs.plan_change(old, sealed, replace(record, committed_batches=kept))
        return self._commit(name, old, expected_version, change)

    def read_tail(self, name: str) -> tuple[LogRecord, int]:
        """The head view: the record with only the head's tail of ledgers (one get, no segment).
        Its trim_seq, next_seq and last ledgers are exact; older ledgers are in segments."""
        head, version = self.read_head(name)
        return head.record, version

    def compare_and_set_head(self, record: LogRecord, expected_version: int, *, head: LogHead | None = None) -> int:
        """One CAS on the head for a change of the head VIEW (read_tail()): never reads a segment.
        `head`: the head read at `expected_version`, if the caller has it (saves a get)."""
        name = record.name
        if head is None:
            head, version = self.read_head(name)
            if version != expected_version:
                raise BadVersionError(log_path(name), expected_version, version)
        return self._commit_head(head, expected_version, record)

    def _commit_head(self, old: LogHead, version: int, record: LogRecord) -> int:
        kept = self._stage_batches(record.name, record)
        change = segs.plan_head_change(old, replace(record, committed_batches=kept))
        return self._commit(record.name, old, version, change)

    def update_head(self, name: str, change: Callable[[LogRecord], LogRecord | None]) -> tuple[LogRecord, int]:
        """CAS loop on the head view: `change` sees the record with only the tail's ledgers (what
        a writer, rollover, seal, epoch bump, Spark or sink commit touch) and returns the new
        view, None for no change, or raises to give up. A trim of sealed segments is said by
        raising trim_seq (LogRecord.trimmed_to). O(1) store reads per attempt, whatever the
        log's length: one get of the head (plus the committed-batch records it writes)."""
        heads: dict[int, LogHead] = {}

        def read() -> tuple[LogRecord, int]:
            head, version = self.read_head(name)
            heads.clear()
            heads[version] = head
            return head.record, version

        def write(record: LogRecord, version: int) -> int:
            try:
                return self.compare_and_set_head(record, version, head=heads[version])
            except NoNodeError:
                raise NoSuchLogError(f"no such log {name!r}") from None

        return cas_update(read, write, change, self.retry)

    def _stage_batches(self, name: str, record: LogRecord) -> tuple[tuple[str, int], ...]:
        """Every committed pair but the newest goes to its own record BEFORE the head CAS; the
        head keeps only the newest (the commit point carries it), written out after the CAS."""
        *earlier, newest = record.committed_batches or ((None, None),)
        for query_id, batch_id in earlier:
            log_queries.raise_batch(self.store, name, query_id, batch_id)
        return () if newest[0] is None else (newest,)

    def _commit(self, name: str, old: LogHead, expected_version: int, change: segs.HeadChange) -> int:
        """New segments before the head CAS (the commit point); the pair it carries and the
        segments no longer stored after it."""
        self._write_segments(name, change)
        try:
            new_version = self.store.compare_and_set(log_path(name), segs.encode_head(change.head), expected_version)
        except NoNodeError:
            raise NoSuchLogError(f"no such log {name!r}") from None
        kept = change.head.record.committed_batches
        if kept and kept != old.record.committed_batches[-1:]:
            log_queries.raise_batch(self.store, name, kept[0][0], kept[0][1])
        for index in change.dropped_segments:
            self._delete_segment(name, index)
        return new_version

    def committed_batch(self, record: LogRecord, query_id: str) -> int | None:
        """The last batch committed by `query_id`: max(its record, the pair `record`'s head carries)."""
        found = [b for b in (record.committed_batch(query_id), log_queries.read_batch(self.store, record.name, query_id))
                 if b is not None]
        return max(found) if found else None

    def _write_segments(self, name: str, change: segs.HeadChange) -> None:
        for index, ledgers in change.new_segments:
            try:
                self.store.create(log_segment_path(name, index), segs.encode_segment(ledgers))
            except NodeExistsError:
                # A writer sealing the same index writes the same ledgers (fixed by earlier head
                # CASes); a leftover of a lost race is replaced only if it differs.
                got = self.store.get(log_segment_path(name, index))
                if got is not None and got.value != segs.encode_segment(ledgers):
                    self.store.compare_and_set(log_segment_path(name, index), segs.encode_segment(ledgers), got.version)
            self._segments.pop((name, index), None)

    def forget_segment(self, name: str, index: int) -> None:
        """Drop one segment from the cache (it is being deleted)."""
        self._segments.pop((name, index), None)

    def _delete_segment(self, name: str, index: int) -> None:
        self.forget_segment(name, index)
        try:
            self.store.delete(log_segment_path(name, index))
        except NoNodeError:
            pass

    def update(self, name: str, change: Callable[[LogRecord], LogRecord | None]) -> tuple[LogRecord, int]:
        """CAS loop: `change` returns the new record, None for no change, or raises to give up."""
        return cas_update(lambda: self.read(name), self.compare_and_set, change, self.retry)

    def delete(self, name: str, expected_version: int | None = None) -> None:
        """Delete the log's segments, query records and subscriptions, then the head (the commit
        point: a node with children cannot go, and a log's subscriptions go with it)."""
        if expected_version is not None:
            _, version = self.read_head(name)
            if version != expected_version:
                raise BadVersionError(log_path(name), expected_version, version)
        for parent in (log_segments_path(name), log_queries_path(name), log_subscriptions_path(name)):
            self._delete_children_and(parent)
        for key in [k for k in self._segments if k[0] == name]:
            self._segments.pop(key, None)
        try:
            self.store.delete(log_path(name), expected_version)
        except NoNodeError:
            raise NoSuchLogError(f"no such log {name!r}") from None
        # What streaming queries kept about the log (their writer epochs, rows and bytes written)
        # goes with it; a crash before this leaves records that a log made again with the name
        # ignores (their epochs are stale) and the next deletion removes.
        for parent in (sink_epochs_path(name), sink_progress_log_path(name)):
            self._delete_children_and(parent)

    def _delete_children_and(self, parent: str) -> None:
        for child in self.store.children(parent):
            try:
                self.store.delete(f"{parent}/{child}")
            except NoNodeError:
                pass
        try:
            self.store.delete(parent)
        except NoNodeError:
            pass

    def names(self) -> list[str]:
        return self.store.children(LOGS)

    def watch_head(self, name: str, callback: Callable[[LogHead | None, int], None]) -> Watch:
        """Calls back with the head (no segment read) on every change of the log."""
        check_name("log", name)

        def on_change(v: Versioned | None) -> None:
            callback(None if v is None else segs.decode_head(v.value, name), -1 if v is None else v.version)

        return self.store.watch(log_path(name), on_change)

    def watch(self, name: str, callback: Callable[[LogRecord | None, int], None]) -> Watch:
        """Calls back with the FULL record (reads every segment per change): tools only."""
        check_name("log", name)

        def on_change(v: Versioned | None) -> None:
            if v is None:
                callback(None, -1)
            else:
                callback(self._full(name, segs.decode_head(v.value, name)), v.version)

        return self.store.watch(log_path(name), on_change)
