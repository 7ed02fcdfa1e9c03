"""The scrubber and peer repair with real `bookie` processes and a real ZooKeeper (issue 20,
"corrupt 1% of the copies on one bookie: the scrubber finds 100% within one scrub cycle and
peer repair restores them; reads never return corrupt bytes").

Three bookies, every entry on all three (E=W=3). Bookie 0 is stopped and 1% of its stored
copies (at least one per ledger) get one byte flipped in their entry log; the client still reads
every entry exactly (the digest check fails over to another copy), and its read repair rewrites
the damaged copies it met (those where bookie 0 was the replica asked first). Bookie 0 restarts
scrubbing every second; after one pass its metrics count exactly the copies still damaged as found
and repaired, and a direct read of every entry from bookie 0 alone returns the exact bytes.
"""

from __future__ import annotations

import random
import time
import urllib.request
from pathlib import Path

from bookie.status import Status
from bookie.storage.checkpoint import load_ledger_snapshots
from bookie.storage.index_store import IndexStore
from bookie.storage.ledger_index import unpack_location
from bookie.storage.records import ENTRY_HEADER_BYTES
from metadata import LedgerId
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient

LEDGERS = 10
ENTRIES = 100
WAIT_S = 90.0


def payload(n: int, i: int) -> bytes:
    size = 2**20 if i % 50 == 7 else 3000  # mostly small entries, a few MiB ones
    head = b"L%d-E%d:" % (n, i)
    return head + bytes((n * 13 + i * 7 + k) % 251 for k in range(size - len(head)))


def stored_locations(bookie: LocalBookie) -> dict[tuple[tuple[int, int], int], tuple[int, int, int]]:
    """(ledger, entry) -> (log id, offset, length) from a stopped bookie's index store."""
    store = IndexStore(bookie.data_dir / "ledgers", fsync=False)
    try:
        return {(loaded.key, e): (*unpack_location(loc), length)
                for loaded in load_ledger_snapshots(store, bookie.data_dir / "ledgers", False)
                if not loaded.meta.deleted for e, loc, length in loaded.meta.index.items()}
    finally:
        store.close()


def flip(bookie: LocalBookie, log_id: int, offset: int, length: int) -> None:
    with open(bookie.data_dir / "entries" / f"{log_id:016x}.log", "r+b") as f:
        at = offset + ENTRY_HEADER_BYTES + length // 3
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def served_exactly(bookie: LocalBookie, key: tuple[int, int], entry_id: int, ids: list[LedgerId]) -> bool:
    n = [(lid.scope_id, lid.id) for lid in ids].index(key)
    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        resp = bc.read(key, entry_id, entry_id)
    if resp.entry_status[0] != Status.OK:
        return False
    return decode_entry(Digest.for_ledger("crc32c"), resp.entries[0], key[0], key[1], entry_id).payload == payload(n, entry_id)


def test_scrubber_finds_every_damaged_copy_and_peers_repair_them(zk_uri: str, tmp_path: Path) -> None:
    with LocalCluster(3, metadata_uri=zk_uri, work_dir=tmp_path / "cluster") as cluster:
        with LedgerClient(cluster.metadata_uri) as client:
            ids: list[LedgerId] = []
            for n in range(LEDGERS):
                w = client.create_ledger(3, 3, 2)
                for i in range(ENTRIES):
                    w.add_entry(payload(n, i))
                w.close()
                ids.append(w.ledger_id)
            victim = cluster.bookies[0]
            victim.stop()
            locations = stored_locations(victim)
            rng = random.Random(2020)
            damaged = set()
            for lid in ids:
                key = (lid.scope_id, lid.id)
                damaged.update((key, e) for e in rng.sample(range(ENTRIES), max(1, ENTRIES // 100)))
            for entry in sorted(damaged):
                flip(victim, *locations[entry])
            victim.start()
            for n, lid in enumerate(ids):  # reads never return corrupt bytes
                handle = client.open_ledger(lid)
                got = [e.payload for e in handle.read_entries(0, ENTRIES - 1)]
                assert got == [payload(n, i) for i in range(ENTRIES)]
                deadline = time.monotonic() + 30
                while handle.repairs.in_flight() and time.monotonic() < deadline:
                    time.sleep(0.05)
            still = {(key, e) for key, e in damaged if not served_exactly(victim, key, e, ids)}
            assert still, "read repair fixed every damaged copy: nothing left for the scrubber to find"

            mport = free_port()
            victim.stop()
            victim.extra_args = [*victim.extra_args, "--scrub-interval-s", "1", "--metrics-port", str(mport)]
            victim.start()
            deadline = time.monotonic() + WAIT_S
            while metric(mport, "bookie_scrub_passes_total") < 1:
                assert time.monotonic() < deadline, "no scrub pass finished:\n" + victim.tail_log()
                time.sleep(0.5)
            found = metric(mport, "bookie_scrub_damaged_total")
            repaired = metric(mport, "bookie_scrub_repaired_total")
            print(f"scrub cluster: copies={LEDGERS * ENTRIES} damaged={len(damaged)} "
                  f"left_after_read_repair={len(still)} found_first_pass={found} repaired={repaired} "
                  f"scrubbed_bytes={metric(mport, 'bookie_scrubbed_bytes_total'):.0f}")
            assert (found, repaired) == (len(still), len(still)), victim.tail_log()

            digest = Digest.for_ledger("crc32c")
            with BookieClient(victim.bookie_id, victim.address) as bc:
                for n, lid in enumerate(ids):
                    for i in range(ENTRIES):
                        resp = bc.read((lid.scope_id, lid.id), i, i)
                        assert resp.entry_status[0] == Status.OK, (lid, i)
                        entry = decode_entry(digest, resp.entries[0], lid.scope_id, lid.id, i)
                        assert entry.payload == payload(n, i)
