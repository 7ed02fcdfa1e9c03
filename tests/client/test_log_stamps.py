"""Every message's own times and headers on real bookies (issue 32 item 4): a LogWriter's append
time on every message, the event time when given, headers as (str, bytes) pairs in order with
duplicates kept, bounds refused by name; LogReader.position_at_time is exactly the first message
at or after T (brute force over the whole log, across rollovers); `ledger logs read` shows them;
a log written before per-message times (format 2, ledgers without a seal time) keeps the
ledger-level time.

A paced run (2,000 messages with headers over 2 s into one ledger) reads back with its own
timestamps and exact headers, and a read from the middle's time returns exactly the messages
from the first at or after it. The issue's acceptance run (10,000 messages over 20 s, through
LogReader and Spark) is tests/spark/test_stamps_spark.py."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Iterator

import pytest

from pyspark_ledger.cli.app import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log import LogEntry, Position
from pyspark_ledger.protocol.message_batch import (
    HEAD_BYTES,
    MessageBoundError,
    decode_batch,
    encode_batch,
    headers_bytes,
)
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.message_batches import set_message_batches

WAIT_S = 120.0
ACCEPTANCE_S = 2.0
ACCEPTANCE_MESSAGES = 2_000


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerClient]:
    with LocalCluster(3, work_dir=tmp_path_factory.mktemp("stamps")) as cluster, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=10) as c:
        set_message_batches(c, True)
        yield c


def read_all(client: LedgerClient, name: str, start: Position | None = None) -> list[LogEntry]:
    with client.open_log_reader(name) as r:
        return list(r.read(start))


def headers_of(i: int) -> list[tuple[str, bytes]]:
    """Seeded by i: none, one, or several with a duplicate key (kept, in order)."""
    return [("trace", b"t-%d" % i), ("tag", b"a"), ("tag", bytes([i % 256]))][: i % 4]


def brute_first_at_or_after(entries: list[LogEntry], t_ms: int) -> Position | None:
    return next((e.position for e in entries if e.timestamp_ms is not None and e.timestamp_ms >= t_ms), None)


def test_every_message_carries_its_append_time_event_time_and_headers(client: LedgerClient) -> None:
    before = time.time_ns() // 1_000_000
    with client.open_log_writer("stamped", batch_max_messages=50) as w:
        handles = [w.append_async(b"m%d" % i, headers=headers_of(i), timestamp=1_000 + i if i % 5 == 0 else None)
                   for i in range(500)]
        last = w.append(b"last", timestamp=7, headers=[("k", b""), ("k", b"\x00\xff")])
        positions = [h.result(WAIT_S) for h in handles] + [last]
    after = time.time_ns() // 1_000_000
    got = read_all(client, "stamped")
    assert [e.position for e in got] == positions
    assert [e.headers for e in got] == [tuple(headers_of(i)) for i in range(500)] + [(("k", b""), ("k", b"\x00\xff"))]
    assert [e.event_time_ms for e in got] == [1_000 + i if i % 5 == 0 else None for i in range(500)] + [7]
    times = [e.timestamp_ms for e in got]
    assert all(t is not None and before <= t <= after for t in times)
    assert times == sorted(times)  # one writer's append clock never steps back
    assert all(e.append_time_ms == e.timestamp_ms for e in got)


def test_bounds_are_refused_by_name(client: LedgerClient) -> None:
    with client.open_log_writer("bounds") as w:
        with pytest.raises(MessageBoundError, match="HEADERS_PER_MESSAGE_MAX"):
            w.append(b"x", headers=[("h", b"")] * 65)
        with pytest.raises(MessageBoundError, match="HEADER_KEY_BYTES_MAX"):
            w.append(b"x", headers=[("h" * 257, b"")])
        with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
            w.append(b"x", headers=[("h", b"v" * 65_537)])
        with pytest.raises(MessageBoundError, match=r"a \(str, bytes\) pair"):
            w.append(b"x", headers=[("h", "not bytes")])  # type: ignore[list-item]  # the mistake under test
        with pytest.raises(MessageBoundError, match="TIME_MS_MAX"):
            w.append(b"x", timestamp=2**63)
        assert w.append(b"fine", headers=[("h", b"v")] * 64).index == 0  # the bound itself is fine
    with client.open_log_writer("bounds-unbatched", batching=False) as w:
        with pytest.raises(LedgerError, match="carry no key, event time or headers"):
            w.append(b"x", headers=[("h", b"v")])


@pytest.mark.parametrize("headers", [
    (("a", b"1"),), (("a", b""), ("a", b"")), (("ключ", b"v"),), (("k", bytearray(b"xy")),), (["k", b"list pair"],),
    (("h" * 256, b"v" * 65_536),), (),
])
def test_the_fast_header_check_agrees_with_the_encoded_bytes(headers: tuple) -> None:
    """headers_bytes (a LogWriter's check per message) is exactly what the headers add to a batch."""
    with_h = encode_batch([b"p"], [1], headers=[headers])
    without = encode_batch([b"p"], [1], headers=[()])
    assert headers_bytes(headers) - 2 == len(with_h) - len(without)
    assert decode_batch(with_h).headers(0) == [(k, bytes(v)) for k, v in headers]
    assert len(without) > HEAD_BYTES


def test_position_at_time_is_the_first_message_at_or_after_t_across_rollovers(client: LedgerClient) -> None:
    with client.open_log_writer("by-time", batch_max_messages=20, rollover_entries=6) as w:
        for i in range(300):
            w.append_async(b"m%d" % i)
            if i % 15 == 0:
                time.sleep(0.003)  # spread the times over a few ms per batch
        w.flush()
    entries = read_all(client, "by-time")
    assert len({e.position.seq for e in entries}) >= 4  # several ledgers, all sealed but the last
    times = sorted({e.timestamp_ms for e in entries if e.timestamp_ms is not None})
    probes = sorted({times[0] - 1, times[-1] + 1} | {t + d for t in times[:: max(1, len(times) // 12)] for d in (-1, 0, 1)})
    with client.open_log_reader("by-time") as r:
        for t in probes:
            assert r.position_at_time(t) == brute_first_at_or_after(entries, t), f"T={t}"
        mid = r.position_at_time(times[len(times) // 2])
        assert mid is not None
        assert [e.position for e in r.read(mid)] == [e.position for e in entries if e.position >= mid]


def test_a_log_written_before_message_times_keeps_the_ledger_time(client: LedgerClient) -> None:
    with client.open_log_writer("old-style", batching=False, rollover_entries=3) as w:
        for i in range(10):
            w.append(b"o%d" % i)
            time.sleep(0.01)
    # As a release before seal times left it: no ledger carries sealed_ms.
    client.logs.update_head("old-style", lambda r: dataclasses.replace(
        r, ledgers=tuple(dataclasses.replace(lg, sealed_ms=None) for lg in r.ledgers)))
    rec = client.describe_log("old-style")
    assert all(lg.sealed_ms is None for lg in rec.ledgers)
    entries = read_all(client, "old-style")
    assert [e.payload for e in entries] == [b"o%d" % i for i in range(10)]
    ctime = {lg.seq: lg.ctime_ms for lg in rec.ledgers}
    assert [e.timestamp_ms for e in entries] == [ctime[e.position.seq] for e in entries]
    assert all(e.append_time_ms is None and e.headers == () for e in entries)
    with client.open_log_reader("old-style") as r:
        for lg in rec.ledgers:
            for t in (lg.ctime_ms - 1, lg.ctime_ms, lg.ctime_ms + 1):
                assert r.position_at_time(t) == brute_first_at_or_after(entries, t), f"T={t}"


def test_ledger_logs_read_shows_times_and_headers(client: LedgerClient, capsys: pytest.CaptureFixture[str]) -> None:
    with client.open_log_writer("shell-stamps") as w:
        p = w.append(b"hello", timestamp=42, headers=[("a", b"1"), ("a", b"2")])
    uri = str(client.metadata_uri)
    assert main(["--metadata-uri", uri, "logs", "read", "shell-stamps", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["eventTimeMs"] == 42 and row["timestampMs"] == row["appendTimeMs"] > 42
    assert [(h["key"], base64.b64decode(h["valueBase64"])) for h in row["headers"]] == [("a", b"1"), ("a", b"2")]
    assert main(["--metadata-uri", uri, "logs", "read", "shell-stamps", "--print-timestamp", "--print-headers"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == f"{p.seq}:{p.ledger_id.qualified_name}:{p.entry_id}:0\ttimestamp={row['timestampMs']}\tevent=42\t" \
                   "headers=a:1,a:2\thello"


def write_paced(client: LedgerClient, name: str, n: int, seconds: float) -> list[Position]:
    """n messages with headers, evenly over `seconds`, into one ledger (no rollover)."""
    ticks = max(1, int(seconds * 20))
    handles = []
    start = time.monotonic()
    with client.open_log_writer(name) as w:
        for k in range(ticks):
            for i in range(k * n // ticks, (k + 1) * n // ticks):
                handles.append(w.append_async(b"payload-%05d" % i, headers=[("i", b"%d" % i), ("dup", b"x"), ("dup", b"y")]))
            time.sleep(max(0.0, start + (k + 1) * seconds / ticks - time.monotonic()))
        w.flush()
        return [h.result(WAIT_S) for h in handles]


def test_paced_messages_with_headers_read_back_and_from_a_time(client: LedgerClient) -> None:
    t0 = time.time_ns() // 1_000_000
    positions = write_paced(client, "acceptance", ACCEPTANCE_MESSAGES, ACCEPTANCE_S)
    assert len({p.ledger_id for p in positions}) == 1
    entries = read_all(client, "acceptance")
    assert [e.position for e in entries] == positions
    assert [e.payload for e in entries] == [b"payload-%05d" % i for i in range(ACCEPTANCE_MESSAGES)]
    assert [e.headers for e in entries] == [(("i", b"%d" % i), ("dup", b"x"), ("dup", b"y"))
                                            for i in range(ACCEPTANCE_MESSAGES)]
    times = [e.timestamp_ms for e in entries]
    assert all(t is not None and t >= t0 for t in times) and times == sorted(times)
    assert times[-1] - times[0] >= ACCEPTANCE_S * 1000 * 0.8  # spread over the run, message by message
    t_mid = times[len(times) // 2]
    first = next(i for i, t in enumerate(times) if t is not None and t >= t_mid)
    with client.open_log_reader("acceptance") as r:
        at = r.position_at_time(t_mid)
        assert at == positions[first]
        assert [e.position for e in r.read(at)] == positions[first:]
        assert [e.position for e in r.tail(at, idle_timeout_s=1.0)] == positions[first:]
