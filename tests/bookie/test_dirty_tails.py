"""Dirty tails with real `bookie` processes and a real ZooKeeper (issue 18, "a fenced writer's
entries past the closed ledger's last entry are never returned by any read path").

A ledger is written (entries 0..9) and CLOSED at 9; then entries 10..12, validly encoded with
the ledger's digest and master key, are added straight to every bookie through BookieClient, as
a writer that lost the race would have. Bookie 0 runs without periodic GC (it has not learned
the cap yet): asked directly it serves entry 10, which shows the bookies really hold a tail.
Then: the client (read_entries / read_entry past the end), the CLI's `readledger` and a Spark
batch read of the ledger return exactly entries 0..9. After a GC round on bookie 0 a direct RPC
read of 10..12 answers NO_SUCH_ENTRY and its LAC stays 9; after a restart with GC off (no round
to learn the cap again) the same holds: the cap is kept in the ledger's checkpoint snapshot.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from pyspark.sql import SparkSession

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from metadata import LedgerId
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.entry_format import encode_entry
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient

CLOSED_LAST = 9
TAIL = range(CLOSED_LAST + 1, CLOSED_LAST + 4)
GC_ON = ["--gc-interval-s", "1", "--no-verify-ledger-keys"]  # raw ledgers: no metadata
GC_OFF = ["--gc-interval-s", "0"]


def payload(i: int) -> bytes:
    return b"kept-%04d:" % i + bytes((i * 7 + k) % 251 for k in range(1000))


def tail_payload(i: int) -> bytes:
    return b"DIRTY-TAIL-%04d" % i


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def storage_stats(bookie: LocalBookie) -> pb.StorageStatsResponse:
    with grpc.insecure_channel(bookie.address) as channel:
        return pb_grpc.BookieStub(channel).StorageStats(pb.StorageStatsRequest(), timeout=20)


def restart_with(bookie: LocalBookie, args: list[str]) -> None:
    bookie.stop()
    bookie.extra_args = [*bookie.extra_args, *args]  # argparse: the last flag wins
    bookie.start()


@pytest.fixture
def cluster(zk_uri: str, tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(0, metadata_uri=zk_uri, work_dir=tmp_path / "cluster", bookie_args=GC_ON)
    try:
        c.add_bookie(extra_args=GC_OFF)
        c.add_bookie()
        c.add_bookie()
        yield c
    finally:
        c.close()


def add_tail(bookie: LocalBookie, lid: LedgerId) -> None:
    """The fenced writer's adds past the last entry, straight to one bookie."""
    digest = Digest.for_ledger("crc32c")
    entries = [(i, encode_entry(digest, lid.scope_id, lid.id, i, CLOSED_LAST, 10_000 + i, tail_payload(i)))
               for i in TAIL]
    done = threading.Event()
    result: list[int] = []

    def callback(status: int, message: str) -> None:
        result.append(status)
        done.set()

    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        bc.add_batch((lid.scope_id, lid.id), master_key(b""), [(i, CLOSED_LAST, data) for i, data in entries], callback)
        assert done.wait(30), "the tail add was never answered"
    assert result == [Status.OK], f"bookie {bookie.bookie_id} refused the tail: {result}"


def direct_read(bookie: LocalBookie, lid: LedgerId, first: int, last: int) -> dict[int, tuple[int, bytes]]:
    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        resp = bc.read((lid.scope_id, lid.id), first, last)
    return {e: (s, d) for e, s, d in zip(resp.entry_ids, resp.entry_status, resp.entries)}


def bookie_lac(bookie: LocalBookie, lid: LedgerId) -> int:
    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        return int(bc.read_lac((lid.scope_id, lid.id)).lac)


def assert_tail_not_served(bookie: LocalBookie, lid: LedgerId) -> None:
    got = direct_read(bookie, lid, TAIL[0], TAIL[-1])
    for i in TAIL:
        status, data = got.get(i, (Status.NO_SUCH_ENTRY, b""))
        assert status != Status.OK and tail_payload(i) not in data, f"bookie {bookie.bookie_id} served tail entry {i}"
    whole = direct_read(bookie, lid, 0, TAIL[-1])
    assert sorted(e for e, (s, _) in whole.items() if s == Status.OK) == list(range(CLOSED_LAST + 1))
    assert bookie_lac(bookie, lid) <= CLOSED_LAST


