"""Structured streaming on logs: the streaming options and the exactly-once sink (no pyspark here;
source.py wraps these in Spark's classes).

Sink, per micro-batch: every task attempt writes its own ledger exactly as a batch write does
(write_task.write_task), staged under /staging/<log>/<query id>.<batch id>.<run id>. The driver's
commit(messages, batchId) then makes ONE compare-and-set of the log record that both appends the
batch's sealed ledgers and records (query id, batchId) as committed. A replayed batch (Spark
re-runs the last batch after a crash, with the same batchId) finds its batch id already recorded:
nothing is appended, and the replay's ledgers are deleted. Staging left by crashed runs of the
same query is swept at every commit; ledgers that are in the log are never deleted.

The source lives in read.py (offsets, admission, lag) and plan.py (a batch's
ranges, data loss); this module parses the options both sides share.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa

from metadata import InvalidMetadataError, MetadataError, NodeExistsError, NoNodeError
from metadata.log_record import LogRecord
from metadata.logs import NoSuchLogError
from metadata.paths import check_name, staging_log_path
from metadata.store import join
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions, OptionError, parse_options
from pyspark_ledger.datasource.options.values import int_option
from pyspark_ledger.datasource.stream.sink_epoch import hold_query_epoch
from pyspark_ledger.datasource.stream.sink_progress import record_batch
from pyspark_ledger.datasource.stream.trigger_gate import MAX_TRIGGER_DELAY_MS_DEFAULT, TriggerDelay, duration_ms
from pyspark_ledger.datasource.write.columns import STREAM_REMEDY, check_against_log
from pyspark_ledger.datasource.write.job import (
    JOB_COMMITTED,
    JOB_OPEN,
    TaskResult,
    WriteJob,
    _clean_staging,
    _job_value,
    with_batches,
)
from pyspark_ledger.datasource.write.task import write_task
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.errors import StaleEpochError
from pyspark_ledger.log.takeover import check_epoch

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

STREAM_OPTIONS = ("maxentriespertrigger", "maxbytespertrigger", "minentriespertrigger", "maxtriggerdelay", "testfailcommit",
                  "subscription",
                  # Spark passes the query's checkpoint location to sinks as an option: not ours.
                  "checkpointlocation")


# ---- options -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSettings:
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    # Testing hook: fail the first commit of the query "before" or "after" its compare-and-set.
    test_fail_commit: str | None = None
    # A durable subscription of each log read (stream/subscription.py): where a query without a
    # checkpoint starts, moved by every committed micro-batch.
    subscription: str | None = None
    trigger_delay: TriggerDelay | None = None  # minEntriesPerTrigger and maxTriggerDelay (stream/trigger_gate.py)


_TRIGGER_MAX = 2**62  # the per-trigger limits: any positive integer


def parse_stream_options(raw: Mapping[str, str]) -> tuple[LedgerSourceOptions, StreamSettings]:
    """Split the streaming-only options off, parse both halves; errors name the option."""
    lower = {k.lower(): v for k, v in raw.items()}
    rest = {k: v for k, v in raw.items() if k.lower() not in STREAM_OPTIONS}

    opts = parse_options(rest)  # failOnDataLoss is a reading option of batch and stream alike
    fail_commit = lower.get("testfailcommit")
    if fail_commit is not None and fail_commit not in ("before", "after"):
        raise OptionError("testFailCommit", f"expected before or after, got {fail_commit!r}")
    max_entries = int_option(lower, "maxEntriesPerTrigger", None, 1, _TRIGGER_MAX)
    settings = StreamSettings(
        max_entries,
        int_option(lower, "maxBytesPerTrigger", None, 1, _TRIGGER_MAX),
        opts.read.fail_on_data_loss,
        fail_commit,
        subscription=_subscription(lower.get("subscription")),
        trigger_delay=_trigger_delay(lower, max_entries),
    )
    return opts, settings


def _subscription(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        return check_name("subscription", name)
    except InvalidMetadataError as exc:
        raise OptionError("subscription", str(exc)) from None


def _trigger_delay(lower: Mapping[str, str], max_entries: int | None) -> TriggerDelay | None:
    """minEntriesPerTrigger (Kafka's minOffsetsPerTrigger) and maxTriggerDelay (default 15m, as
    Kafka's); the delay alone means nothing, as in Kafka."""
    min_entries = int_option(lower, "minEntriesPerTrigger", None, 1, _TRIGGER_MAX)
    delay_text = lower.get("maxtriggerdelay")
    delay_ms = MAX_TRIGGER_DELAY_MS_DEFAULT if delay_text is None else duration_ms("maxTriggerDelay", delay_text)
    if min_entries is None:
        return None
    if max_entries is not None and max_entries < min_entries:
        raise OptionError("minEntriesPerTrigger", f"{min_entries} is more than maxEntriesPerTrigger ({max_entries}): "
                          "a micro-batch could never hold enough")
    return TriggerDelay(min_entries, delay_ms)


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
    with lease_client(job.opts) as client:
        try:
            client.store.create(job.staging_path, _job_value(JOB_OPEN, job))
        except NodeExistsError:
            pass
    result = write_task(job, batches, partition_id, attempt_number, task_attempt_id)
    return StreamTaskResult(result, query_id, batch_id, run_id)


def _sweep_query_staging(client: LedgerClient, base: WriteJob, query_id: str, keep_dir: str) -> None:
    """Delete what crashed runs of this query left in staging (never a ledger that is in the log)."""
    root = staging_log_path(base.log_name)
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
    with lease_client(base.opts) as client:
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
            check_against_log(rec, base.layout, STREAM_REMEDY)  # changed since the query started (an overwrite): refuse
            appended = rec.with_ledgers_appended(ids, sizes, [r.append_times_ms for r in committed])
            return with_batches(appended.with_schema(base.schema_json, base.payload_format)
                                .with_committed_batch(query_id, batch_id), base)

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
            _record_progress(client, base.log_name, query_id, batch_id, committed, sizes)
        try:
            node = client.store.get(job.staging_path)
            if node is not None:
                client.store.compare_and_set(job.staging_path, _job_value(JOB_COMMITTED, job), node.version)
        except (MetadataError, NoNodeError) as exc:
            log.debug("could not mark the batch committed in staging error=%s", exc)
        _clean_batch_staging(client, base, job, query_id, batch_id)


def _record_progress(client: LedgerClient, log_name: str, query_id: str, batch_id: int, committed: list[TaskResult],
                     sizes: list[tuple[int, int]]) -> None:
    """The sink's rows and bytes where users can read them (sink_progress.py); best effort: the
    batch is committed whatever happens here."""
    rows, entries, size = sum(r.rows for r in committed), sum(n for n, _ in sizes), sum(b for _, b in sizes)
    log.info("micro-batch committed log=%s query=%s batch=%d ledgers=%d rows=%d entries=%d bytes=%d", log_name,
             query_id, batch_id, len(committed), rows, entries, size)
    try:
        record_batch(client, log_name, query_id, batch_id, rows, entries, size, len(committed))
    except (MetadataError, LedgerError) as exc:
        log.warning("could not record the sink's progress log=%s batch=%d error=%s", log_name, batch_id, exc)


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
    with lease_client(base.opts) as client:
        published = client.logs.lookup(base.log_name)  # bounded walk from the newest; unknown counts as in
        prefixes = {m.query_id for m in got}
        runs = {m.run_id for m in got if m.run_id} or {run_id}  # the runs whose tasks staged ledgers
        root = staging_log_path(base.log_name)
        for name in client.store.children(root):
            parts = name.split(".")
            if len(parts) == 3 and parts[1] == str(batch_id) and parts[2] in runs and (not prefixes or parts[0] in prefixes):
                _clean_staging(client, replace(base, job_id=name), published, f"streaming batch {batch_id} aborted")


__all__ = [
    "StreamSettings", "StreamTaskResult", "abort_stream_batch", "commit_stream_batch",
    "parse_stream_options", "spark_run_id", "stream_write_task",
]
