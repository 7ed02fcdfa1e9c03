"""Issue 22 item 4: every user mistake reaches a PySpark user as one line at the top of the error,
saying what is wrong and how to fix it. Each test asserts the first line of str(exception) for
the exception the user catches (Spark's AnalysisException: Spark puts its own prefix, then the
source's exception, which the source reports without its traceback: datasource/errors.py)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metadata import LedgerId
from pyspark_ledger.client import LedgerClient

# What Spark writes before the source's own line, by the step that failed.
CREATE = "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
PARTITIONS = "[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: "
OPTION_ERROR = "pyspark_ledger.datasource.errors.OptionError: "
SOURCE_ERROR = "pyspark_ledger.datasource.errors.LedgerSourceError: "


def first_line(action: Callable[[], Any]) -> str:
    with pytest.raises(AnalysisException) as err:
        action()
    text = str(err.value)
    assert "Traceback (most recent call last)" not in text  # no traceback for a user mistake
    return text.splitlines()[0]


def reading(spark: SparkSession, uri: str, **opts: str) -> Callable[[], Any]:
    return lambda: spark.read.format("ledger").option("metadataServiceUri", uri).options(**opts).load().collect()


def test_unknown_option_says_did_you_mean(spark: SparkSession, uri: str, log_name: str) -> None:
    line = first_line(reading(spark, uri, log=log_name, statingPosition="earliest"))
    assert line == (CREATE + OPTION_ERROR +
                    'ledger data source option "statingposition": unknown option; did you mean "startingPosition"?')


def test_bad_json_position_says_what_a_position_looks_like(spark: SparkSession, uri: str, log_name: str) -> None:
    line = first_line(reading(spark, uri, logs=f"{log_name},other", startingPositions='{"a": {"seq": 1,}}'))
    assert line == (CREATE + OPTION_ERROR + 'ledger data source option "startingPositions": not valid JSON (Expecting '
                    "property name enclosed in double quotes: line 1 column 17 (char 16)); expected "
                    '{"<log>": {"seq": 0, "ledger": "<32 hex digits>", "entry": 0}, ...}')


def test_missing_log_names_the_closest_one(spark: SparkSession, uri: str, log_name: str) -> None:
    spark.range(3).select(F.col("id").cast("string").cast("binary").alias("payload")).write.format("ledger") \
        .option("metadataServiceUri", uri).option("log", log_name).mode("append").save()
    typo = log_name[:-1] + ("x" if log_name[-1] != "x" else "y")
    line = first_line(reading(spark, uri, log=typo))
    assert line == CREATE + SOURCE_ERROR + f"no log named '{typo}' in {uri}; did you mean \"{log_name}\"? (options log, logs)"


def test_unreachable_metadata_service_says_so_within_the_connect_timeout(spark: SparkSession, log_name: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"zk://127.0.0.1:{port}/ledgers?connect_timeout_ms=1500"
    started = time.monotonic()
    first_line(reading(spark, dead, log=log_name, startingPosition="nowhere"))  # an option error: no connection
    quick_failure_s = time.monotonic() - started  # what a failing Spark call costs on this machine now
    started = time.monotonic()
    line = first_line(reading(spark, dead, log=log_name))
    # Within the connect timeout, not the session's: relative to the machine's pace, not a fixed wall clock.
    assert time.monotonic() - started < 3 * quick_failure_s + 20
    assert line.startswith(CREATE + SOURCE_ERROR + f"cannot reach the metadata service {dead} (option metadataServiceUri): ")
    assert line.endswith("; check the address and that the service is running")


def test_wrong_password_says_which_option_to_fix(spark: SparkSession, uri: str, log_name: str,
                                                 client: LedgerClient) -> None:
    with client.open_log_writer(log_name, password="right", batching=False) as w:
        lid = w.append(b"x").ledger_id
    line = first_line(reading(spark, uri, log=log_name, password="wrong"))
    assert line == (PARTITIONS + OPTION_ERROR + f'ledger data source option "password": wrong password for log '
                    f"'{log_name}' (ledger {lid}): give the one it was written with (option password or password_file)")
    got = spark.read.format("ledger").option("metadataServiceUri", uri).option("log", log_name) \
        .option("password", "right").load().collect()
    assert [bytes(r.payload) for r in got] == [b"x"]


def test_a_position_of_another_ledger_says_which_one_is_at_its_seq(spark: SparkSession, uri: str, log_name: str,
                                                                   client: LedgerClient) -> None:
    with client.open_log_writer(log_name, batching=False) as w:
        p = w.append(b"x")
    wrong = LedgerId(p.ledger_id.scope_id, p.ledger_id.id + 1000).qualified_name
    other = {"seq": p.seq, "ledger": wrong, "entry": 0}
    line = first_line(reading(spark, uri, log=log_name, startingPosition=json.dumps(other)))
    assert line == (PARTITIONS + OPTION_ERROR + f'ledger data source option "startingPosition": log \'{log_name}\': '
                    f"position seq {p.seq} entry 0 names ledger {wrong}, but seq {p.seq} of the log is ledger "
                    f"{p.ledger_id.qualified_name}")
