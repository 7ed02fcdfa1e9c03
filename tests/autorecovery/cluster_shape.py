"""The acceptance tests' cluster: real bookies on a real ZooKeeper, ledgers of small and MiB
entries, `ledger autorecovery` processes, and the checks (metadata ensembles, each copy read from
each bookie of its write set, every entry read back exactly)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from metadata import LedgerId, write_set
from metadata.underreplication import UnderReplicationManager
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.testing.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
SESSION_TIMEOUT_MS = 3000  # a killed process's registration and locks go 3 s after its death
WAIT_S_MAX = 150.0


def zk_uri_with_short_sessions(zk_uri: str) -> str:
    return f"{zk_uri}?session_timeout_ms={SESSION_TIMEOUT_MS}"


def payload(ledger_index: int, entry: int, size: int) -> bytes:
    block = hashlib.sha256(b"ledger %d entry %d" % (ledger_index, entry)).digest()
    return (block * (size // len(block) + 1))[:size]


@dataclass
class Written:
    entries: dict[LedgerId, list[bytes]] = field(default_factory=dict)

    @property
    def bytes_total(self) -> int:
        return sum(len(p) for ps in self.entries.values() for p in ps)


def write_ledgers(uri: str, ledgers: int, *, mib_every: int = 20, open_every: int = 40) -> Written:
    """`ledgers` E3W2A2 ledgers: most of 8 small entries (100 B..2 KiB), every `mib_every`-th of
    three 1 MiB entries, every `open_every`-th left OPEN (its writer gone, as after a crash)."""
    out = Written()
    with LedgerClient(uri, add_timeout_s=30) as client:
        for i in range(ledgers):
            w = client.create_ledger(3, 2, 2)
            sizes = [MIB] * 3 if i % mib_every == mib_every - 1 else [100 + 250 * e for e in range(8)]
            data = [payload(i, e, n) for e, n in enumerate(sizes)]
            for f in [w.add_entry_async(p) for p in data]:
                f.result(timeout=120)
            if i % open_every == open_every - 1:
                client._handles.remove(w)
            else:
                w.close()
            out.entries[w.ledger_id] = data
    return out


class Autorecovery:
    """One `ledger autorecovery` process (or the planted one)."""

    def __init__(self, uri: str, log_path: Path, *extra: str, planted: bool = False):
        module = "tests.autorecovery.planted_autorecovery" if planted else "pyspark_ledger.cli"
        cmd = [sys.executable, "-m", module, "--metadata-uri", uri, "autorecovery", "--lost-bookie-grace-s", "3",
               "--open-ledger-grace-s", "1", *extra]
        self.log_path = log_path
        with open(log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONPATH": str(REPO)})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM; returns the exit code (the process must be gone within 5 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"autorecovery did not stop within 5 s of SIGTERM:\n{self.log()[-3000:]}") from None
        return int(self.proc.returncode)


def under_replicated(client: LedgerClient, written: Written, gone: set[str]) -> list[str]:
    """What is not back to W copies on live bookies: ledgers still naming a gone bookie (open or
    closed), marks left. (An open ledger not on a gone bookie has all its copies.)"""
    problems = []
    for lid in written.entries:
        meta = client.ledger_metadata(lid)
        if meta.bookies() & gone:
            problems.append(f"{lid} {meta.state.value} on {sorted(meta.bookies() & gone)}")
    marks = UnderReplicationManager(client.store).ledger_ids()
    return problems + [f"mark {m}" for m in marks]


def wait_fully_replicated(client: LedgerClient, written: Written, gone: set[str], timeout_s: float = WAIT_S_MAX) -> float:
    """Seconds until every ledger is closed, names no gone bookie and no mark is left."""
    start = time.monotonic()
    while True:
        problems = under_replicated(client, written, gone)
        if not problems:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not re-replicated after {timeout_s:g} s: {len(problems)} left, e.g. {problems[:5]}")
        time.sleep(0.5)


def check_every_copy(client: LedgerClient, written: Written) -> int:
    """Read every entry from every bookie of its write set (the bookie alone, no failover).
    Returns the copies checked; raises on the first missing or different copy."""
    checked = 0
    for lid, data in written.entries.items():
        meta = client.ledger_metadata(lid)
        digest = Digest.for_ledger(meta.digest_type, b"")
        if meta.is_closed:  # a ledger left open (and on no gone bookie) still has every acked entry
            assert meta.last_entry_id == len(data) - 1, f"{lid}: last entry {meta.last_entry_id}, wrote {len(data)}"
        for e, expected in enumerate(data):
            ensemble = meta.ensemble_for(e)
            for slot in write_set(e, meta.ensemble_size, meta.write_quorum_size):
                bookie = ensemble[slot]
                resp = client.pool.get(bookie).read((lid.scope_id, lid.id), e, e, timeout_s=30)
                assert list(resp.entry_status) == [0] and len(resp.entries) == 1, \
                    f"{lid} entry {e}: bookie {bookie} answered status {resp.status} {list(resp.entry_status)} {resp.message}"
                got = decode_entry(digest, resp.entries[0], lid.scope_id, lid.id, e).payload
                assert bytes(got) == expected, f"{lid} entry {e}: bookie {bookie} holds different bytes"
                checked += 1
    return checked


def check_every_entry(client: LedgerClient, written: Written) -> None:
    for lid, data in written.entries.items():
        with client.open_ledger(lid) as reader:
            for e, expected in enumerate(data):
                assert reader.read_entry(e).payload == expected, f"{lid} entry {e} differs"


def start_cluster(uri: str, work_dir: Path, bookies: int = 5) -> LocalCluster:
    return LocalCluster(bookies, metadata_uri=uri, work_dir=work_dir).start()
