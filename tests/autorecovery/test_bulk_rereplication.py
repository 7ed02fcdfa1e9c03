"""Bulk re-replication (autorecovery/raw_copy.py): real bookies on a real ZooKeeper.

Every copy is checked against the surviving replica byte for byte (header, LAC, digest, payload:
the stored bytes are forwarded, not re-encoded) and decoded with its digest; a copy that fails
half-way resumes to a complete copy; the shared rate bounds the copy's speed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from bookie.status import Status
from metadata import LedgerId, write_set
from pyspark_ledger.autorecovery.copy_pace import MB, CopyPace
from pyspark_ledger.autorecovery.raw_copy import IN_FLIGHT_BATCHES_MAX, IN_FLIGHT_BYTES_MAX, Sender
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.autorecovery.swap_record import SwapRecords
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.local_cluster import LocalCluster
from tests.autorecovery.cluster_shape import MIB, Written, check_every_copy, payload

STORED_COPY_TIMEOUT_S = 30.0


@pytest.fixture
def cluster(zk_uri: str, tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(5, metadata_uri=zk_uri, work_dir=tmp_path / "cluster")
    c.start()
    yield c
    c.close()


def write(client: LedgerClient, n: int, ensemble: list[str], quorums: tuple[int, int, int],
          sizes: Sequence[int]) -> tuple[LedgerId, list[bytes]]:
    w = client.create_ledger(*quorums, ensemble=ensemble)
    data = [payload(n, e, size) for e, size in enumerate(sizes)]
    for f in [w.add_entry_async(p) for p in data]:
        f.result(timeout=120)
    w.close()
    return w.ledger_id, data


def stored(client: LedgerClient, bookie: str, lid: LedgerId, entry: int) -> bytes:
    resp = client.pool.get(bookie).read((lid.scope_id, lid.id), entry, entry, timeout_s=STORED_COPY_TIMEOUT_S)
    assert list(resp.entry_status) == [int(Status.OK)], f"{lid} entry {entry}: {bookie} has no copy"
    return bytes(resp.entries[0])


def assert_copies_identical(client: LedgerClient, written: Written, lost: str) -> None:
    """Each entry's copies are the same stored bytes on every bookie of its write set."""
    for lid, data in written.entries.items():
        meta = client.ledger_metadata(lid)
        assert lost not in meta.bookies(), f"{lid} still names {lost}"
        for e in range(len(data)):
            holders = [meta.ensemble_for(e)[s] for s in write_set(e, meta.ensemble_size, meta.write_quorum_size)]
            copies = {b: stored(client, b, lid, e) for b in holders}
            assert len(set(copies.values())) == 1, f"{lid} entry {e}: the copies differ among {holders}"


def test_raw_copies_of_a_lost_bookie_are_its_stored_bytes(cluster: LocalCluster) -> None:
    a, b, c, d, _e = (bk.bookie_id for bk in cluster.bookies)
    small = [100 + 37 * i for i in range(40)]
    mixed = [MIB if i % 7 == 3 else 300 + i for i in range(30)]
    written = Written()
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
        shapes = [([a, b, c], (3, 3, 2), small), ([a, b, c], (3, 2, 2), mixed), ([a, b, c, d], (4, 2, 2), small),
                  ([b, a, c], (3, 3, 3), mixed)]
        for n, (ensemble, quorums, sizes) in enumerate(shapes):
            lid, data = write(client, n, ensemble, quorums, sizes)
            written.entries[lid] = data
        expected = 0
        for lid in written.entries:
            meta = client.ledger_metadata(lid)
            slot = meta.segments[0].bookies.index(a)
            expected += sum(1 for e in range(meta.last_entry_id + 1)
                            if slot in write_set(e, meta.ensemble_size, meta.write_quorum_size))
        cluster.bookies[0].kill()
        copies, copied_bytes = [0], [0]
        pace = CopyPace(500)
        for lid in written.entries:
            moved = rereplicate(client.context, lid, a, pace=pace, on_copies=lambda n: copies.__setitem__(0, copies[0] + n),
                                on_copied=lambda n: copied_bytes.__setitem__(0, copied_bytes[0] + n))
            assert [i for i, _new in moved] == [0]
        assert copies[0] == expected, f"{copies[0]} copies reported, {expected} entries were on {a}"
        assert copied_bytes[0] > written.bytes_total // 3
        assert_copies_identical(client, written, a)
        assert check_every_copy(client, written) == sum(
            len(d) * client.ledger_metadata(lid).write_quorum_size for lid, d in written.entries.items())


