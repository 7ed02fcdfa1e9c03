"""What the cluster tests ask a driver process to do (tests/spark_cluster/driver.py serves these):
the same steps for a standalone cluster's driver and a Spark Connect client, each taking the
session and JSON-able arguments and returning JSON-able results for the test to check."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.testing.task_process import task_process

ARROW_SCHEMA = "id bigint, name string, score double"
POSITION = ["seq", "entry", "index"]


def _ledger(uri: str, log: str, **extra: str) -> dict[str, str]:
    return {"metadataServiceUri": uri, "log": log, **extra}


def write_raw(spark: SparkSession, uri: str, log: str, payloads: list[str], partitions: int) -> None:
    df = spark.createDataFrame([(p.encode(),) for p in payloads], "payload binary").repartition(partitions)
    df.write.format("ledger").options(**_ledger(uri, log)).mode("append").save()


def read_raw(spark: SparkSession, uri: str, log: str) -> list[str]:
    rows = spark.read.format("ledger").options(**_ledger(uri, log)).load().orderBy(*POSITION).collect()
    return [bytes(r.payload).decode() for r in rows]


def write_arrow(spark: SparkSession, uri: str, log: str, rows: list[list[Any]], partitions: int, batch_rows: int) -> None:
    df = spark.createDataFrame([tuple(r) for r in rows], ARROW_SCHEMA).repartition(partitions)
    df.write.format("ledger").options(**_ledger(uri, log, payloadFormat="arrow", arrowBatchRows=str(batch_rows))) \
        .mode("append").save()


def read_arrow(spark: SparkSession, uri: str, log: str) -> dict[str, Any]:
    df = spark.read.format("ledger").options(**_ledger(uri, log)).load()
    rows = df.orderBy(*POSITION).collect()
    return {"columns": df.columns, "rows": [[r.id, r.name, r.score] for r in rows],
            "entries": len({(r.seq, r.entry) for r in rows})}


def task_processes(spark: SparkSession, tasks: int) -> list[dict[str, Any]]:
    """Where `tasks` tasks ran: each reports its Python worker and the JVM above it."""
    where = F.udf(lambda _: json.dumps(task_process()), "string")
    df = spark.range(0, tasks, 1, tasks).select(where(F.col("id")).alias("where"))
    return [json.loads(r.where) for r in df.collect()]


def driver_processes(spark: SparkSession) -> dict[str, Any]:
    """This driver's own processes (classic sessions: its JVM too) and the executors it sees."""
    info: dict[str, Any] = {"pid": os.getpid()}
    context = getattr(spark, "sparkContext", None) if not _is_connect(spark) else None
    if context is not None:
        jvm = context._jvm  # py4j: the driver JVM's view, for the tests' cross-check only
        info["jvm_pid"] = int(jvm.java.lang.ProcessHandle.current().pid())
        info["app_id"] = context.applicationId
        # SparkStatusTracker.getExecutorInfos lists the driver too.
        info["executor_count"] = len(context._jsc.sc().statusTracker().getExecutorInfos()) - 1
    return info


def wait_for_executors(spark: SparkSession, count: int, timeout_s: float) -> int:
    """Until `count` executors registered with this driver (bounded), so tasks spread over them."""
    deadline = time.monotonic() + timeout_s
    while (seen := driver_processes(spark)["executor_count"]) < count and time.monotonic() < deadline:
        time.sleep(0.25)
    return int(seen)


def stream_copy(spark: SparkSession, uri: str, source: str, sink: str, checkpoint: str, max_entries: int,
                timeout_s: float) -> list[int]:
    """readStream ledger -> writeStream ledger, Trigger.AvailableNow from the checkpoint: the
    rows per micro-batch (the query stops by itself when it caught up, or fails the step)."""
    src = spark.readStream.format("ledger").options(**_ledger(uri, source, maxEntriesPerTrigger=str(max_entries))).load()
    query = (src.select("payload").writeStream.format("ledger").options(**_ledger(uri, sink))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise TimeoutError(f"the streaming query did not catch up within {timeout_s:g} s")
    # The property, not ["numInputRows"]: over Connect the progress JSON may leave the key out.
    return [int(p.numInputRows) for p in query.recentProgress]


def read_raw_unregistered(spark: SparkSession, url: str, uri: str, log: str) -> list[str]:
    """read_raw in a new Connect session of the same client, one that registered nothing."""
    fresh = SparkSession.builder.remote(url).create()
    try:
        return read_raw(fresh, uri, log)
    finally:
        fresh.stop()


def count_with_options(spark: SparkSession, uri: str, options: dict[str, str]) -> int:
    """A batch read with options of the test's choosing (user mistakes included)."""
    return int(spark.read.format("ledger").option("metadataServiceUri", uri).options(**options).load().count())


def _is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def steps_for(spark: SparkSession) -> dict[str, Callable[..., Any]]:
    named: list[Callable[..., Any]] = [write_raw, read_raw, write_arrow, read_arrow, task_processes, driver_processes,
                                       wait_for_executors, stream_copy, count_with_options,
                                       read_raw_unregistered]
    return {f.__name__: (lambda f: lambda **kw: f(spark, **kw))(f) for f in named}

