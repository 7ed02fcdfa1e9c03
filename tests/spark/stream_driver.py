"""A streaming driver process for the crash tests: log -> transform -> log, from a checkpoint.

    python -m tests.spark.stream_driver URI SOURCE_LOG SINK_LOG CHECKPOINT_DIR RUN_SECONDS
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

from pyspark_ledger.testing.local_cluster import local_spark_session


def main() -> None:
    uri, source, sink, checkpoint, run_s = sys.argv[1:6]
    spark = local_spark_session("stream-driver", log_level="ERROR")
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
