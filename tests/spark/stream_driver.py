"""A streaming driver process for the crash tests: log -> transform -> log, from a checkpoint.

    python -m tests.spark.stream_driver URI SOURCE_LOG SINK_LOG CHECKPOINT_DIR RUN_SECONDS [SUBSCRIPTION]

SUBSCRIPTION: read with option `subscription` (a run without its checkpoint starts from it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pyspark.sql import functions as F

from pyspark_ledger.testing.local_cluster import local_spark_session
from pyspark_ledger.testing.stream_start import start_query

BATCH_ENTRIES_MAX = 150  # maxEntriesPerTrigger: what one micro-batch reads at most

REPO = Path(__file__).resolve().parents[2]


def start_driver(uri: str, source: str, sink: str, checkpoint: Path, run_s: float,
                 subscription: str | None = None) -> subprocess.Popen[str]:
    """This driver in its own process group (kill_driver kills just it and its JVM)."""
    args = [uri, source, sink, str(checkpoint), str(run_s), *([subscription] if subscription else [])]
    return subprocess.Popen([sys.executable, "-m", "tests.spark.stream_driver", *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)


def kill_driver(p: subprocess.Popen[str]) -> None:
    """kill -9 of the driver's own process group: the Python driver and the JVM it launched, nothing else."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=30)


def main() -> None:
    uri, source, sink, checkpoint, run_s = sys.argv[1:6]
    subscription = sys.argv[6:7]
    spark = local_spark_session("stream-driver", log_level="ERROR")
    reader = (spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source)
              .option("maxEntriesPerTrigger", str(BATCH_ENTRIES_MAX)))
    if subscription:
        reader = reader.option("subscription", subscription[0])
    src = reader.load()
    out = src.select(F.concat(F.col("payload"), F.lit(bytearray(b"!"))).alias("payload"))
    query = start_query(lambda: out.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
                        .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    print("STARTED", flush=True)
    query.awaitTermination(float(run_s))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
