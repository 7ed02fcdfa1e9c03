"""Peer repair where reads need auth (issue 31 item 5): the docs' secured example (mutual TLS,
--require-read-auth, the bookies' own certificate NOT an operator identity) repairs a flipped byte
in one scrub pass.

Three real bookies and a real ZooKeeper, one ledger on all three (E=W=3) with a password. Bookie 0
is stopped, one byte of one stored copy is flipped in its entry log, and it restarts scrubbing
every second. Its first pass finds the copy and repairs it from a peer (the peer read carries the
ledger's master key); the passes after find nothing. Before the fix the peers refused the keyless
read (PERMISSION_DENIED) and every pass found the same damaged copy again.
"""

from __future__ import annotations

import time
from pathlib import Path

from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.test_scrub_cluster import flip, metric, stored_locations
from tests.security.secured_cluster import secured_cluster

ENTRIES = 20
DAMAGED_ENTRY = 7
PASSWORD = b"peer-repair-pw"
WAIT_S = 120.0


def _payload(i: int) -> bytes:
    return b"entry-%d:" % i + bytes((i * 7 + k) % 251 for k in range(2000))


def test_scrubber_repairs_a_flipped_byte_in_one_pass_under_read_auth(zk_uri: str, tmp_path: Path) -> None:
    cluster, certs, _secret = secured_cluster(tmp_path, 3, metadata_uri=zk_uri, require_read_auth=True)
    with cluster:
        with LedgerClient(cluster.metadata_uri, tls_ca=str(certs.ca), tls_cert=str(certs.client.cert),
                          tls_key=str(certs.client.key)) as client:
            w = client.create_ledger(3, 3, 3, password=PASSWORD)
            for i in range(ENTRIES):
                w.add_entry(_payload(i))
            w.close()
            lid = w.ledger_id
        key = (lid.scope_id, lid.id)
        victim = cluster.bookies[0]
        victim.stop()
        flip(victim, *stored_locations(victim)[(key, DAMAGED_ENTRY)])
        mport = free_port()
        victim.extra_args = [*victim.extra_args, "--scrub-interval-s", "1", "--metrics-port", str(mport)]
        victim.start()
        deadline = time.monotonic() + WAIT_S
        while metric(mport, "bookie_scrub_passes_total") < 2:  # the first pass, and one after it
            assert time.monotonic() < deadline, "no two scrub passes finished:\n" + victim.tail_log()
            time.sleep(0.5)
        found = metric(mport, "bookie_scrub_damaged_total")
        repaired = metric(mport, "bookie_scrub_repaired_total")
        passes = metric(mport, "bookie_scrub_passes_total")
        print(f"peer repair under read auth: passes={passes:.0f} found={found:.0f} repaired={repaired:.0f}")
        # Found once, repaired in that pass: later passes find nothing (unrepaired, each pass counts it).
        assert (found, repaired) == (1, 1), victim.tail_log(60)

        tls = certs.tls("client")
        with BookieClient(victim.bookie_id, victim.address, tls=tls) as bc:
            resp = bc.read(key, DAMAGED_ENTRY, DAMAGED_ENTRY, master_key=master_key(PASSWORD))
        assert resp.entry_status[0] == Status.OK
        entry = decode_entry(Digest.for_ledger("crc32c"), resp.entries[0], key[0], key[1], DAMAGED_ENTRY)
        assert entry.payload == _payload(DAMAGED_ENTRY)
