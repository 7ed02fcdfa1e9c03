"""Where a Spark read of format("ledger") spends its time, in one run on one machine.

Writes the Arrow workload of spark_bench.py (N rows of id bigint + 100 B random payload; --raw:
N entries of 100 B) once, then times (after one untimed run of every query, so that the JVM's JIT has compiled the shared
path before any query is timed), each as the median of --rounds runs after a warm-up, with
the CPU each kind of process (the JVM, its Python workers, the bookies) spent per run:

  spark ledger      spark.read.format("ledger") ... noop sink: the whole query (all six
                    metadata columns, and again with metadataColumns=none)
  spark parquet     the same rows as Parquet, noop sink
  spark replay      a Python data source that yields the very batches our reader produced,
                    from memory: Spark's own cost of a Python source (planning, task launch,
                    Arrow from the Python worker to the JVM, rows into the noop sink), without
                    any ledger work; the floor a Python data source can reach here (with
                    "data columns only": the floor of a read with metadataColumns=none)
  spark replay data the same, with the data columns only (no log, seq, ledger, entry, index,
                    timestamp): what the metadata columns cost Spark per row
  spark replay 5    the data columns and log, seq, ledger (two strings and a long)
  replay non-null   every column declared non-null (Spark's projection skips null checks), or
                    the metadata columns only
  parquet 8 cols    the ledger read's rows (data + metadata columns) as Parquet, noop sink
  spark empty       format("ledger") on an empty log: the fixed cost of one query (planning:
                    metadata reads, LAC, Python workers for schema and partitions)
  reader only       pyspark_ledger.datasource.read.reader.read_range over the planned ranges, in
                    this process, no Spark (with --profile: cProfile's top functions)

    python bench/spark_read_breakdown.py [--rows 2000000] [--rounds 3] [--raw] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
from machine_speed import machine_speed_line
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType
from spark_timing import cpu_by_kind, noop, payload_column

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.planning import plan_ranges, shape_of
from pyspark_ledger.datasource.read.reader import ReadSpec, read_range
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session

REPLAY_FILE = "replay.arrows"


def _nonnull(fields: list[pa.Field], which: str) -> list[pa.Field]:
    """The fields with `which` ("all", "meta": the 6 metadata columns, "": none) non-null."""
    first = {"all": 0, "meta": len(fields) - 6}.get(which, len(fields))
    return [f.with_nullable(False) if i >= first else f for i, f in enumerate(fields)]


class ReplaySource(DataSource):
    """Yields the batches saved in an Arrow IPC file, one partition per part file."""

    @classmethod
    def name(cls) -> str:
        return "ledger_replay"

    def schema(self) -> StructType:
        with pa.memory_map(self.options["path"] + ".0") as f:
            schema = pa.ipc.open_file(f).schema
        columns = int(self.options.get("columns", 0)) or len(schema)
        fields = _nonnull(list(schema), self.options.get("nonnull", ""))[:columns]
        return from_arrow_schema(pa.schema(fields))

    def reader(self, schema: StructType) -> DataSourceReader:
        return ReplayReader(self.options["path"], int(self.options["parts"]), int(self.options.get("columns", 0)),
                            self.options.get("nonnull", ""))


class ReplayReader(DataSourceReader):
    def __init__(self, path: str, parts: int, columns: int, nonnull: str):
        self.path, self.parts, self.columns, self.nonnull = path, parts, columns, nonnull

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(f"{self.path}.{partition.value}") as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                if self.nonnull:
                    schema = pa.schema(_nonnull(list(batch.schema), self.nonnull))
                    batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
                yield batch.select(range(self.columns)) if self.columns else batch


CPU: dict[str, dict[str, float]] = {}  # per measurement: CPU seconds per run, by kind


def median_s(fn: Callable[[], Any], rounds: int, name: str = "") -> float:
    fn()
    times = []
    before = cpu_by_kind()
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    after = cpu_by_kind()
    if name:
        CPU[name] = {k: (after[k] - before[k]) / rounds for k in after}
    return statistics.median(times)


def reader_alone(uri: str, schema: StructType, work: Path, rounds: int, profile: bool) -> tuple[float, int, int]:
    """The reader in this process over the plan Spark would get: its median time, the ranges and
    the batches; the batches are saved (one file per range) for the replay source."""
    from pyspark_ledger.datasource.read.spark_schema import spark_arrow_schema

    opts = parse_options({"metadataserviceuri": uri, "log": "bench"})
    with LedgerClient(uri) as client:
        shape = shape_of(client, opts)
        ranges = plan_ranges(client, opts, shape.payload_format)
        spec = ReadSpec(shape.payload_format, spark_arrow_schema(schema), b"")

        def read_all() -> int:
            return sum(b.num_rows for r in ranges for b in read_range(client, r, spec))

        t_reader = median_s(read_all, rounds)
        if profile:
            prof = cProfile.Profile()
            prof.runcall(read_all)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        batches = 0
        for i, r in enumerate(ranges):
            with pa.OSFile(str(work / f"{REPLAY_FILE}.{i}"), "wb") as sink, pa.ipc.new_file(sink, spec.schema) as w:
                for b in read_range(client, r, spec):
                    w.write_batch(b)
                    batches += 1
    return t_reader, len(ranges), batches


def spark_figures(spark: SparkSession, uri: str, work: Path, parts: int, columns: int, rounds: int) -> dict[str, float]:
    """Median seconds of each Spark query of the module doc (CPU per process kind in CPU)."""
    def ledger(name: str, columns: str = "all") -> None:
        noop(spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name)
             .option("metadataColumns", columns).load())

    def replay(**options: str) -> Callable[[], None]:
        return lambda: noop(spark.read.format("ledger_replay").option("path", str(work / REPLAY_FILE))
                            .option("parts", str(parts)).options(**options).load())

    pq8 = str(work / "eight.parquet")
    spark.read.format("ledger").option("metadataServiceUri", uri).option("log", "bench").load().write.parquet(pq8)
    data_columns = columns - 6
    queries: list[tuple[str, Callable[[], None]]] = [
        ("spark ledger", lambda: ledger("bench")),
        ("spark ledger, metadataColumns=none", lambda: ledger("bench", "none")),
        ("spark parquet", lambda: noop(spark.read.parquet(str(work / "data.parquet")))),
        ("spark replay (from memory)", replay()),
        ("spark replay, data columns only", replay(columns=str(data_columns))),
        ("spark replay, data + log, seq, ledger", replay(columns=str(data_columns + 3))),
        ("spark replay, every column non-null", replay(nonnull="all")),
        ("spark replay, metadata columns non-null", replay(nonnull="meta")),
        ("parquet of the read's rows", lambda: noop(spark.read.parquet(pq8))),
        ("spark empty ledger log", lambda: ledger("empty")),
    ]
    for _, fn in queries:  # warm the JVM's JIT on every query first: else later queries look faster
        fn()
    return {name: median_s(fn, rounds, name) for name, fn in queries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--raw", action="store_true", help="the raw workload: one 100 B entry per row")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process reader")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    fmt = "raw" if args.raw else "arrow"

    work = Path(tempfile.mkdtemp(prefix="spark-read-breakdown-"))
    cluster = LocalCluster(3, work_dir=work / "cluster").start()
    spark: SparkSession = local_spark_session("spark-read-breakdown")
    spark.dataSource.register(ReplaySource)
    uri = cluster.metadata_uri
    try:
        payload = payload_column("random").alias("payload")
        cols = [payload] if args.raw else [F.col("id"), payload]
        df: DataFrame = spark.range(args.rows, numPartitions=2).select(*cols).cache()
        df.count()
        for name, data in (("bench", df), ("empty", spark.createDataFrame([], df.schema))):
            data.write.format("ledger").option("metadataServiceUri", uri).option("log", name).option(
                "payloadFormat", fmt).mode("overwrite").save()
        df.write.parquet(str(work / "data.parquet"))
        schema = spark.read.format("ledger").option("metadataServiceUri", uri).option("log", "bench").load().schema
        t_reader, parts, batches = reader_alone(uri, schema, work, args.rounds, args.profile)
        figures = spark_figures(spark, uri, work, parts, len(schema), args.rounds)
        figures["reader only (1 thread, no Spark)"] = t_reader
    finally:
        spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)

    print("\n" + machine_speed_line())
    print(f"{fmt}: {args.rows:,} rows, {parts} ranges, {batches} batches; median of {args.rounds} after a warm-up; "
          "CPU per run by process (Python workers' figure is approximate: a worker Spark kills is not counted)")
    for name, t in figures.items():
        cpu = " | ".join(f"{k} {v:5.2f} s" for k, v in CPU.get(name, {}).items())
        print(f"| {name:<38} | {t:6.3f} s | {args.rows / t / 1e6:6.2f}M rows/s | {cpu}")


if __name__ == "__main__":
    main()
