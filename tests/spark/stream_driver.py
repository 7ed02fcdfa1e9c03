"""A streaming driver process for the crash tests: log -> transform -> log, from a checkpoint.

    python -m tests.spark.stream_driver URI SOURCE_LOG SINK_LOG CHECKPOINT_DIR RUN_SECONDS
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    uri, source, sink, checkpoint, run_s = sys.argv[1:6]
    spark = (
        SparkSession.builder.master("local[2]").appName("stream-driver")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        # Loopback only: by default Spark binds to the host's first non-loopback address.
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    src = (spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source)
           .option("maxEntriesPerTrigger", "150").load())
    out = src.select(F.concat(F.col("payload"), F.lit(bytearray(b"!"))).alias("payload"))
    query = (out.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    print("STARTED", flush=True)
    query.awaitTermination(float(run_s))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
