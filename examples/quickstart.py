"""Quickstart: a replicated log that Spark writes and reads natively, on one machine.

Starts an embedded cluster (a SQLite metadata store at $PYSPARK_LEDGER_HOME/metadata.db, by
default ~/.pyspark-ledger/metadata.db, and 3 `bookie` processes on loopback), then:

1. writes a DataFrame of orders to the log "quickstart" with df.write.format("ledger")
   (mode overwrite: the log is replaced in one step, so re-running starts from the same place),
2. appends more orders (mode append: the job's ledgers appear in the log atomically),
3. reads the log back with spark.read.format("ledger") and prints rows and counts,
4. does the same with raw entries (one binary payload per entry, readable by any client).

No metadataServiceUri option is given: the data source's default is the same embedded store.
The bookies stop when the script exits; the data stays in the home directory (delete it to
start from nothing). `ledger standalone` starts the same bookies again and keeps them up, so
the shell and Spark can read what this wrote; while it runs, this script uses its bookies.

    python3 examples/quickstart.py
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metadata.embedded_store import embedded_path_from_env_default
from pyspark_ledger.cli.standalone_pidfile import running_standalone
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    home = embedded_path_from_env_default().parent
    standalone_pid = running_standalone(home)
    if standalone_pid is not None:  # `ledger standalone` already runs these bookies on this data
        print(f"using the standalone cluster running on {home} (pid {standalone_pid})")
        spark_run()
        print(f"done in {time.monotonic() - started:.1f} s")
        return
    with LocalCluster.embedded(3) as cluster:
        print(f"embedded cluster: {cluster.metadata_uri} and {len(cluster.bookies)} bookies "
              f"({', '.join(b.address for b in cluster.bookies)})")
        spark_run()
    print(f"done in {time.monotonic() - started:.1f} s")
    print("The bookies stopped with this script; the data stays. To read it again (`ledger readledger 1`, "
          "`ledger logs list`, spark.read.format(\"ledger\")), keep the same cluster up with: ledger standalone")


def spark_run() -> None:
    # The `ledger` source: Spark finds it by itself when pyspark_ledger is a top-level module on the
    # workers' sys.path; local_spark_session registers it by hand when Spark did not.
    spark = local_spark_session("ledger-quickstart", conf={"spark.ui.showConsoleProgress": "false"})
    try:
        run(spark)
    finally:
        spark.stop()


def orders(spark: SparkSession, first: int, count: int):
    return spark.range(first, first + count, numPartitions=2).select(
        F.col("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 7).cast("string")).alias("customer"),
        F.round(F.col("id") * 1.25 % 100, 2).alias("amount"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") * 60).alias("ts"),
    )


def run(spark: SparkSession) -> None:
    # Arrow entries: a batch of rows per entry, the schema recorded in the log.
    orders(spark, 0, 10_000).write.format("ledger").option("log", "quickstart") \
        .option("payloadFormat", "arrow").mode("overwrite").save()
    orders(spark, 10_000, 2_500).write.format("ledger").option("log", "quickstart").mode("append").save()

    df = spark.read.format("ledger").option("log", "quickstart").load()
    print("\nlog 'quickstart' (Arrow entries):")
    df.printSchema()
    df.orderBy("id").show(5, truncate=False)
    print(f"rows: {df.count()}")
    df.groupBy("seq", "ledger").agg(F.count("*").alias("rows"), F.countDistinct("entry").alias("entries")) \
        .orderBy("seq").show(truncate=False)
    df.groupBy("customer").agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total")) \
        .orderBy("customer").show()

    # Raw entries: one row = one entry, its bytes exactly as written.
    spark.range(1_000).select(F.format_string("event %d", "id").cast("binary").alias("payload")) \
        .write.format("ledger").option("log", "quickstart-raw").mode("overwrite").save()
    raw = spark.read.format("ledger").option("log", "quickstart-raw").load()
    print("log 'quickstart-raw' (raw entries):")
    raw.select("seq", "entry", "timestamp", F.col("payload").cast("string").alias("payload")).show(3, truncate=False)
    print(f"entries: {raw.count()}")


if __name__ == "__main__":
    main()
