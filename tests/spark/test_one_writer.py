"""One writer per log, whoever writes (issue 19 item 2): a Spark streaming query and a Python
LogWriter race for one log, and a batch write races a LogWriter.

Per round of the streaming race: the query (re)starts while a LogWriter appends, and its first
commit takes the log over (the LogWriter is fenced); then a new LogWriter takes the log over while
the query runs (the query's next commit is refused and the query stops with the clear error).
After every step: every visible entry lies in a ledger appended under the epoch that was current
(each epoch's holder and the log's next_seq when it was taken are known), no ledger is OPEN but
the live writer's last, and a tail of the log reaches its end (bounded). After the rounds:
spark.readStream reads the whole log (bounded wait) and trimming removes every ledger but the
last. LEDGER_RACE_ROUNDS sets the rounds: 5 by default (CI time), 20 is the acceptance run (81 s).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metadata import LedgerId, NoSuchLedgerError
from metadata.paths import STAGING
from metadata.store import join
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.stream.sink import spark_run_id
from pyspark_ledger.datasource.stream.sink_epoch import read_query_epoch
from pyspark_ledger.log import LogFencedError, LogWriter, Position
from pyspark_ledger.log.takeover import open_ledgers_of
from pyspark_ledger.testing.progress import await_query
from pyspark_ledger.testing.stream_start import start_query as start_stream

ROUNDS = int(os.environ.get("LEDGER_RACE_ROUNDS", "5"))
WAIT_S = 300.0  # every wait of the test is bounded by this: minutes, so a loaded machine is slow, not failing
TAIL_IDLE_S = 2.0
APPENDS_MAX = 5_000  # a background LogWriter appends at most this many entries


def wait_for(what: str, cond: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def check_one_writer_open(client: LedgerClient, name: str, live_last: Any) -> None:
    """No ledger of the log is OPEN except the live writer's last (None: no live LogWriter)."""
    still_open = open_ledgers_of(client, name)
    assert still_open in ([], [live_last]), f"OPEN ledgers other than the live writer's last: {still_open}"
    if still_open:
        assert client.describe_log(name).ledgers[-1].ledger_id == live_last


def check_each_epoch_one_writer(client: LedgerClient, name: str, holders: dict[int, tuple[bytes, int]]) -> int:
    """Every visible entry was written by the holder of the epoch under which its ledger was
    appended: the highest epoch taken when the log's next_seq was <= the ledger's seq."""
    taken = sorted((from_seq, epoch) for epoch, (_, from_seq) in holders.items())
    count = 0
    with client.open_log_reader(name) as r:
        for e in r.read():
            epoch = max(ep for fs, ep in taken if fs <= e.position.seq)
            tag = b":".join(e.payload.split(b":")[:2])
            assert tag == holders[epoch][0], (f"entry {e.payload!r} at seq {e.position.seq} is in epoch {epoch}, "
                                              f"held by {holders[epoch][0]!r}: a stale writer's data is visible")
            count += 1
    return count


def check_tail_reaches_the_end(client: LedgerClient, name: str, expected: int) -> None:
    """A tail of the whole log reaches the `expected` entries visible when the check began (a
    live query keeps appending, so the tail is stopped there, not at idleness); an OPEN ledger
    in the middle would stop it short (it then ends after its idle timeout)."""
    got: list[int] = []

    def run() -> None:
        n = 0
        with client.open_log_reader(name) as r:
            for _ in r.tail(idle_timeout_s=TAIL_IDLE_S):
                n += 1
                if n >= expected:
                    break
        got.append(n)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive(), "tailing the log hung"
    assert got and got[0] >= expected, f"the tail stopped after {got} of {expected} entries"


