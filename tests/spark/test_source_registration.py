"""The `ledger` source is registered once (issue 35 item 4): Spark finds it by itself when
pyspark_ledger is on its Python workers' path (README's install, PYTHONPATH), and
local_spark_session then must not register it again, which made Spark log "The data source
ledger replaced a statically registered data source" at WARN on every quickstart. Where Spark
does not find it, the session registers it by hand; format("ledger") works either way.

A process of its own: the warning is the JVM's, on the stderr of the process that started it.
The same session (one Spark start, not two) checks that local_spark_session(executor_env=...)
puts a variable in its Python workers' environment (how an s3:// offload store's settings reach
them, docs/tiered-storage.md), and the driver does not have it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
from pyspark_ledger.testing.local_cluster import local_spark_session, register_ledger_source
spark = local_spark_session("registration", master="local[1]", conf={"spark.ui.showConsoleProgress": "false"},
                            executor_env={"LEDGER_TEST_WORKER_ENV": "from-executor-env"})
try:
    import os
    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("LEDGER_TEST_WORKER_ENV")).collect()
    print("WORKER_ENV", seen, "DRIVER_ENV", os.environ.get("LEDGER_TEST_WORKER_ENV"))
    # Either found by Spark or registered: the source answers (an unknown option is its own error).
    try:
        spark.read.format("ledger").option("nosuchoption", "1").load()
    except Exception as exc:
        assert "nosuchoption" in str(exc), exc
    print("REGISTERED_AGAIN", register_ledger_source(spark))
finally:
    spark.stop()
"""


def run(pythonpath: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd="/", env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_a_statically_found_source_is_not_registered_again() -> None:
    out = run(os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    spark_warnings = [x for x in out.stderr.splitlines() if " WARN " in x and "data source" in x.lower()]
    assert not spark_warnings, "\n".join(spark_warnings)
    # Spark found it by itself (the repository is on its workers' path): nothing to register.
    assert "REGISTERED_AGAIN False" in out.stdout, out.stdout
    assert "WORKER_ENV ['from-executor-env'] DRIVER_ENV None" in out.stdout, out.stdout


def test_executor_env_names_are_checked() -> None:
    from pyspark_ledger.testing.spark_executor_env import BadEnvNameError, executor_env_key

    assert executor_env_key("LEDGER_S3_ENDPOINT") == "spark.executorEnv.LEDGER_S3_ENDPOINT"
    for bad in ("", "A=B", " A"):
        with pytest.raises(BadEnvNameError, match="not an environment variable name"):
            executor_env_key(bad)
