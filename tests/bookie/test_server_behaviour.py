"""A real `bookie` process: fencing, auth, bad input, corruption, identity, read-only, shutdown."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from bookie.disk_monitor import DiskMonitor, next_read_only
from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from metadata import BookieRegistry, open_store
from pyspark_ledger.errors import BookieRefusedError
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import KEY, add_sync, flip_stored_copies, read_all

LEDGER = (0, 5)
RAW = ["--no-verify-ledger-keys"]  # raw ledgers written without metadata (bookie/ledger_owner.py)


@pytest.fixture
def meta_uri(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'meta.db'}"


@pytest.fixture
def bookie(meta_uri: str, tmp_path: Path) -> Iterator[LocalBookie]:
    b = LocalBookie(meta_uri, tmp_path / "data", extra_args=["--max-entry-size-bytes", "65536", *RAW]).start()
    yield b
    b.stop()


@pytest.fixture
def client(bookie: LocalBookie) -> Iterator[BookieClient]:
    c = BookieClient(bookie.bookie_id, bookie.address)
    yield c
    c.close()


def test_add_read_lac_and_long_poll(client: BookieClient) -> None:
    entries = [(i, i - 1, f"entry {i}".encode()) for i in range(100)]
    assert add_sync(client, LEDGER, entries) == (Status.OK, "")
    got = read_all(client, LEDGER, 0, 99)
    assert [got[i][1] for i in range(100)] == [e[2] for e in entries]
    assert client.read_lac(LEDGER).lac == 98
    # Bounded responses: count and bytes.
    assert len(client.read(LEDGER, 0, 99, max_entries=7).entry_ids) == 7
    assert len(client.read(LEDGER, 0, 99, max_bytes=1).entry_ids) == 1
    # Long poll returns at once when already satisfied, and after the timeout otherwise.
    assert client.read_lac(LEDGER, long_poll_min_lac=98, long_poll_timeout_ms=5000).lac == 98
    assert client.read_lac(LEDGER, long_poll_min_lac=200, long_poll_timeout_ms=200).lac == 98
    assert client.write_lac(LEDGER, KEY, 99).status == Status.OK
    resp = client.read(LEDGER, 99, 99, long_poll_min_lac=99, long_poll_timeout_ms=2000)
    assert resp.lac == 99 and resp.entries[0] == b"entry 99"
    # Unknown ledger / entry.
    assert client.read((0, 12345), 0, 0).status == Status.NO_SUCH_LEDGER
    assert client.read(LEDGER, 100, 100).entry_status[0] == Status.NO_SUCH_ENTRY


def test_fence_blocks_writer_but_not_recovery_and_survives_kill9(bookie: LocalBookie, client: BookieClient) -> None:
    assert add_sync(client, LEDGER, [(0, -1, b"a"), (1, 0, b"b")]) == (Status.OK, "")
    fenced = client.fence(LEDGER, KEY)
    assert (fenced.status, fenced.lac) == (Status.OK, 0)
    assert add_sync(client, LEDGER, [(2, 1, b"c")])[0] == Status.FENCED
    assert add_sync(client, LEDGER, [(2, 1, b"c")], recovery=True)[0] == Status.OK
    client.close()
    bookie.kill()
    bookie.start()
    with BookieClient(bookie.bookie_id, bookie.address) as c2:
        assert add_sync(c2, LEDGER, [(3, 2, b"d")])[0] == Status.FENCED
        assert read_all(c2, LEDGER, 0, 2)[2] == (Status.OK, b"c")
        # Fencing a ledger this bookie never saw works (recovery may fence an empty replica).
        assert c2.fence((0, 777), KEY).status == Status.OK


def test_wrong_master_key_is_unauthorized_and_never_logged(bookie: LocalBookie, client: BookieClient) -> None:
    secret = b"MASTERKEY-do-not-log-0123456789"
    assert add_sync(client, LEDGER, [(0, -1, b"x")], key=secret) == (Status.OK, "")
    wrong = b"wrong-key-9876543210"
    assert add_sync(client, LEDGER, [(1, 0, b"y")], key=wrong)[0] == Status.UNAUTHORIZED
    assert client.fence(LEDGER, wrong).status == Status.UNAUTHORIZED
    # A LAC write proves the right to the ledger before storage is touched (issue 21): refused
    # as a gRPC error naming the operation and the ledger, never the key.
    with pytest.raises(BookieRefusedError, match="WriteLac refused for ledger") as refused:
        client.write_lac(LEDGER, wrong, 0)
    assert wrong.hex() not in str(refused.value) and repr(wrong) not in str(refused.value)
    assert client.read(LEDGER, 0, 0, fence=True, master_key=wrong).status == Status.UNAUTHORIZED
    log_text = bookie.log_path.read_bytes()
    for key in (secret, wrong):
        assert key not in log_text and key.hex().encode() not in log_text and repr(key).encode() not in log_text


def test_bad_input_gets_a_status_and_the_server_keeps_serving(bookie: LocalBookie, client: BookieClient) -> None:
    assert add_sync(client, LEDGER, [(0, -1, b"x" * 70_000)])[0] == Status.TOO_LARGE
    assert add_sync(client, LEDGER, [(-5, -1, b"x")])[0] == Status.INVALID_REQUEST
    assert add_sync(client, LEDGER, [(0, -7, b"x")])[0] == Status.INVALID_REQUEST
    assert client.read(LEDGER, -1, 3).status == Status.INVALID_REQUEST
    assert client.read(LEDGER, 5, 3).status == Status.INVALID_REQUEST
    assert client.write_lac(LEDGER, KEY, -9).status == Status.INVALID_REQUEST
    # Mismatched parallel arrays in one batch.
    channel = grpc.insecure_channel(bookie.address)
    stub_add = channel.stream_stream(
        "/pyspark_ledger.bookie.Bookie/Add",
        request_serializer=pb.AddRequest.SerializeToString, response_deserializer=pb.AddResponse.FromString,
    )
    bad_batch = pb.AddBatch(request_id=1, ledger=pb.LedgerRef(ledger_id=5), entry_ids=[0, 1], lacs=[-1], entries=[b"a"])
    responses = list(stub_add(iter([pb.AddRequest(batches=[bad_batch])]), timeout=10))
    assert responses[0].results[0].status == Status.INVALID_REQUEST
    # Bytes that are not a protobuf message at all: a transport error, not a crash.
    raw = channel.unary_unary("/pyspark_ledger.bookie.Bookie/Read", request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError):
        raw(b"\xff\xff\xff\xff garbage", timeout=10)
    channel.close()
    assert bookie.running
    assert add_sync(client, LEDGER, [(0, -1, b"fine")]) == (Status.OK, "")
    assert client.info().bookie_id == bookie.bookie_id


def test_flipped_byte_in_stored_entry_answers_unknown(meta_uri: str, tmp_path: Path) -> None:
    b = LocalBookie(meta_uri, tmp_path / "data", extra_args=RAW).start()
    marker = b"<<corrupt-me-please>>" * 10
    with BookieClient(b.bookie_id, b.address) as c:
        assert add_sync(c, LEDGER, [(0, -1, b"good entry"), (1, 0, marker), (2, 1, b"another")]) == (Status.OK, "")
    b.stop()  # clean stop: checkpointed, so reads come from the entry log
    assert flip_stored_copies(tmp_path / "data", marker) >= 1
    b.start()
    with BookieClient(b.bookie_id, b.address) as c:
        got = read_all(c, LEDGER, 0, 2)
        assert got[1] == (Status.UNKNOWN_ENTRY_STATE, b"")
        assert got[0] == (Status.OK, b"good entry") and got[2] == (Status.OK, b"another")
    b.stop()


def write_three_and_kill(meta_uri: str, data_dir: Path) -> tuple[LocalBookie, Path]:
    b = LocalBookie(meta_uri, data_dir, extra_args=["--checkpoint-interval-s", "0", *RAW]).start()
    with BookieClient(b.bookie_id, b.address) as c:
        for i in range(3):
            assert add_sync(c, LEDGER, [(i, i - 1, bytes([65 + i]) * 1000)]) == (Status.OK, "")
    b.kill()  # no checkpoint: everything lives in the journal
    return b, sorted((data_dir / "journal").glob("*.log"))[-1]


def test_torn_journal_tail_is_dropped(meta_uri: str, tmp_path: Path) -> None:
    b, journal = write_three_and_kill(meta_uri, tmp_path / "data")
    raw = journal.read_bytes()
    # A record a crashed writer left half-written (a copy of a real record's bytes, cut short).
    journal.write_bytes(raw + raw[-1030:-500])
    b.start()
    with BookieClient(b.bookie_id, b.address) as c:
        got = read_all(c, LEDGER, 0, 3)
        assert [got[i] for i in range(3)] == [(Status.OK, bytes([65 + i]) * 1000) for i in range(3)]
        assert got[3][0] == Status.NO_SUCH_ENTRY
        assert not c.info().uncertain
    b.stop()


def test_corrupt_journal_middle_is_refused_or_repaired(meta_uri: str, tmp_path: Path) -> None:
    b, journal = write_three_and_kill(meta_uri, tmp_path / "data")
    raw = journal.read_bytes()
    i = raw.find(b"B" * 1000)
    journal.write_bytes(raw[: i + 10] + b"Z" + raw[i + 11 :])
    code, log_text = b.run_to_exit()
    assert code == 1
    assert "corrupt" in log_text.lower() and journal.name in log_text
    assert "Traceback" not in log_text
    # With --repair-journal it starts, and answers UNKNOWN instead of NO_SUCH_ENTRY for what it lost.
    b.extra_args.append("--repair-journal")
    b.start()
    with BookieClient(b.bookie_id, b.address) as c:
        got = read_all(c, LEDGER, 0, 3)
        assert got[0] == (Status.OK, b"A" * 1000) and got[2] == (Status.OK, b"C" * 1000)
        assert got[1][0] == Status.UNKNOWN_ENTRY_STATE
        assert got[3][0] == Status.UNKNOWN_ENTRY_STATE
        assert c.info().uncertain
    b.stop()


def test_wiped_data_dir_is_refused(meta_uri: str, tmp_path: Path) -> None:
    b = LocalBookie(meta_uri, tmp_path / "data", extra_args=RAW).start()
    with BookieClient(b.bookie_id, b.address) as c:
        assert add_sync(c, LEDGER, [(0, -1, b"x")]) == (Status.OK, "")
    b.stop()
    shutil.rmtree(tmp_path / "data")
    code, log_text = b.run_to_exit()
    assert code == 1
    assert "wiped" in log_text and b.bookie_id in log_text and "Traceback" not in log_text
    # A data dir of another bookie is refused too.
    other = LocalBookie(meta_uri, tmp_path / "other", extra_args=RAW).start()
    other.stop()
    b2 = LocalBookie(meta_uri, tmp_path / "other", bookie_id="someone-else", extra_args=RAW)
    code, log_text = b2.run_to_exit()
    assert code == 1 and "belongs to bookie" in log_text


def test_sigterm_deregisters_and_metrics_are_served(meta_uri: str, tmp_path: Path) -> None:
    mport = free_port()
    b = LocalBookie(meta_uri, tmp_path / "data", extra_args=["--metrics-port", str(mport), *RAW]).start()
    store = open_store(meta_uri)
    try:
        registry = BookieRegistry(store)
        assert [x.bookie_id for x in registry.list()] == [b.bookie_id]
        with BookieClient(b.bookie_id, b.address) as c:
            assert add_sync(c, LEDGER, [(i, i - 1, b"m") for i in range(10)]) == (Status.OK, "")
        body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
        assert "bookie_adds_total 10" in body and "bookie_read_only 0.0" in body
        assert "bookie_add_latency_seconds_count 1" in body
        assert b.stop() == 0
        assert registry.list() == []
    finally:
        store.close()


def test_disk_full_turns_read_only(meta_uri: str, tmp_path: Path) -> None:
    # Thresholds below the disk's real usage: the bookie is "full" from the start.
    b = LocalBookie(meta_uri, tmp_path / "data", extra_args=[*RAW,
        "--disk-usage-threshold", "0.0001", "--disk-usage-lwm-threshold", "0.00005"]).start()
    store = open_store(meta_uri)
    try:
        with BookieClient(b.bookie_id, b.address) as c:
            assert add_sync(c, LEDGER, [(0, -1, b"x")])[0] == Status.READ_ONLY
            assert c.info().read_only
            assert c.read((0, 1), 0, 0).status == Status.NO_SUCH_LEDGER  # reads still served
        infos = BookieRegistry(store).list()
        assert len(infos) == 1 and infos[0].read_only
    finally:
        store.close()
        b.stop()


def test_disk_monitor_hysteresis() -> None:
    assert next_read_only(False, 0.96, 0.95, 0.90) is True
    assert next_read_only(True, 0.93, 0.95, 0.90) is True  # between the marks: stays read-only
    assert next_read_only(True, 0.90, 0.95, 0.90) is False
    assert next_read_only(False, 0.93, 0.95, 0.90) is False
    usage = [(96, 100)]
    applied: list[bool] = []
    mon = DiskMonitor(lambda: usage[0], applied.append, 0.95, 0.90, 3600)
    assert mon.check_once() is True
    usage[0] = (92, 100)
    assert mon.check_once() is True
    usage[0] = (89, 100)
    assert mon.check_once() is False
    assert applied == [True, False]
