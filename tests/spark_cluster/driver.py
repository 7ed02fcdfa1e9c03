"""A driver process for the cluster tests (pyspark_ledger.testing.driver_process):

    python -m tests.spark_cluster.driver standalone MASTER_URL CONF_JSON
    python -m tests.spark_cluster.driver connect SC_URL

It starts one session (a classic driver on a standalone master, or a Spark Connect client that
registers the `ledger` source), answers with its process ids, then runs the
steps of tests/spark_cluster/steps.py that the test asks for, until its stdin closes.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from pyspark_ledger.testing.driver_process import protocol_channel, serve


def main() -> None:
    channel = protocol_channel()  # first: nothing else may write to the answers' stream
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from tests.spark_cluster.steps import steps_for

    mode, target = sys.argv[1], sys.argv[2]
    if mode == "standalone":
        from pyspark_ledger.testing.local_cluster import local_spark_session

        spark = local_spark_session("pyspark-ledger-cluster-tests", master=target, log_level="ERROR",
                                    conf={**json.loads(sys.argv[3]), "spark.ui.showConsoleProgress": "false"})
    elif mode == "connect":
        from pyspark_ledger.testing.spark_connect import connect_session

        spark = connect_session(target)
    else:
        raise SystemExit(f"unknown mode {mode!r}: standalone or connect")
    try:
        serve(channel, steps_for(spark), ready={"pid": os.getpid()})
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
