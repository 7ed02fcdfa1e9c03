"""Run-encoded adds (issue 30 item 2) against real bookies: WriteHandle.add_entries_async, wire
version 2, E > W striping of a run, an entry refused inside a run, and a bookie killed (kill -9)
while a writer streams runs at it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
import pytest

from bookie.proto.versions import OUR_RANGE, RUN_ADDS_VERSION
from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.protocol.distribution import write_sets
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch

WAIT_S = 120.0


def _payload(i: int, size: int = 100) -> bytes:
    head = b"run-entry-%d-" % i
    return head + b"p" * max(0, size - len(head))


def test_runs_stripe_over_e_greater_than_w_and_read_back(make_cluster: Callable[..., LocalCluster]) -> None:
    """E5 W3: each bookie gets the entries of its stripe, in sub-runs that are not consecutive,
    and stores exactly those; every entry reads back in order (lists and Arrow arrays alike)."""
    cluster = make_cluster(5)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        w = client.create_ledger(5, 3, 2)
        runs = [[_payload(i) for i in range(0, 7)], [_payload(i) for i in range(7, 8)],
                [_payload(i, 1024) for i in range(8, 108)]]
        futures = [w.add_entries_async(runs[0]), w.add_entries_async(runs[1]),
                   w.add_entries_async(pa.array(runs[2], pa.large_binary()))]
        assert [f.result(timeout=WAIT_S) for f in futures] == [6, 7, 107]  # each run's last entry
        ensemble = client.ledger_metadata(w.ledger_id).segments[0].bookies
        assert {client.pool.get(b).wire_version() for b in ensemble} == {RUN_ADDS_VERSION}
        w.close()
        key = (w.ledger_id.scope_id, w.ledger_id.id)
        sets = write_sets(ensemble, 3)
        for bookie in ensemble:
            resp = client.pool.get(bookie).read(key, 0, 107)
            holds = {eid for eid, st in zip(resp.entry_ids, resp.entry_status) if st == Status.OK}
            assert holds == {e for e in range(108) if bookie in sets[e % 5]}, f"bookie {bookie} holds the wrong entries"
        payloads = [e.payload for e in client.open_ledger(w.ledger_id).read_entries(0, 107)]
        assert payloads == runs[0] + runs[1] + runs[2]
        with pytest.raises(TypeError, match="nulls"):
            client.create_ledger(3, 3, 2).add_entries_async(pa.array([b"x", None], pa.binary()))


def test_an_entry_refused_inside_a_run_fails_it_and_every_later_one(make_cluster: Callable[..., LocalCluster]) -> None:
    """A bookie refuses a run from its oversized entry on (TOO_LARGE), saying how many entries
    before it are durable; the writer acknowledges those and fails the run, and its LAC (and the
    ledger recovery closes) never passes the refused entry."""
    cluster = make_cluster(3, bookie_args=["--max-entry-size-bytes", "4096"])
    run = [_payload(i) for i in range(5)] + [b"L" * 8000] + [_payload(i) for i in range(6, 9)]
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        # The wire, over the add listener and over gRPC's Add stream: one answer for the run,
        # TOO_LARGE with the durable prefix counted.
        bookie = cluster.bookies[0]
        probe = client.create_ledger(3, 3, 2)
        key = (probe.ledger_id.scope_id, probe.ledger_id.id)
        grpc_only = BookieClient(bookie.bookie_id, bookie.address, wire_range=lambda: OUR_RANGE)
        try:
            for bc in (client.pool.get(bookie.bookie_id), grpc_only):
                answered = threading.Event()
                seen: list[object] = []
                batch = EncodedAddBatch(key, master_key(b""), [(i, -1, data) for i, data in enumerate(run)])
                send = bc.submit_encoded(batch, lambda status, message: (seen.extend([status, message]), answered.set()),
                                         on_stored=seen.append)
                if send is not None:
                    send()
                assert answered.wait(WAIT_S)
                assert seen[0] == 5 and seen[1] == Status.TOO_LARGE and "entry 5 is 8000 bytes" in str(seen[2]), seen
                assert bc.wire_version() == RUN_ADDS_VERSION
        finally:
            grpc_only.close()
        got = client.pool.get(bookie.bookie_id).read(key, 0, 8)
        assert [e for e, st in zip(got.entry_ids, got.entry_status) if st == Status.OK] == [0, 1, 2, 3, 4]

        # The writer: the run's future fails, the LAC stops before the refused entry.
        w = client.create_ledger(3, 3, 2)
        assert w.add_entries_async([b"before"]).result(timeout=WAIT_S) == 0
        failed = w.add_entries_async(run)
        with pytest.raises(LedgerError):
            failed.result(timeout=WAIT_S)
        # Entry 0 and the run's five entries before the refused one are durable on every bookie;
        # they complete unless the writer stopped while an ensemble change held completions.
        assert w.last_add_confirmed() in (0, 5)
        with pytest.raises(LedgerError):
            w.add_entry(b"after")  # no quorum can store entry 6: the writer stopped
        lid = w.ledger_id
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as other:
        r = other.open_ledger(lid, recovery=True)
        assert r.last_add_confirmed() == 5
        assert [e.payload for e in r.read_entries(0, 5)] == [b"before"] + run[:5]


def test_kill9_of_a_bookie_while_runs_stream_in_loses_no_acknowledged_entry(
        make_cluster: Callable[..., LocalCluster]) -> None:
    """A bookie of the ensemble is killed (kill -9) while runs of 64 KiB-sized entries stream at
    it, so it dies inside a run record's write or sync; the writer changes its ensemble, and a
    recovery by another client reads every acknowledged entry back, in order and intact."""
    cluster = make_cluster(4)
    acked: list[tuple[int, int]] = []  # (first, last) of every acknowledged run
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        w = client.create_ledger(3, 3, 2)
        victim_id = client.ledger_metadata(w.ledger_id).segments[0].bookies[1]
        victim = next(b for b in cluster.bookies if b.bookie_id == victim_id)
        next_id = 0
        futures = []
        for r in range(60):
            run = [_payload(next_id + i, 4096) for i in range(16)]
            futures.append((next_id, w.add_entries_async(run)))
            next_id += 16
            if r == 20:
                futures[-1][1].result(timeout=WAIT_S)  # runs are flowing: now kill it mid-stream
                victim.kill()
        for first, fut in futures:
            acked.append((first, fut.result(timeout=WAIT_S)))
        assert client.ledger_metadata(w.ledger_id).segments[-1].bookies.count(victim_id) == 0
        lid, lac = w.ledger_id, w.last_add_confirmed()
    assert lac == next_id - 1 and acked[-1][1] == lac
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as other:
        r = other.open_ledger(lid, recovery=True)
        assert r.last_add_confirmed() >= lac
        payloads = [e.payload for e in r.read_entries(0, lac)]
    assert payloads == [_payload(i, 4096) for i in range(lac + 1)]
