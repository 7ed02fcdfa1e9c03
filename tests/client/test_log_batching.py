"""A LogWriter's batched messages on real bookies: every message reads back once, in order, with
its own position (LogReader, `ledger logs read`), from a position inside a batch too; the bounds,
linger, rollover and fencing hold with batches in flight; unbatched logs stay as they were."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections import Counter
from collections.abc import Iterator

import pytest

from metadata.log_record import MESSAGE_FORMAT_BATCHED
from pyspark_ledger.cli.app import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.planning import log_shape
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log import LogFencedError, LogFormatError, LogReader, MessageHandle, Position
from pyspark_ledger.log.batching import BATCH_HEAD_BYTES, MESSAGE_OVERHEAD_BYTES
from pyspark_ledger.protocol.entry_format import ENTRY_FORMAT_KEY
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.message_batches import set_message_batches

WAIT_S = 120.0


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerClient]:
    with LocalCluster(3, work_dir=tmp_path_factory.mktemp("batching")) as cluster, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=10) as c:
        assert c.cluster_settings.message_batches  # on by default: a new cluster has only new clients
        yield c


def payload(i: int) -> bytes:
    return b"msg-%06d" % i


def read_all(client: LedgerClient, name: str, start: Position | None = None) -> list[tuple[Position, bytes]]:
    with client.open_log_reader(name) as r:
        return [(e.position, e.payload) for e in r.read(start)]


def test_batched_messages_read_back_once_in_order_with_their_own_positions(client: LedgerClient) -> None:
    n = 2_500
    with client.open_log_writer("batched", batch_max_messages=400) as w:
        handles = [w.append_async(payload(i), key=b"k%d" % (i % 7) if i % 3 else None) for i in range(n)]
        last = w.append(b"the last one")
        positions = [h.result(WAIT_S) for h in handles]
    assert all(isinstance(h, MessageHandle) for h in handles)
    assert positions == sorted(positions) and len(set(positions)) == n and positions[-1] < last
    per_entry = Counter((p.seq, p.entry_id) for p in positions)
    assert max(per_entry.values()) <= 400 and len(per_entry) < n // 10  # batched, within the bound
    got = read_all(client, "batched")
    assert [p for p, _ in got] == positions + [last]
    assert [m for _, m in got] == [payload(i) for i in range(n)] + [b"the last one"]
    with client.open_log_reader("batched") as r:
        keys = [e.key for e in r.read()][:n]
        assert keys == [b"k%d" % (i % 7) if i % 3 else None for i in range(n)]
        mid = next(p for p in positions if p.index > 0)  # a position inside a batch
        i = positions.index(mid)
        assert [e.payload for e in r.read(mid, positions[i + 5])] == [payload(j) for j in range(i, i + 6)]
        assert [e.payload for e in r.tail(mid, idle_timeout_s=1.0)] == \
            [payload(j) for j in range(i, n)] + [b"the last one"]
        assert r.record.message_format == MESSAGE_FORMAT_BATCHED
        meta = client.ledger_metadata(positions[0].ledger_id)
        assert meta.custom[ENTRY_FORMAT_KEY] == b"3"


def test_batches_wait_for_the_cluster_setting(client: LedgerClient) -> None:
    """Until message_batches is on, open_log_writer writes format 2 (a client of release 0.1.0 reads it)."""
    set_message_batches(client, False)
    try:
        with client.open_log_writer("not-yet") as w:
            assert w.batching is False
            assert w.append(b"one").index == 0
            with pytest.raises(LedgerError, match="message_batches is off"):
                w.append_async(b"two", key=b"k")
        assert client.describe_log("not-yet").message_format == "single"
    finally:
        set_message_batches(client, True)
    with client.open_log_writer("not-yet") as w:
        assert w.batching is True
        w.append(b"three")
    assert [m for _, m in read_all(client, "not-yet")] == [b"one", b"three"]
    assert client.describe_log("not-yet").message_format == MESSAGE_FORMAT_BATCHED


def test_bytes_bound_linger_and_flush(client: LedgerClient) -> None:
    with client.open_log_writer("bounds", batch_max_bytes=1_000, batch_max_delay_ms=20) as w:
        handles = [w.append_async(b"x" * 100) for _ in range(50)]
        w.flush()
        assert all(h.done() for h in handles)
        per_entry = Counter((p.seq, p.entry_id) for p in (h.result() for h in handles))
        fits = (1_000 - BATCH_HEAD_BYTES) // (100 + MESSAGE_OVERHEAD_BYTES)  # 9: a length each, one append time
        assert max(per_entry.values()) <= fits and len(per_entry) >= 50 // fits
        alone = w.append_async(b"lingering")  # no flush: the linger sends it
        assert alone.result(WAIT_S).entry_id == max(e for _, e in per_entry) + 1
    for bad in ({"batch_max_messages": 0}, {"batch_max_messages": 10_001}, {"batch_max_bytes": 0},
                {"batch_max_delay_ms": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            client.open_log_writer("bounds", **bad)  # type: ignore[arg-type]  # one keyword per case


def test_a_batch_never_spans_ledgers_across_rollovers(client: LedgerClient) -> None:
    with client.open_log_writer("rolled", rollover_entries=2, batch_max_messages=10) as w:
        positions = [h.result(WAIT_S) for h in [w.append_async(payload(i)) for i in range(95)]]
    assert len({p.seq for p in positions}) >= 4
    got = read_all(client, "rolled")
    assert [p for p, _ in got] == positions and [m for _, m in got] == [payload(i) for i in range(95)]


def test_unbatched_logs_stay_format_2_and_mix_with_batches(client: LedgerClient) -> None:
    with client.open_log_writer("mixed", batching=False) as w:
        old = [f.result(WAIT_S) for f in [w.append_async(payload(i)) for i in range(10)]]
        with pytest.raises(LedgerError, match="unbatched"):
            w.append(b"x", key=b"k")
    assert [p.entry_id for p in old] == list(range(10)) and all(p.index == 0 for p in old)
    assert client.describe_log("mixed").message_format == "single"
    assert ENTRY_FORMAT_KEY not in client.ledger_metadata(old[0].ledger_id).custom
    with client.open_log_writer("mixed") as w:  # a batching writer takes the version-2 log over
        new = [h.result(WAIT_S) for h in [w.append_async(payload(i)) for i in range(10, 30)]]
    got = read_all(client, "mixed")
    assert [m for _, m in got] == [payload(i) for i in range(30)] and [p for p, _ in got] == old + new
    assert read_all(client, "mixed", Position(old[4].seq, 4, old[4].ledger_id))[0][1] == payload(4)


def test_fencing_fails_the_old_writers_batches_and_keeps_acknowledged_ones(client: LedgerClient) -> None:
    first = client.open_log_writer("fenced", batch_max_delay_ms=60_000)
    acked = [h.result(WAIT_S) for h in [first.append_async(payload(i)) for i in range(5)] if first.flush() is None]
    pending = first.append_async(b"never sent")  # its batch is open (a minute's linger)
    second = client.open_log_writer("fenced")
    with pytest.raises(LogFencedError):
        first.append(b"after the takeover", timeout_s=WAIT_S)
    with pytest.raises(LedgerError):
        pending.result(WAIT_S)
    first.close()
    second.append(b"new writer")
    second.close()
    got = read_all(client, "fenced")
    assert [m for _, m in got] == [payload(i) for i in range(5)] + [b"new writer"]
    assert [p for p, _ in got][:5] == acked


def test_a_reader_refuses_a_message_format_it_does_not_know(client: LedgerClient) -> None:
    client.open_log_writer("future").close()
    client.logs.update_head("future", lambda r: dataclasses.replace(r, message_format="columnar-v9"))
    with pytest.raises(LogFormatError, match="columnar-v9"):
        LogReader(client, "future")


def test_the_spark_source_reads_a_batched_log_as_raw_only(client: LedgerClient) -> None:
    with client.open_log_writer("read-by-spark") as w:  # its own log: tests run in any order
        w.append(payload(0))
    rec = client.describe_log("read-by-spark")
    opts = parse_options({"metadataserviceuri": "sqlite:///unused.db", "log": "read-by-spark"})
    shape = log_shape(rec, opts)
    assert (shape.payload_format, shape.batched) == ("raw", True)
    as_arrow = parse_options({"metadataserviceuri": "sqlite:///unused.db", "log": "read-by-spark",
                              "payloadformat": "arrow"})
    with pytest.raises(LedgerSourceError, match="holds batched messages.*payloadFormat raw"):
        log_shape(rec, as_arrow)


def test_ledger_logs_read(client: LedgerClient, capsys: pytest.CaptureFixture[str]) -> None:
    with client.open_log_writer("shell", batch_max_messages=4) as w:
        positions = [h.result(WAIT_S) for h in [w.append_async(payload(i), key=b"k") for i in range(10)]]
    uri = str(client.metadata_uri)
    assert main(["--metadata-uri", uri, "logs", "read", "shell", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [Position.from_json(r) for r in rows] == positions
    assert [base64.b64decode(r["payloadBase64"]) for r in rows] == [payload(i) for i in range(10)]
    assert {r["keyBase64"] for r in rows} == {base64.b64encode(b"k").decode()}
    start = json.dumps(positions[5].to_json())
    assert main(["--metadata-uri", uri, "logs", "read", "shell", "--from", start, "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    p = positions[5]
    assert lines[0] == f"{p.seq}:{p.ledger_id.qualified_name}:{p.entry_id}:{p.index}\t{payload(5).decode()}"
    assert [line.split("\t")[1] for line in lines] == [payload(i).decode() for i in (5, 6, 7)]
    assert main(["--metadata-uri", uri, "logs", "read", "shell", "--from", "{\"seq\": 1}"]) == 1
    assert "--from: not a log position" in capsys.readouterr().err
    assert main(["--metadata-uri", uri, "logs", "read", "shell", "--limit", "-1"]) == 1
    assert "--limit must be" in capsys.readouterr().err
