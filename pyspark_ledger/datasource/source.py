"""The Spark glue: `DefaultSource` (format "ledger"), its batch reader and its Arrow writer.

Nothing but translation lives here: Spark's options -> LedgerSourceOptions, planned ranges ->
input partitions, TaskContext -> the attempt's ids. Planning, reading and committing are in
read/planning.py, read/reader.py and write/job.py, which do not import pyspark.

Spark finds this class by itself (it imports every top-level `pyspark_*` module and looks for
`DefaultSource`; `pyspark_ledger.DefaultSource` loads this module lazily) or through
`spark.dataSource.register(LedgerDataSource)`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type
from pyspark.sql.types import StructField, StructType

from pyspark_ledger.datasource import SOURCE_NAME
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError, OptionError, user_errors, user_errors_in_iterator
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions, parse_options
from pyspark_ledger.datasource.read.columns import chosen_columns
from pyspark_ledger.datasource.read.planning import LedgerRange, plan_ranges, shape_of
from pyspark_ledger.datasource.read.pushdown import PushedFilters, claim
from pyspark_ledger.datasource.read.reader import ReadSpec, read_partition
from pyspark_ledger.datasource.read.spark_filters import conditions
from pyspark_ledger.datasource.read.spark_schema import data_schema, read_columns, spark_arrow_schema
from pyspark_ledger.datasource.read.time_filter import time_filter
from pyspark_ledger.datasource.rows import raw_read_schema
from pyspark_ledger.datasource.write.columns import ROUTE_COLUMN, WriteLayout, plan_layout
from pyspark_ledger.datasource.write.job import (
    TaskResult,
    WriteJob,
    abort_job,
    commit_job,
    new_job_id,
    prepare_job,
)
from pyspark_ledger.datasource.write.routed import abort_routed_job, commit_routed_job, prepare_routed_job
from pyspark_ledger.datasource.write.task import write_routed_task, write_task

log = logging.getLogger(__name__)

# payload, then where each row is (rows.py: log, seq, ledger, entry, index, timestamp).
RAW_SCHEMA = from_arrow_schema(raw_read_schema())


def _all_nullable(value: Any) -> Any:
    """A schema's JSON with every field and element nullable: appends of DataFrames that differ
    only in nullability are the same log schema, and reads never promise non-null."""
    if isinstance(value, list):
        return [_all_nullable(v) for v in value]
    if isinstance(value, dict):
        out = {k: _all_nullable(v) for k, v in value.items()}
        for key in ("nullable", "containsNull", "valueContainsNull"):
            if key in out:
                out[key] = True
        return out
    return value


def log_schema_json(schema: StructType) -> str:
    return json.dumps(_all_nullable(schema.jsonValue()), sort_keys=True, separators=(",", ":"))


class LedgerDataSource(DataSource):
    """`spark.read.format("ledger")` and `df.write.format("ledger")`; options in README "Spark"."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _options(self) -> LedgerSourceOptions:
        # The streaming-only options are split off here (and parsed by the stream classes).
        from pyspark_ledger.datasource.stream.sink import parse_stream_options

        return parse_stream_options(dict(self.options))[0]

    @user_errors
    def schema(self) -> StructType:
        opts = self._options()
        with lease_client(opts) as client:
            data = data_schema(client, opts, shape_of(client, opts))
        # The written columns as recorded, then the metadata columns metadataColumns keeps
        # (renamed where a written one shadows them, read/columns.py), then headers (includeHeaders).
        chosen = chosen_columns(spark_arrow_schema(data), opts.metadata_columns, opts.include_headers)
        meta = [StructField(f.name, from_arrow_type(f.type)) for f in chosen.schema][len(data.fields):]
        return StructType(list(data.fields) + meta)

    @user_errors
    def reader(self, schema: StructType) -> LedgerReader:
        _no_subscription(self.options, "a batch read neither starts from nor moves a subscription (PySpark's batch "
                         "reader has no end-of-job hook): readStream takes it, or start a batch read at its position "
                         "(startingPosition from `ledger subscriptions list`)")
        opts = self._options()
        return PushdownLedgerReader(opts, schema) if opts.push_filters else LedgerReader(opts, schema)

    @user_errors
    def writer(self, schema: StructType, overwrite: bool) -> LedgerWriter:
        if ROUTE_COLUMN in schema.fieldNames():  # rows name their logs: option log is not needed
            return LedgerWriter(parse_options(dict(self.options), target_required=False), schema, overwrite)
        return LedgerWriter(self._options(), schema, overwrite)

    @user_errors
    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802 - Spark's API
        from pyspark_ledger.datasource.stream.sink import parse_stream_options
        from pyspark_ledger.datasource.stream.source import LedgerStreamWriter

        _no_subscription(self.options, "a subscription is a reader's position: it is an option of readStream, "
                         "not of writeStream")
        opts, settings = parse_stream_options(dict(self.options))
        return LedgerStreamWriter(opts, settings, schema, overwrite, log_schema_json(schema))

    @user_errors
    def streamReader(self, schema: StructType) -> Any:  # noqa: N802 - Spark's API
        from pyspark_ledger.datasource.stream.sink import parse_stream_options
        from pyspark_ledger.datasource.stream.source import LedgerStreamReader

        opts, settings = parse_stream_options(dict(self.options))
        return LedgerStreamReader(opts, settings, schema)


