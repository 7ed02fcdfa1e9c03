"""Spark glue for streaming: `writeStream.format("ledger")` and `readStream.format("ledger")`.

Translation only; the protocol lives in sink.py (no pyspark there).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from metadata.log_record import LogRecord
from metadata.logs import LogExistsError
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError, LedgerUserError, user_errors
from pyspark_ledger.datasource.options.read import check_stream_read
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.planning import LedgerRange, shape_of
from pyspark_ledger.datasource.read.reader import ReadSpec, read_partition
from pyspark_ledger.datasource.read.spark_schema import read_columns
from pyspark_ledger.datasource.stream.admission import Limit
from pyspark_ledger.datasource.stream.offsets import StreamOffset, offset_from_json, offset_to_json
from pyspark_ledger.datasource.stream.plan import plan_batch
from pyspark_ledger.datasource.stream.read import available_now_target, initial_offsets, next_batch, single_log
from pyspark_ledger.datasource.stream.sink import (
    StreamSettings,
    StreamTaskResult,
    abort_stream_batch,
    commit_stream_batch,
    spark_run_id,
    stream_write_task,
)
from pyspark_ledger.datasource.stream.subscription import commit_subscription
from pyspark_ledger.datasource.stream.trigger_gate import TriggerGate
from pyspark_ledger.datasource.write.columns import (
    ROUTE_COLUMN,
    STREAM_REMEDY,
    WriteSchemaError,
    check_against_log,
    plan_layout,
)
from pyspark_ledger.datasource.write.job import WriteJob, batches_allowed

log = logging.getLogger(__name__)


# ---- sink --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamCommitMessage(WriterCommitMessage):
    result: StreamTaskResult


class LedgerStreamWriter(DataSourceStreamArrowWriter):
    """Created on the driver when the query starts (and again after every restart: run_id tells
    this run's staging from a crashed one's)."""

    def __init__(self, opts: LedgerSourceOptions, settings: StreamSettings, schema: StructType, overwrite: bool,
                 schema_json: str | None):
        if overwrite:
            raise LedgerSourceError(
                "a streaming sink only appends: use outputMode append (complete/update would rewrite the log)")
        names = schema.fieldNames()
        if ROUTE_COLUMN in names:
            raise WriteSchemaError("a streaming sink writes one log (option log): a `log` column routes rows only in "
                                   "batch writes; drop the column, or write each micro-batch with foreachBatch")
        name = opts.require_log("writing")
        types = {f.name: f.dataType.simpleString() for f in schema.fields}
        with lease_client(opts) as client:
            existing = client.logs.get_tail(name)  # the head view: format, schema and the open tail
            rec = existing[0] if existing is not None else None
            fmt = opts.payload_format or (rec.payload_format if rec is not None and rec.ledgers else "raw")
            # The same columns, key and schema rules as a batch append (write/columns.py).
            layout = plan_layout(fmt, names, types, schema_json or "{}", opts.log, opts.event_time_column)
            if rec is not None:
                check_against_log(rec, layout, STREAM_REMEDY)
            else:
                try:
                    client.logs.create(LogRecord(name))
                except LogExistsError:
                    pass
            batched = batches_allowed(client, opts, fmt)
        self.job = WriteJob(opts, name, "stream", fmt, layout.schema_json, False, key_type=layout.key_type,
                            batched=batched)
        self.run_id = uuid.uuid4().hex[:12]
        self.fail_commit = settings.test_fail_commit

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise LedgerSourceError("write() must run inside a Spark task")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch_id is None:
            raise LedgerSourceError("the streaming sink could not find the query id and batch id of this task")
        # The query's run (its writer epoch is per run): Spark's run id; self.run_id is per batch.
        run_id = spark_run_id(ctx.getLocalProperty("spark.job.description"),
                              ctx.getLocalProperty("spark.jobGroup.id")) or self.run_id
        result = stream_write_task(self.job, run_id, iterator, ctx.partitionId(), ctx.attemptNumber(),
                                   ctx.taskAttemptId(), query_id, int(batch_id))
        return StreamCommitMessage(result)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's API
        commit_stream_batch(self.job, self.run_id, [m.result if isinstance(m, StreamCommitMessage) else None for m in messages],
                            batchId, self.fail_commit)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's API
        results = [m.result if isinstance(m, StreamCommitMessage) else None for m in messages]
        abort_stream_batch(self.job, self.run_id, results, batchId)


# ---- source ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPartition(InputPartition):
    range: LedgerRange


def _limit(limit: ReadLimit, settings: StreamSettings) -> Limit:
    """Spark's ReadLimit as ours. Spark's Python API passes one bound (ReadMaxRows or ReadMaxBytes,
    and no composite of both), so getDefaultReadLimit names one and the other comes from the
    options; ReadAllAvailable (Trigger.Once, or a trigger that asks for all) overrides both."""
    if isinstance(limit, ReadAllAvailable):
        return Limit()
    entries, size = settings.max_entries_per_trigger, settings.max_bytes_per_trigger
    if isinstance(limit, ReadMaxRows):
        entries = limit.max_rows if entries is None else min(entries, limit.max_rows)
    if isinstance(limit, ReadMaxBytes):
        size = limit.max_bytes if size is None else min(size, limit.max_bytes)
    return Limit(entries, size)


def _gated(limit: ReadLimit, target: StreamOffset | None) -> bool:
    """Whether minEntriesPerTrigger / maxTriggerDelay may hold this micro-batch back. Not under
    Trigger.AvailableNow (a target is set) nor Trigger.Once (Spark swaps the default limit, never
    ReadAllAvailable when a gate is set, for ReadAllAvailable): both read all there is at once,
    as Kafka's source does with minOffsetsPerTrigger."""
    return target is None and not isinstance(limit, ReadAllAvailable)


class LedgerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in one Python process on the driver for the whole query run: the AvailableNow target
    and the last lag report stay in memory between Spark's calls."""

    def __init__(self, opts: LedgerSourceOptions, settings: StreamSettings, schema: StructType):
        self.opts = opts
        self.settings = settings
        self.schema = schema
        self._target: StreamOffset | None = None  # Trigger.AvailableNow's end
        self._report: dict[str, Any] | None = None  # the last latestOffset's lag, for the progress
        # minEntriesPerTrigger / maxTriggerDelay: the delay is kept here, on the driver, for the run.
        self._gate = None if settings.trigger_delay is None else \
            TriggerGate(settings.trigger_delay, lambda: time.monotonic() * 1000)
        # Spark's stream runner (pyspark 4.2-4.3) masks an error raised while the reader is made
        # (its `finally: reader.stop()` then fails on the unbound name): a user mistake found
        # here is raised by the first call instead, where it reaches the user as one line.
        self._error: LedgerUserError | None = None
        try:
            check_stream_read(opts.read)
            with lease_client(opts) as client:
                self.shape = shape_of(client, opts)
                self.columns = read_columns(client, opts, schema, self.shape)  # metadataColumns, a user schema
        except LedgerUserError as exc:
            self._error = exc
            return
        self.payload_format = self.shape.payload_format

    def _ready(self) -> None:
        if self._error is not None:
            raise self._error

    def _offset(self, d: dict[str, Any]) -> StreamOffset:
        return offset_from_json(d, single_log(self.opts))

    @user_errors
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's API
        self._ready()
        with lease_client(self.opts) as client:
            return offset_to_json(initial_offsets(client, self.opts, self.payload_format, self.settings.subscription))

    @user_errors
    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's API
        self._ready()
        if self.settings.max_entries_per_trigger is not None:
            return ReadMaxRows(self.settings.max_entries_per_trigger)
        if self.settings.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.settings.max_bytes_per_trigger)
        if self.settings.trigger_delay is not None:
            # Never ReadAllAvailable with a gate: Spark passes ReadAllAvailable instead of this
            # limit only for Trigger.Once, which latestOffset then does not hold back.
            return ReadMinRows(self.settings.trigger_delay.min_entries)
        return ReadAllAvailable()

    @user_errors
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - Spark's API
        self._ready()
        with lease_client(self.opts) as client:
            gate = None if self._gate is None or not _gated(limit, self._target) else self._gate.admit
            batch = next_batch(client, self.opts, self.shape, self._offset(start), _limit(limit, self.settings),
                               self._target, gate)
        self._report = batch.report()
        return offset_to_json(batch.end)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark's API
        return self._report

    @user_errors
    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's API
        self._ready()
        with lease_client(self.opts) as client:
            self._target = available_now_target(client, self.opts)
        log.info("Trigger.AvailableNow target offset=%s", offset_to_json(self._target))

    @user_errors
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self._ready()
        with lease_client(self.opts) as client:
            ranges = plan_batch(client, self.opts, self._offset(start), self._offset(end))
        return [StreamPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamPartition)
        yield from read_partition(self.opts, partition.range,
                                  ReadSpec(self.payload_format, self.columns.schema, self.opts.password, self.columns))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the micro-batch ending at `end` (late or twice, maybe). Offsets live in
        Spark's checkpoint; with option `subscription` the log service keeps a copy, moved here
        (stream/subscription.py), which retention respects and a query without its checkpoint
        resumes from. Without it, nothing to do: retention alone decides what the log keeps."""
        if self.settings.subscription is None:
            return
        with lease_client(self.opts) as client:
            commit_subscription(client, self._offset(end), self.settings.subscription)

    def stop(self) -> None:
        return None