class Appender:
    """A LogWriter appending in the background until it is fenced (bounded in count and time)."""

    def __init__(self, writer: LogWriter, tag: bytes):
        self.writer, self.tag = writer, tag
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + WAIT_S
        try:
            for i in range(APPENDS_MAX):
                if time.monotonic() > deadline:
                    return
                self.writer.append(self.tag + b":%d" % i, timeout_s=30)
                time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 - the test asserts what it was
            self.error = exc

    def fenced(self) -> BaseException:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the fenced LogWriter kept appending"
        assert isinstance(self.error, LogFencedError), f"expected the LogWriter to be fenced, got {self.error!r}"
        return self.error


def test_the_run_id_comes_from_the_task_properties_spark_sets() -> None:
    description = "\nid = 82a3c96b-4777\nrunId = ebbe05ec-0b36\nbatch = 2"
    assert spark_run_id(description, "group") == "ebbe05ec-0b36"
    assert spark_run_id(None, "ebbe05ec-0b36") == "ebbe05ec-0b36"
    assert spark_run_id("a job", None) is None


def start_query(spark: SparkSession, uri: str, name: str, ckpt: str, run: int) -> Any:
    rows = spark.readStream.format("rate").option("rowsPerSecond", "20").option("numPartitions", "1").load()
    out = rows.select(F.concat(F.lit(f"s{run}:x:"), F.col("value").cast("string")).cast("binary").alias("payload"))
    return start_stream(lambda: out.writeStream.format("ledger").option("metadataServiceUri", uri)
                        .option("log", name).option("checkpointLocation", ckpt)
                        .trigger(processingTime="200 milliseconds").start())