DefaultSource = LedgerDataSource


def _no_subscription(options: Any, why: str) -> None:
    if any(str(k).lower() == "subscription" for k in dict(options)):
        raise OptionError("subscription", why)


# ---- reading -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerPartition(InputPartition):
    """One planned range (a fragment of a ledger, at most maxEntriesPerPartition entries)."""

    range: LedgerRange


class LedgerReader(DataSourceReader):
    """Pickled to executors: holds options, the output columns and the pushed filters only,
    never a client. It does not override pushFilters (PySpark refuses a reader that does in a
    session without filter pushdown): PushdownLedgerReader does, for option pushFilters=true."""

    def __init__(self, opts: LedgerSourceOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        with lease_client(opts) as client:
            shape = shape_of(client, opts)
            self.columns = read_columns(client, opts, schema, shape)
        self.payload_format = shape.payload_format
        self.arrow_schema = self.columns.schema
        self.pushed: PushedFilters | None = None

    @user_errors
    def partitions(self) -> list[InputPartition]:
        with lease_client(self.opts) as client:
            return [LedgerPartition(r) for r in plan_ranges(client, self.opts, self.payload_format, self.pushed)]

    @user_errors_in_iterator
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LedgerPartition):
            return  # Spark's placeholder partition for an empty plan
        times = time_filter(self.pushed.conditions) if self.pushed is not None else None
        yield from read_partition(self.opts, partition.range, ReadSpec(self.payload_format, self.arrow_schema,
                                                                       self.opts.password, self.columns, times or None))


class PushdownLedgerReader(LedgerReader):
    """A batch read with option pushFilters=true: it claims the filters on log, seq, ledger,
    timestamp and entry that read/pushdown.py applies exactly (at planning; timestamp conditions
    on rows with times of their own also in read(), read/time_filter.py), so Spark checks them
    no more, and hands every other one back to Spark."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - Spark's API
        found = conditions(filters, self.columns.output_names())
        if self.columns.event_time:
            # timestampSource=event: a row's time is its event time where it has one, which the
            # recorded append times do not bound; Spark keeps timestamp filters.
            found = [None if c is not None and c.column == "timestamp" else c for c in found]
        self.pushed, kept = claim(found)
        log.info("filters pushed target=%s claimed=%d left_to_spark=%d", self.opts.target,
                 len(self.pushed.conditions), len(kept))
        return [filters[i] for i in kept]


# ---- writing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerCommitMessage(WriterCommitMessage):
    results: tuple[TaskResult, ...]  # one per log the attempt wrote (one-log jobs: exactly one)


class LedgerWriter(DataSourceArrowWriter):
    """Created once on the driver (the job is prepared then); pickled to tasks and to commit/abort.
    A DataFrame with a `log` column is a routed write (write/routed.py)."""

    def __init__(self, opts: LedgerSourceOptions, schema: StructType, overwrite: bool):
        names = schema.fieldNames()
        types = {f.name: f.dataType.simpleString() for f in schema.fields}

        def layout_of(fmt: str) -> WriteLayout:
            return plan_layout(fmt, names, types, log_schema_json(schema), opts.log, opts.event_time_column)

        self.routed = ROUTE_COLUMN in names
        prepare = prepare_routed_job if self.routed else prepare_job
        self.job: WriteJob = prepare(opts, new_job_id(), layout_of, overwrite)

    @user_errors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise LedgerSourceError("write() must run inside a Spark task")
        ids = (ctx.partitionId(), ctx.attemptNumber(), ctx.taskAttemptId())
        if self.routed:
            return LedgerCommitMessage(tuple(write_routed_task(self.job, iterator, *ids)))
        return LedgerCommitMessage((write_task(self.job, iterator, *ids),))

    @user_errors
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        results = [r for m in messages if isinstance(m, LedgerCommitMessage) for r in m.results]
        (commit_routed_job if self.routed else commit_job)(self.job, list(results))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # The messages are not enough (failed attempts that wrote data arrive as None): the
        # job's staging nodes list every attempt's ledger.
        (abort_routed_job if self.routed else abort_job)(self.job)
