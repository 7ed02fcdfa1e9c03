"""Spark reads offloaded history (issue 34): a raw and an Arrow log written by Spark, offloaded to a
directory, then every bookie stopped: batch reads and a readStream from earliest return the same
rows with the same positions (executors read the files by row group, never a bookie); and
spark.read.parquet over the store's log directory reads the same data as a plain dataset."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloader import offload_pass
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.stream_start import start_query

WAIT_S = 600  # generous: a shared, loaded machine


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, metadata_uri=f"sqlite://{tmp_path / 'metadata.db'}", work_dir=tmp_path / "cluster") as c:
        yield c


def write(spark: SparkSession, uri: str, name: str, first: int, n: int, fmt: str) -> None:
    ids = spark.range(first, first + n, numPartitions=2)
    df = ids.select(F.col("id").cast("string").cast("binary").alias("payload")) if fmt == "raw" else \
        ids.select(F.col("id"), F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"))
    df.write.format("ledger").option("metadataServiceUri", uri).option("log", name).option("payloadFormat", fmt) \
        .option("arrowBatchRows", 50).mode("append").save()


def batch(spark: SparkSession, uri: str, name: str) -> DataFrame:
    return spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name).load()


def stream_rows(spark: SparkSession, uri: str, name: str, checkpoint: Path) -> list[tuple[object, ...]]:
    table = "offloaded_" + uuid.uuid4().hex[:8]
    q = start_query(lambda: spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", name)
                    .option("startingPosition", "earliest").load()
                    .writeStream.format("memory").queryName(table).option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(WAIT_S), "the stream did not finish"
    return sorted(tuple(r) for r in spark.table(table).collect())


def rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_spark_reads_offloaded_logs_with_every_bookie_stopped(spark: SparkSession, cluster: LocalCluster,
                                                              tmp_path: Path) -> None:
    uri = cluster.metadata_uri
    store = tmp_path / "offload"
    write(spark, uri, "raw", 0, 200, "raw")
    write(spark, uri, "arrow", 0, 200, "arrow")
    before = {n: rows(batch(spark, uri, n)) for n in ("raw", "arrow")}
    with LedgerClient(uri) as client:
        done = offload_pass(client, store=f"file://{store}", everything=True)
        assert len(done.offloaded) == sum(len(client.describe_log(n).ledgers) for n in ("raw", "arrow"))
    for b in cluster.bookies:
        b.stop()
    for n in ("raw", "arrow"):
        assert rows(batch(spark, uri, n)) == before[n], n
        assert stream_rows(spark, uri, n, tmp_path / f"cp-{n}") == before[n], n
    # The plain Parquet view of the same history (file:// needs nothing but Spark itself).
    arrow_plain = spark.read.parquet(f"file://{store}/arrow").select("id", "v")
    assert rows(arrow_plain) == sorted((r[0], r[1]) for r in before["arrow"])
    raw_plain = spark.read.parquet(f"file://{store}/raw").select("payload", "seq", "entry")
    assert sorted(bytes(r[0]) for r in raw_plain.collect()) == sorted(bytes(r[0]) for r in before["raw"])
