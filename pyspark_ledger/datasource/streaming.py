"""Structured streaming on logs: the exactly-once sink and the LAC-bounded source (no pyspark here;
stream_source.py wraps these in Spark's classes).

Sink, per micro-batch: every task attempt writes its own ledger exactly as a batch write does
(write_task.write_task), staged under /staging/<log>/<query id>.<batch id>.<run id>. The driver's
commit(messages, batchId) then makes ONE compare-and-set of the log record that both appends the
batch's sealed ledgers and records (query id, batchId) as committed. A replayed batch (Spark
re-runs the last batch after a crash, with the same batchId) finds its batch id already recorded:
nothing is appended, and the replay's ledgers are deleted. Staging left by crashed runs of the
same query is swept at every commit; ledgers that are in the log are never deleted.

Source: offsets are log positions {"seq", "ledger", "entry"} naming the next entry to read. A
micro-batch ends at the log's readable end (closed ledgers to their last entry, the open one to
its LAC), optionally limited by maxEntriesPerTrigger / maxBytesPerTrigger (Spark read limits).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from metadata import LedgerId, MetadataError, NodeExistsError, NoNodeError, NoSuchLedgerError
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.logs import NoSuchLogError
from metadata.store import join
from pyspark_ledger.datasource.options import LedgerSourceOptions, OptionError, parse_options
from pyspark_ledger.datasource.planning import (
    LedgerRange,
    LedgerSourceError,
    add_fragment_ranges,
    first_ledger,
    last_readable,
    log_ledgers,
    open_client,
    read_log_head,
)
from pyspark_ledger.datasource.ranges import Span
from pyspark_ledger.datasource.rows import RowPlace
from pyspark_ledger.datasource.sink_epoch import hold_query_epoch
from pyspark_ledger.datasource.write_task import write_task
from pyspark_ledger.datasource.writer import (
    JOB_COMMITTED,
    JOB_OPEN,
    STAGING,
    TaskResult,
    WriteJob,
    _clean_staging,
    _job_value,
    check_columns,
)
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.errors import StaleEpochError
from pyspark_ledger.log.takeover import check_epoch

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

STREAM_OPTIONS = ("maxentriespertrigger", "maxbytespertrigger", "testfailcommit",
                  # Spark passes the query's checkpoint location to sinks as an option: not ours.
                  "checkpointlocation")
# Bytes per entry assumed for an open ledger when a byte limit applies (its sizes are unknown
# until it is sealed); sealed ledgers use their real average.
ASSUMED_ENTRY_BYTES = 1024


# ---- options -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSettings:
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    # Testing hook: fail the first commit of the query "before" or "after" its compare-and-set.
    test_fail_commit: str | None = None


def parse_stream_options(raw: Mapping[str, str]) -> tuple[LedgerSourceOptions, StreamSettings]:
    """Split the streaming-only options off, parse both halves; errors name the option."""
    lower = {k.lower(): v for k, v in raw.items()}
    rest = {k: v for k, v in raw.items() if k.lower() not in STREAM_OPTIONS}

    def positive(key: str, name: str) -> int | None:
        if key not in lower:
            return None
        try:
            value = int(str(lower[key]).strip())
        except ValueError:
            raise OptionError(name, f"expected a positive integer, got {lower[key]!r}") from None
        if value <= 0:
            raise OptionError(name, f"expected a positive integer, got {value}")
        return value

    opts = parse_options(rest)  # failOnDataLoss is a reading option of batch and stream alike
    fail_commit = lower.get("testfailcommit")
    if fail_commit is not None and fail_commit not in ("before", "after"):
        raise OptionError("testFailCommit", f"expected before or after, got {fail_commit!r}")
    settings = StreamSettings(
        positive("maxentriespertrigger", "maxEntriesPerTrigger"),
        positive("maxbytespertrigger", "maxBytesPerTrigger"),
        opts.read.fail_on_data_loss,
        fail_commit,
    )
    return opts, settings


# ---- offsets -----------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Offset:
    """The next entry to read: entry `entry` of the ledger with sequence number `seq`."""

    seq: int
    entry: int
    ledger: str = ""  # qualified name of that ledger when known (for people and checks)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "entry": self.entry, "ledger": self.ledger}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str) -> Offset:
        if isinstance(d, str):
            d = json.loads(d)
        try:
            return cls(int(d["seq"]), int(d["entry"]), str(d.get("ledger", "")))  # type: ignore[union-attr, index]  # bad JSON: TypeError below
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerSourceError(f"not a ledger stream offset: {d!r}") from exc


def _readable_ends(client: LedgerClient, head: LogHead, opts: LedgerSourceOptions,
                   from_seq: int) -> Iterator[tuple[int, LedgerId, int, int | None, bool]]:
    """For each ledger from `from_seq`: (seq, id, last readable entry, average entry bytes or None,
    closed?). Stops after the first ledger that is not closed yet: what follows it must wait
    until it is (its last entries may still be confirmed). Lazy: a segment of the log is fetched
    only if the caller goes on that far."""
    for lg in log_ledgers(client, head, from_seq):
        if lg.sealed:
            count = lg.entry_count or 0
            avg = (lg.size_bytes or 0) // count if count else None
            yield (lg.seq, lg.ledger_id, count - 1, avg, True)
            continue
        try:
            meta, version = client.ledgers.read(lg.ledger_id)
        except NoSuchLedgerError:
            continue
        last = last_readable(client, meta, version, opts)
        avg = (meta.length_bytes or 0) // (last + 1) if meta.is_closed and last >= 0 else None
        yield (lg.seq, lg.ledger_id, last, avg, meta.is_closed)
        if not meta.is_closed:
            return


def initial_offset(client: LedgerClient, opts: LedgerSourceOptions) -> Offset:
    head = read_log_head(client, opts)
    rec = head.record
    if opts.starting.kind == "position":
        p = opts.starting.position
        assert p is not None
        return Offset(p.seq, p.entry_id, p.ledger_id.qualified_name)
    if opts.starting.kind == "latest":
        # From the head's tail: the readable end is found there (segments hold only sealed ledgers
        # before it), so a stream starting at the latest position never walks the log.
        since = rec.ledgers[0].seq if rec.ledgers else max(rec.next_seq - 1, rec.trim_seq)
        return latest_offset(client, opts, Offset(since, 0), None, None)
    first = first_ledger(client, head)
    if first is not None:
        return Offset(first.seq, 0, first.ledger_id.qualified_name)
    return Offset(rec.next_seq, 0)  # an empty log: the first ledger appended gets this seq or later


def latest_offset(client: LedgerClient, opts: LedgerSourceOptions, start: Offset,
                  max_entries: int | None, max_bytes: int | None) -> Offset:
    """The end of the next micro-batch: the readable end of the log, limited (if asked) to
    max_entries / about max_bytes after `start`. Never before `start`."""
    head = read_log_head(client, opts)
    end = start
    entries_left = max_entries
    bytes_left = max_bytes
    for seq, lid, last, avg, _closed in _readable_ends(client, head, opts, start.seq):
        first = start.entry if seq == start.seq else 0
        available = last + 1 - first
        if available <= 0:
            # Nothing new here; a later ledger starts a new position only once it has data.
            end = max(end, Offset(seq, max(first, last + 1), lid.qualified_name)) if seq == start.seq else end
            continue
        take = available
        if entries_left is not None:
            take = min(take, entries_left)
        if bytes_left is not None:
            per = avg or ASSUMED_ENTRY_BYTES
            take = min(take, max(1, bytes_left // max(per, 1)))
        end = Offset(seq, first + take, lid.qualified_name)
        if entries_left is not None:
            entries_left -= take
        if bytes_left is not None:
            bytes_left -= take * (avg or ASSUMED_ENTRY_BYTES)
        if take < available or (entries_left is not None and entries_left <= 0) or (bytes_left is not None and bytes_left <= 0):
            break
    return end


def check_data_loss(rec: LogRecord, first: LogLedger | None, start: Offset, settings: StreamSettings) -> Offset:
    """A start before the log's first ledger (`first`) means trimmed data: fail (like Kafka's
    failOnDataLoss=true) or skip ahead to what remains."""
    if first is None or start.seq >= first.seq:
        return start
    message = (f"log {rec.name!r}: entries from position seq {start.seq} entry {start.entry} were trimmed "
               f"(the log now starts at seq {first.seq}); set failOnDataLoss=false to skip them")
    if settings.fail_on_data_loss:
        raise LedgerSourceError(message)
    log.warning("data loss: %s; skipping to the earliest remaining entry", message)
    return Offset(first.seq, 0, first.ledger_id.qualified_name)


def plan_stream_ranges(client: LedgerClient, opts: LedgerSourceOptions, settings: StreamSettings,
                       start: Offset, end: Offset) -> list[LedgerRange]:
    """Ranges covering [start, end) in log order, per fragment, split to maxEntriesPerPartition."""
    if end <= start:
        return []
    head = read_log_head(client, opts)
    rec = head.record
    start = check_data_loss(rec, first_ledger(client, head), start, settings)
    ranges: list[LedgerRange] = []
    for lg in log_ledgers(client, head, start.seq):  # only the segments covering [start, end]
        if lg.seq > end.seq:
            break
        try:
            meta, version = client.ledgers.read(lg.ledger_id)
        except NoSuchLedgerError:
            if settings.fail_on_data_loss:
                raise LedgerSourceError(f"ledger {lg.ledger_id} of log {rec.name!r} was deleted before it was read; "
                                        "set failOnDataLoss=false to skip it") from None
            continue
        first = start.entry if lg.seq == start.seq else 0
        if lg.seq == end.seq:
            last = end.entry - 1
        elif lg.sealed:
            last = (lg.entry_count or 0) - 1
        else:
            # A ledger before the end ledger is finished for this stream: it was sealed (or
            # recovered) before the later ledger appeared; read it to its end.
            last = last_readable(client, meta, version, opts)
        place = RowPlace(rec.name, lg.seq, lg.ledger_id.qualified_name, lg.ctime_ms)
        add_fragment_ranges(ranges, lg.seq, lg.ledger_id, meta, version, Span(first, last), opts.max_entries_per_partition,
                            place)
    return ranges


# ---- sink --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamTaskResult:
    result: TaskResult
    query_id: str
    batch_id: int
    run_id: str = ""  # the run of the query (start or restart) whose task wrote it: its writer epoch


def spark_run_id(job_description: str | None, job_group: str | None) -> str | None:
    """The run id of a streaming query (new at every start and restart), from a micro-batch
    task's local properties: Spark sets the job description to "id = ..\nrunId = ..\nbatch = .."
    and the job group to the run id. The sink writer cannot carry it: Spark makes a new one for
    every micro-batch."""
    for line in (job_description or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "runId" and value.strip():
            return value.strip()
    return job_group or None


def stream_job(base: WriteJob, query_id: str, batch_id: int, run_id: str) -> WriteJob:
    return replace(base, job_id=f"{query_id}.{batch_id}.{run_id}")


def stream_write_task(base: WriteJob, run_id: str, batches: Iterator[pa.RecordBatch], partition_id: int,
                      attempt_number: int, task_attempt_id: int, query_id: str, batch_id: int) -> StreamTaskResult:
    """Executor: one micro-batch task attempt. The batch's staging node is made on first use
    (there is no driver hook before a micro-batch's tasks run)."""
    job = stream_job(base, query_id, batch_id, run_id)
    with open_client(job.opts) as client:
        try:
            client.store.create(job.staging_path, _job_value(JOB_OPEN, job))
        except NodeExistsError:
            pass
    result = write_task(job, batches, partition_id, attempt_number, task_attempt_id)
    return StreamTaskResult(result, query_id, batch_id, run_id)


def _sweep_query_staging(client: LedgerClient, base: WriteJob, query_id: str, keep_dir: str) -> None:
    """Delete what crashed runs of this query left in staging (never a ledger that is in the log)."""
    root = join(STAGING, base.log_name)
    published = client.logs.lookup(base.log_name)  # bounded walk from the newest; unknown counts as in
    for name in client.store.children(root):
        if not name.startswith(query_id + ".") or name == keep_dir:
            continue
        job = replace(base, job_id=name)
        try:
            _clean_staging(client, job, published, f"left by an earlier run of streaming query {query_id}")
        except (MetadataError, LedgerError) as exc:
            log.warning("could not sweep old staging dir=%s error=%s", name, exc)


def _maybe_fail(client: LedgerClient, base: WriteJob, when: str, fail_commit: str | None) -> None:
    """Testing hook: fail one commit per log, at `when`, remembered in metadata across restarts."""
    if fail_commit != when:
        return
    marker = join("/test-hooks", base.log_name, f"fail-commit-{when}")
    try:
        client.store.create(marker, b"")
    except NodeExistsError:
        return
    raise LedgerSourceError(f"injected commit failure ({when} the compare-and-set) on log {base.log_name!r}")


def commit_stream_batch(base: WriteJob, run_id: str, messages: list[StreamTaskResult | None], batch_id: int,
                        fail_commit: str | None = None) -> None:
    """Driver: append the batch's ledgers and record (query id, batch id) in ONE compare-and-set;
    a batch already recorded (a replay) appends nothing and its new ledgers are deleted."""
    got = [m for m in messages if m is not None]
    if not got:
        log.info("empty micro-batch, nothing to commit log=%s batch=%d", base.log_name, batch_id)
        return
    query_id = got[0].query_id
    run_id = got[0].run_id or run_id  # the run that wrote the batch (Spark commits in a fresh process)
    job = stream_job(base, query_id, batch_id, run_id)
    chosen: dict[int, TaskResult] = {m.result.partition_id: m.result for m in got}
    committed = [chosen[p] for p in sorted(chosen) if chosen[p].ledger_id is not None]
    ids = [r.ledger_id for r in committed if r.ledger_id is not None]
    replayed = [False]
    with open_client(base.opts) as client:
        sizes: list[tuple[int, int]] = []
        for r in committed:
            meta, _ = client.ledgers.read(r.ledger_id)  # type: ignore[arg-type]  # committed: has a ledger
            if not meta.is_closed:
                # Closed by its task; if not (a lost close), fence and seal it now.
                meta = client.open_ledger(r.ledger_id, recovery=True, password=base.opts.password).metadata  # type: ignore[arg-type]  # as above
            if meta.last_entry_id != r.entry_count - 1:
                raise LedgerSourceError(f"ledger {r.ledger_id} of partition {r.partition_id} is not sealed as reported")
            sizes.append((r.entry_count, int(meta.length_bytes or 0)))

        held = hold_query_epoch(client, base.log_name, query_id, run_id, base.opts.password)

        def change(rec: LogRecord) -> LogRecord | None:
            check_epoch(rec, held.epoch, f"streaming query {query_id}")  # stale: nothing is appended
            done = client.logs.committed_batch(rec, query_id)  # its own record or the head's last pair
            if done is not None and done >= batch_id:
                replayed[0] = True
                return None
            replayed[0] = False
            if rec.ledgers and rec.payload_format != base.payload_format:
                raise LedgerSourceError(
                    f"log {rec.name!r} holds {rec.payload_format} entries; the stream writes {base.payload_format}")
            return (rec.with_ledgers_appended(ids, sizes).with_schema(base.schema_json, base.payload_format)
                    .with_committed_batch(query_id, batch_id))

        _maybe_fail(client, base, "before", fail_commit)
        try:
            client.logs.update_head(base.log_name, change)
        except NoSuchLogError:
            raise LedgerSourceError(f"log {base.log_name!r} was deleted while the stream ran") from None
        except StaleEpochError as exc:
            # Another writer took the log over since this run started: nothing was appended; the
            # batch's ledgers go now. A restart of the query takes the log over again.
            log.warning("streaming commit fenced, nothing committed log=%s query=%s batch=%d error=%s",
                        base.log_name, query_id, batch_id, exc)
            _clean_batch_staging(client, base, job, query_id, batch_id)
            raise
        _maybe_fail(client, base, "after", fail_commit)
        if replayed[0]:
            log.info("micro-batch already committed (a replay): not appending it again log=%s query=%s batch=%d",
                        base.log_name, query_id, batch_id)
        else:
            log.info("micro-batch committed log=%s query=%s batch=%d ledgers=%d rows=%d", base.log_name, query_id,
                     batch_id, len(ids), sum(r.rows for r in committed))
        try:
            node = client.store.get(job.staging_path)
            if node is not None:
                client.store.compare_and_set(job.staging_path, _job_value(JOB_COMMITTED, job), node.version)
        except (MetadataError, NoNodeError) as exc:
            log.debug("could not mark the batch committed in staging error=%s", exc)
        _clean_batch_staging(client, base, job, query_id, batch_id)


def _clean_batch_staging(client: LedgerClient, base: WriteJob, job: WriteJob, query_id: str, batch_id: int) -> None:
    """Delete the batch's staged ledgers that are not in the log, and what crashed runs left."""
    published = client.logs.lookup(base.log_name)  # bounded walk from the newest; unknown counts as in
    try:
        _clean_staging(client, job, published, f"not committed by streaming query {query_id} batch {batch_id}")
        _sweep_query_staging(client, base, query_id, job.job_id)
    except (MetadataError, LedgerError) as exc:
        log.warning("staging cleanup incomplete batch=%d error=%s", batch_id, exc)


def abort_stream_batch(base: WriteJob, run_id: str, messages: list[StreamTaskResult | None], batch_id: int) -> None:
    """Driver: the micro-batch failed; delete its ledgers (never one that is in the log)."""
    got = [m for m in messages if m is not None]
    with open_client(base.opts) as client:
        published = client.logs.lookup(base.log_name)  # bounded walk from the newest; unknown counts as in
        prefixes = {m.query_id for m in got}
        runs = {m.run_id for m in got if m.run_id} or {run_id}  # the runs whose tasks staged ledgers
        root = join(STAGING, base.log_name)
        for name in client.store.children(root):
            parts = name.split(".")
            if len(parts) == 3 and parts[1] == str(batch_id) and parts[2] in runs and (not prefixes or parts[0] in prefixes):
                _clean_staging(client, replace(base, job_id=name), published, f"streaming batch {batch_id} aborted")


__all__ = [
    "Offset", "StreamSettings", "StreamTaskResult", "abort_stream_batch", "check_columns", "commit_stream_batch",
    "initial_offset", "latest_offset", "parse_stream_options", "plan_stream_ranges", "spark_run_id", "stream_write_task",
]
