"""`ledger recover --bookie` on a ledger written by Spark in Arrow (entries of ~2 MiB, over 64 MiB
in one ledger): real bookies, a real ZooKeeper, a local SparkSession, the command's main."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

ROWS = 400_000  # ~200 bytes of hex a row: ~80 MiB in one ledger
ARROW_BATCH_ROWS = 10_000  # ~2 MiB entries
LEDGER_BYTES_MIN = 64 * 2**20


def test_recover_bookie_of_an_arrow_ledger_written_by_spark(capsys: pytest.CaptureFixture[str], zk_uri: str,
                                                             tmp_path: Path, spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    cluster = LocalCluster(4, metadata_uri=zk_uri, work_dir=tmp_path / "cluster").start()
    try:
        key = F.col("id").cast("string")
        df = spark.range(0, ROWS, numPartitions=1).select(
            F.col("id"), F.sha2(key, 512).alias("a"), F.sha2(key, 256).alias("b"))
        df.write.format("ledger").options(
            metadataServiceUri=cluster.metadata_uri, log="arrowlog", payloadFormat="arrow",
            arrowBatchRows=str(ARROW_BATCH_ROWS), arrowCompression="none").mode("append").save()
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
            (lg,) = client.describe_log("arrowlog").ledgers
            meta = client.ledger_metadata(lg.ledger_id)
            assert meta.length_bytes > LEDGER_BYTES_MIN and meta.last_entry_id >= 1
            with client.open_ledger(lg.ledger_id) as reader:
                digests = [hashlib.sha256(reader.read_entry(i).payload).digest() for i in range(meta.last_entry_id + 1)]
        ensemble = meta.segments[0].bookies
        by_id = {b.bookie_id: b for b in cluster.bookies}
        victim = by_id[ensemble[0]]
        (spare,) = [b for b in cluster.bookies if b.bookie_id not in ensemble]
        victim.kill()
        code = main(["--metadata-uri", cluster.metadata_uri, "recover", "--bookie", victim.bookie_id])
        out, err = capsys.readouterr()
        assert code == 0, err[-2000:]
        assert f"{victim.bookie_id} -> {spare.bookie_id}" in out, out
        for b in ensemble[1:]:
            by_id[b].kill()  # the replacement alone holds the ledger now
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
            assert client.ledger_metadata(lg.ledger_id).segments[0].bookies[0] == spare.bookie_id
            with client.open_ledger(lg.ledger_id) as reader:
                for i, digest in enumerate(digests):
                    assert hashlib.sha256(reader.read_entry(i).payload).digest() == digest, f"entry {i} differs"
    finally:
        cluster.close()