def test_a_copy_that_fails_half_way_resumes_to_a_complete_copy(cluster: LocalCluster,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, _d, _e = (bk.bookie_id for bk in cluster.bookies)
    written = Written()
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
        lid, data = write(client, 0, [a, b, c], (3, 3, 2), [MIB] * 14 + [1000] * 50)
        written.entries[lid] = data
        cluster.bookies[0].kill()
        sent: list[str] = []
        real_get = client.pool.get

        def failing_get(bookie_id: str) -> object:
            target = real_get(bookie_id)
            if bookie_id in (b, c):
                return target

            class Failing:  # the replacement refuses every batch after its second
                def __init__(self) -> None:
                    self.bookie_id = target.bookie_id

                def add_batch(self, key: object, mk: bytes, batch: list[tuple[int, int, bytes]],
                              cb: Callable[[Status, str], None], **kw: object) -> None:
                    sent.append(bookie_id)
                    if len(sent) > 2:
                        cb(Status.INTERNAL_ERROR, "planted: the replacement's disk failed")
                        return
                    target.add_batch(key, mk, batch, cb, **kw)  # type: ignore[arg-type]  # the real call, its keywords passed through

            return Failing()

        monkeypatch.setattr(client.pool, "get", failing_get)
        with pytest.raises(LedgerError, match="planted"):
            rereplicate(client.context, lid, a, holder="first")
        monkeypatch.undo()
        assert len(sent) > 2
        record = SwapRecords(client.store).get(lid, 0, a)
        assert record is not None and record[0] is not None, "the prepared swap must stay for a successor"
        new = record[0].new
        assert client.ledger_metadata(lid).segments[0].bookies[0] == a, "nothing is committed before the copy"
        moved = rereplicate(client.context, lid, a, holder="second", resume_swaps=True)
        assert moved == [(0, new)], "the successor finishes the predecessor's swap, to the same bookie"
        assert SwapRecords(client.store).get(lid, 0, a) is None
        assert_copies_identical(client, written, a)
        assert check_every_copy(client, written) == 3 * len(data)


def test_the_rate_bounds_a_copy_through_the_command(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, c, _d, _e = (bk.bookie_id for bk in cluster.bookies)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
        lid, data = write(client, 0, [a, b, c], (3, 3, 2), [MIB] * 8)
    cluster.bookies[0].kill()
    rate_mb_s = 2.0
    started = time.monotonic()
    code = main(["--metadata-uri", cluster.metadata_uri, "recover", "--bookie", a, "--rate-mb-s", str(rate_mb_s)])
    elapsed_s = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert f"fragment 0: {a} ->" in out, out
    floor_s = len(data) * MIB / (rate_mb_s * MB) - 0.25 - 4 * MIB / (rate_mb_s * MB)  # burst, and the last batch
    assert elapsed_s >= floor_s, f"8 MiB at {rate_mb_s} MB/s took {elapsed_s:.2f} s, under {floor_s:.2f} s"
    assert elapsed_s < 300, "generous: the copy must not stall"
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
        assert check_every_copy(client, Written({lid: data})) == 3 * len(data)
    assert main(["--metadata-uri", cluster.metadata_uri, "recover", "--bookie", a, "--rate-mb-s", "0"]) != 0
    assert "--rate-mb-s" in capsys.readouterr().err
    assert main(["--metadata-uri", cluster.metadata_uri, "recover", "--bookie", a, "--parallel", "0"]) != 0
    assert "--parallel" in capsys.readouterr().err


def test_pace_shares_one_rate_between_threads() -> None:
    pace = CopyPace(2.0)  # 2 MB/s
    chunks, chunk_bytes, threads = 6, 250_000, 3  # 4.5 MB in all

    def copy() -> None:
        for _ in range(chunks):
            pace.acquire(chunk_bytes)

    started = time.monotonic()
    workers = [threading.Thread(target=copy) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    elapsed_s = time.monotonic() - started
    total = chunks * chunk_bytes * threads
    # The last request waits for every byte before it, less the burst: 4.5 MB - 0.5 MB - its own.
    assert elapsed_s >= (total - 0.25 * 2 * MB - chunk_bytes) / (2 * MB) - 0.05
    assert elapsed_s < 60
    with pytest.raises(ValueError, match="rate"):
        CopyPace(0)


def test_sender_keeps_its_batches_and_bytes_in_flight_bounded() -> None:
    class Target:
        bookie_id = "t"

        def __init__(self) -> None:
            self.callbacks: list[Callable[[Status, str], None]] = []
            self.peak = 0

        def add_batch(self, key: object, mk: bytes, batch: object, cb: Callable[[Status, str], None],
                      **kw: object) -> None:
            self.callbacks.append(cb)
            self.peak = max(self.peak, len(self.callbacks))

    target = Target()
    acked: list[tuple[int, int]] = []
    sender = Sender(target, (0, 1), b"", None, lambda entries, n: acked.append((entries, n)))  # type: ignore[arg-type]  # a fake bookie
    stop = threading.Event()

    def answer() -> None:  # the bookie answers the oldest batch every few ms
        while not stop.is_set():
            if target.callbacks:
                target.callbacks.pop(0)(Status.OK, "")
            time.sleep(0.002)

    t = threading.Thread(target=answer)
    t.start()
    try:
        for i in range(40):
            sender.send([(i, -1, b"x" * (3 * 2**19))])  # 1.5 MiB each: the byte bound is the tighter
        sender.drain()
    finally:
        stop.set()
        t.join(30)
    assert 1 <= target.peak <= min(IN_FLIGHT_BATCHES_MAX, IN_FLIGHT_BYTES_MAX // (3 * 2**19))
    assert len(acked) == 40 and sum(n for _e, n in acked) == 40 * 3 * 2**19

    failing = Target()
    sender = Sender(failing, (0, 1), b"", None, lambda entries, n: None)  # type: ignore[arg-type]  # a fake bookie
    sender.send([(0, -1, b"x")])
    failing.callbacks.pop()(Status.FENCED, "no")
    with pytest.raises(LedgerError, match="FENCED"):
        sender.drain()


def test_the_rate_reaches_the_service_from_its_flag_and_from_a_bookie(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from bookie import autorecovery_child
    from bookie.config import ConfigError, build_parser, config_from_args
    from pyspark_ledger.autorecovery.service import AutorecoverySettings

    base = ["--metadata-uri", "sqlite:///x.db", "--data-dir", str(tmp_path)]
    cfg = config_from_args(build_parser().parse_args([*base, "--rereplication-rate-mb-s", "12.5"]))
    assert cfg.rereplication_rate_mb_s == 12.5
    assert config_from_args(build_parser().parse_args(base)).rereplication_rate_mb_s == 50.0
    with pytest.raises(ConfigError, match="--rereplication-rate-mb-s"):
        config_from_args(build_parser().parse_args([*base, "--rereplication-rate-mb-s", "0"]))
    started: list[list[str]] = []

    class Child:
        pid = 0

        def __init__(self, cmd: list[str], **_: object) -> None:
            started.append(cmd)

    monkeypatch.setattr(autorecovery_child.subprocess, "Popen", Child)
    autorecovery_child.start_autorecovery_child("sqlite:///x.db", 30.0, None,
                                                rereplication_rate_mb_s=cfg.rereplication_rate_mb_s)
    cmd = started[0]
    assert cmd[cmd.index("--rereplication-rate-mb-s") + 1] == "12.5"
    with pytest.raises(ValueError, match="--rereplication-rate-mb-s"):
        AutorecoverySettings(rereplication_rate_mb_s=0).validate()
    assert main(["--metadata-uri", f"sqlite://{tmp_path / 'm.db'}", "autorecovery",
                 "--rereplication-rate-mb-s", "-1"]) != 0


def test_a_bookie_without_run_answers_is_read_entry_by_entry() -> None:
    """A survivor of a release before ReadRequest.entry_runs answers entry by entry (its OK entries
    listed by id, without bytes, in the run-parsed answer): the copy reads those the old way,
    and still checks each entry's digest (a damaged one goes to the problems, not the copy)."""
    from types import SimpleNamespace

    from bookie.proto import bookie_pb2 as pb
    from pyspark_ledger.autorecovery import raw_copy
    from pyspark_ledger.protocol.digest import LedgerKeys
    from pyspark_ledger.protocol.entry_format import encode_entry
    from pyspark_ledger.transport.bookie_pool import Faults
    from pyspark_ledger.transport.run_response import RunResponse

    keys = LedgerKeys.from_password("crc32c", b"")
    stored_bytes = {e: encode_entry(keys.digest, 0, 7, e, e - 1, 10 * (e + 1), b"payload %d" % e) for e in range(5)}
    stored_bytes[3] = stored_bytes[3][:-1] + b"X"  # damaged on this bookie

    class OldBookie:
        bookie_id = "old"

        def read_runs(self, key: object, first: int, last: int, **_: object) -> RunResponse:
            ids = list(range(first, last + 1))
            return RunResponse(int(Status.OK), "", -1, ids, [int(Status.OK)] * len(ids), [])

        def read(self, key: object, first: int, last: int, **_: object) -> pb.ReadResponse:
            ids = list(range(first, last + 1))
            return pb.ReadResponse(status=int(Status.OK), entry_ids=ids, entry_status=[int(Status.OK)] * len(ids),
                                   entries=[stored_bytes[e] for e in ids])

    context = SimpleNamespace(pool=SimpleNamespace(faults=Faults(), get=lambda _b: OldBookie()))
    got: dict[int, tuple[int, bytes]] = {}
    problems: dict[int, list[str]] = {}
    raw_copy._read_from(context, "old", (0, 7), keys, [1, 2, 3, 4], got, problems)  # type: ignore[arg-type]  # a fake context
    assert {e: data for e, (_lac, data) in got.items()} == {e: stored_bytes[e] for e in (1, 2, 4)}
    assert got[2][0] == 1, "the LAC comes from the entry's header"
    assert list(problems) == [3] and "digest" in problems[3][0]
