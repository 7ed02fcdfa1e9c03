"""Environment variables for a session's executors: how an `s3://` offload store's settings
(LEDGER_S3_ENDPOINT, the AWS variables) reach the Python workers that read offloaded ranges.

A Python worker's environment is the one its JVM started with, plus the variables Spark ships
with each Python function: the session's `spark.executorEnv.*` settings, which PySpark copies into
`SparkContext.environment` when the context starts, and which a function takes from there when it
is wrapped. A Python data source is wrapped once, when it is registered. So (checked on local[2],
tests/offload/test_offload_acceptance.py):

- before a session starts: `spark.executorEnv.NAME` (`local_spark_session(executor_env=...)`), on
  local and cluster masters alike; on a local master, a variable already in the driver's
  environment when the JVM starts reaches the workers too (they are the JVM's children);
- a variable put in `os.environ` after the JVM started does not reach them;
- on a running session, `executor_env(spark, env)` below: it updates `SparkContext.environment`
  and registers the `ledger` source again, so its reads carry the variables (the workers for a new
  set of variables are new processes). Functions wrapped before keep what they had.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyspark_ledger.errors import PySparkLedgerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class BadEnvNameError(PySparkLedgerError, ValueError):
    pass


def executor_env_key(name: str) -> str:
    """The Spark setting that puts variable `name` in every executor's environment."""
    if not name or "=" in name or name.strip() != name:
        raise BadEnvNameError(f"{name!r} is not an environment variable name")
    return f"spark.executorEnv.{name}"


@contextmanager
def executor_env(spark: SparkSession, env: Mapping[str, str]) -> Iterator[None]:
    """`env` in the environment of the `ledger` source's Python workers for the block (a classic,
    non-Connect session); on leaving, the previous values come back and the source is
    registered again with them."""
    from pyspark_ledger.datasource.source import LedgerDataSource

    for name in env:
        executor_env_key(name)  # validates the name
    environment: dict[str, str] = spark.sparkContext.environment
    saved = {name: environment.get(name) for name in env}
    environment.update(env)
    spark.dataSource.register(LedgerDataSource)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        spark.dataSource.register(LedgerDataSource)