def test_streaming_query_and_log_writer_race_for_one_log(spark: SparkSession, client: LedgerClient, uri: str,
                                                         log_name: str, tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    holders: dict[int, tuple[bytes, int]] = {}  # epoch -> (tag of its writer, next_seq when taken)
    writer: LogWriter | None = None
    started = time.monotonic()
    for run in range(ROUNDS):
        epoch_before = client.logs.read_head(log_name)[0].record.writer_epoch if writer is not None else -1
        appender = Appender(writer, b"p%d:x" % (run - 1)) if writer is not None else None
        query = start_query(spark, uri, log_name, ckpt, run)
        try:
            held = wait_for(f"round {run}: the query's first commit taking the log over",
                            lambda: (query.exception() is None or pytest.fail(str(query.exception())))
                            and (h := read_query_epoch(client, log_name, str(query.id))) is not None
                            and h.epoch > epoch_before and h)
            holders[held.epoch] = (b"s%d:x" % run, held.from_seq)
            if appender is not None and writer is not None:
                appender.fenced()
                writer.close()
            check_one_writer_open(client, log_name, None)  # the query's ledgers are sealed when appended
            count = check_each_epoch_one_writer(client, log_name, holders)
            check_tail_reaches_the_end(client, log_name, count)

            writer = client.open_log_writer(log_name, rollover_entries=4, batching=False)  # takes the log over from the query
            holders[writer.epoch] = (b"p%d:x" % run, writer.from_seq)
            for i in range(10):
                writer.append(b"p%d:x:first-%d" % (run, i))
            with pytest.raises(Exception, match="another writer took over") as err:
                await_query(query)
            assert not query.isActive, f"round {run}: the fenced query is still running"
            assert (f"log {log_name!r}" in str(err.value) and f"epoch {writer.epoch}" in str(err.value)
                    and f"has {held.epoch}" in str(err.value)), str(err.value)[:2000]
        finally:
            query.stop()
        check_one_writer_open(client, log_name, writer.current_ledger)
        count = check_each_epoch_one_writer(client, log_name, holders)
        check_tail_reaches_the_end(client, log_name, count)
    print(f"{ROUNDS} race rounds in {time.monotonic() - started:.1f} s")
    assert writer is not None
    writer.close()
    check_one_writer_open(client, log_name, None)
    total = check_each_epoch_one_writer(client, log_name, holders)
    assert {tag[:1] for tag, _ in holders.values()} == {b"s", b"p"} and total > 0

    # spark.readStream reads the whole log and never hangs on it.
    q = start_stream(lambda: spark.readStream.format("ledger").option("metadataServiceUri", uri)
                     .option("log", log_name).load().writeStream.format("memory")
                     .queryName("race_" + uuid.uuid4().hex[:8]).trigger(availableNow=True).start())
    await_query(q)  # readStream of the raced log finishes
    assert spark.table(q.name).count() == total

    # Trimming works after: every ledger but the last goes.
    rec = client.describe_log(log_name)
    last = rec.ledgers[-1]
    trimmed = client.trim_log(log_name, before=Position(last.seq, 0, last.ledger_id))
    assert set(trimmed) == {lg.ledger_id for lg in rec.ledgers[:-1]}
    assert [lg.ledger_id for lg in client.describe_log(log_name).ledgers] == [last.ledger_id]


def test_batch_write_loses_to_a_log_writer_and_leaves_nothing(spark: SparkSession, client: LedgerClient, uri: str,
                                                              log_name: str, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    staging = join(STAGING, log_name)

    @F.udf("binary")
    def slow_payload(v: int) -> bytes:
        if v % 1000 == 500:  # each task waits here until the LogWriter took the log over (bounded)
            deadline = time.monotonic() + WAIT_S
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return b"spark:%d" % v

    df = spark.range(0, 2000, 1, 2).select(slow_payload(F.col("id")).alias("payload"))
    taken: list[LogWriter] = []
    staged: set[str] = set()
    done = threading.Event()

    def take_over_and_watch() -> None:
        """While the job's tasks wait: a LogWriter takes the log over; then note the job's task
        ledgers until the job ends, to check they are deleted."""
        try:
            job = wait_for("the batch job's staging node", lambda: client.store.children(staging))[0]
            writer = client.open_log_writer(log_name, batching=False)
            taken.append(writer)
            for i in range(10):
                writer.append(b"python:%d" % i)
        finally:
            gate.touch()
        while not done.is_set():
            staged.update(client.store.children(join(staging, job)))
            time.sleep(0.02)

    t = threading.Thread(target=take_over_and_watch, daemon=True)
    t.start()
    try:
        with pytest.raises(Exception, match="another writer took over") as err:
            df.write.format("ledger").option("metadataServiceUri", uri).option("log", log_name).mode("append").save()
    finally:
        done.set()
        t.join(WAIT_S)
    assert taken, "the LogWriter never took the log over"
    writer = taken[0]
    message = str(err.value)
    assert f"log {log_name!r}" in message, message[:2000]
    assert f"epoch {writer.epoch}" in message and f"has {writer.epoch - 1}" in message, message[:2000]
    writer.close()
    with client.open_log_reader(log_name) as r:
        assert [e.payload for e in r.read()] == [b"python:%d" % i for i in range(10)]  # nothing of the job
    assert staged, "the job's tasks staged no ledger"
    for qname in staged:
        with pytest.raises(NoSuchLedgerError):
            client.ledgers.read(LedgerId.from_qualified_name(qname))
    assert client.store.children(staging) == []
    check_one_writer_open(client, log_name, None)


def test_log_writer_loses_to_a_batch_write(spark: SparkSession, client: LedgerClient, uri: str, log_name: str) -> None:
    writer = client.open_log_writer(log_name, rollover_entries=3, batching=False)
    for i in range(7):
        writer.append(b"python:%d" % i)
    rows = spark.createDataFrame([(b"spark:%d" % i,) for i in range(5)], "payload binary")
    rows.write.format("ledger").option("metadataServiceUri", uri).option("log", log_name).mode("append").save()
    with pytest.raises(LogFencedError):
        writer.append(b"python:stale")
    writer.close()
    check_one_writer_open(client, log_name, None)
    with client.open_log_reader(log_name) as r:
        got = [e.payload for e in r.read()]
    assert got == [b"python:%d" % i for i in range(7)] + [b"spark:%d" % i for i in range(5)]