def cli_readledger(uri: str, lid: LedgerId, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "--metadata-uri", uri, "--json",
                           "readledger", lid.qualified_name, "--ledger-qualified-name", *extra],
                          capture_output=True, text=True, timeout=120)


def spark_entry_ids(spark: SparkSession, uri: str, lid: LedgerId) -> list[tuple[int, bytes]]:
    rows = (spark.read.format("ledger").option("metadataServiceUri", uri)
            .option("ledger", lid.qualified_name).load().select("entry", "payload").collect())
    return sorted((r.entry, bytes(r.payload)) for r in rows)


def test_dirty_tail_is_never_served_and_the_cap_survives_a_restart(cluster: LocalCluster, tmp_path: Path,
                                                                    spark: SparkSession) -> None:
    uncapped = cluster.bookies[0]
    with LedgerClient(cluster.metadata_uri) as client:
        writer = client.create_ledger(3, 3, 2)
        for i in range(CLOSED_LAST + 1):
            assert writer.add_entry(payload(i)) == i
        writer.close()
        lid = writer.ledger_id
        for b in cluster.bookies:
            add_tail(b, lid)
        # The tail is really on disk: the bookie that has not run GC serves it when asked directly.
        status, data = direct_read(uncapped, lid, TAIL[0], TAIL[0])[TAIL[0]]
        assert status == Status.OK and tail_payload(TAIL[0]) in data

        reader = client.open_ledger(lid)
        assert [(e.entry_id, e.payload) for e in reader.read_entries(0, CLOSED_LAST)] == \
            [(i, payload(i)) for i in range(CLOSED_LAST + 1)]
        with pytest.raises(LedgerError):
            list(reader.read_entries(0, TAIL[-1]))
        with pytest.raises(LedgerError):
            reader.read_entry(TAIL[0])
        assert reader.last_add_confirmed() == CLOSED_LAST

    out = cli_readledger(cluster.metadata_uri, lid, "--format", "hex")
    assert out.returncode == 0, out.stderr
    assert [(r["entryId"], bytes.fromhex(r["payload"])) for r in json.loads(out.stdout)] == \
        [(i, payload(i)) for i in range(CLOSED_LAST + 1)]
    past = cli_readledger(cluster.metadata_uri, lid, "--format", "hex", "--last", str(TAIL[-1]))
    assert past.returncode != 0 and tail_payload(TAIL[0]).hex() not in past.stdout

    assert spark_entry_ids(spark, cluster.metadata_uri, lid) == [(i, payload(i)) for i in range(CLOSED_LAST + 1)]

    # GC on the bookie that had not capped the ledger: after one round the tail is gone from
    # its reads, even by entry id.
    since = time.time()
    restart_with(uncapped, GC_ON)
    wait_until(lambda: storage_stats(uncapped).last_gc_unix_s > since, "a GC round on bookie 0")
    for b in cluster.bookies:
        assert_tail_not_served(b, lid)
    # A restart with no GC round to learn the cap again: it was persisted.
    restart_with(uncapped, GC_OFF)
    assert_tail_not_served(uncapped, lid)


def _snapshot(parts: list[bytes], version: int | None = None) -> bytes:
    from crc32c import crc32c

    from bookie.storage.checkpoint import CRC, LEDGER_HEADER

    body = bytearray(b"".join(parts))
    if version is not None:
        fields = list(LEDGER_HEADER.unpack_from(body, 0))
        fields[1] = version  # magic, version, ...
        LEDGER_HEADER.pack_into(body, 0, *fields)
    return bytes(body) + CRC.pack(crc32c(bytes(body)))


def test_ledger_snapshot_keeps_the_cap_and_reads_version_1(tmp_path: Path) -> None:
    from bookie.storage.checkpoint import decode_ledger, encode_ledger
    from bookie.storage.ledger_index import LedgerMeta

    meta = LedgerMeta(b"k" * 32)
    meta.lac = 12
    meta.closed_last = CLOSED_LAST
    assert decode_ledger(_snapshot(encode_ledger((0, 7), meta)), tmp_path).meta.closed_last == CLOSED_LAST
    meta.closed_last = None
    old = decode_ledger(_snapshot(encode_ledger((0, 7), meta), version=1), tmp_path)  # a version 1 file
    assert (old.key, old.meta.key, old.meta.lac, old.meta.closed_last) == ((0, 7), b"k" * 32, 12, None)
