"""Bulk re-replication, measured: a lost bookie holding `size_gb` of entries, a writer running on
the other bookies all along, one `ledger autorecovery` at its default rate. Used by
bench/autorecovery_bench.py --gb (the acceptance size, 1 GB) and by
tests/autorecovery/test_bulk_rereplication_round.py (a CI size, LEDGER_REREPLICATION_GB).

The ledgers are E3W3A2 on [victim, two others] (rotating), so the victim holds every entry of every
ledger: `size_gb` is exactly what must be copied. The writer's ledger avoids the victim, so its
rate measures contention (disk, CPU), not an ensemble change."""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from metadata.paths import UNDERREPLICATED
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.zookeeper_server import free_port
from tests.autorecovery.cluster_shape import (
    Autorecovery,
    Written,
    check_every_copy,
    payload,
    start_cluster,
    under_replicated,
    zk_uri_with_short_sessions,
)

ENTRY_BYTES = 256 * 2**10
LEDGER_BYTES_MAX = 32 * 2**20
ADDS_IN_FLIGHT_MAX = 64
WRITER_ENTRY_BYTES = 1024
BASELINE_S = 6.0  # the writer's rate without re-replication: this long before the kill, and after
POLL_S = 0.25
WAIT_S_MAX = 1800.0
SERVICE_START_S_MAX = 300.0
COUNTERS = ("autorecovery_rereplicated_bytes_total", "autorecovery_rereplicated_entries_total",
            "autorecovery_audit_metadata_requests_total", "autorecovery_audit_scanned_ledgers_total",
            "autorecovery_rereplicated_ledgers_total")


def counters(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {name: 0.0 for name in COUNTERS}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in out:
            out[name] = float(value)
    return out


def wait_for_metrics(port: int, service: Autorecovery) -> None:
    deadline = time.monotonic() + SERVICE_START_S_MAX
    while True:
        try:
            counters(port)
            return
        except OSError:
            if time.monotonic() > deadline or service.proc.poll() is not None:
                raise AssertionError(f"the service's metrics did not answer within {SERVICE_START_S_MAX:g} s; "
                                     f"see {service.log_path}") from None
            time.sleep(POLL_S)


def write_victim_ledgers(uri: str, victim: str, others: list[str], size_bytes: int) -> Written:
    out = Written()
    with LedgerClient(uri, add_timeout_s=60) as client:
        i = 0
        while out.bytes_total < size_bytes:
            pair = [others[i % len(others)], others[(i + 1) % len(others)]]
            w = client.create_ledger(3, 3, 2, ensemble=[victim, *pair])
            n = max(1, min(LEDGER_BYTES_MAX, size_bytes - out.bytes_total) // ENTRY_BYTES)
            data = [payload(i, e, ENTRY_BYTES) for e in range(n)]
            pending = []
            for p in data:
                pending.append(w.add_entry_async(p))
                if len(pending) >= ADDS_IN_FLIGHT_MAX:
                    pending.pop(0).result(timeout=120)
            for f in pending:
                f.result(timeout=120)
            w.close()
            out.entries[w.ledger_id] = data
            i += 1
    return out


class RunningWriter:
    """1 KiB adds, ADDS_IN_FLIGHT_MAX in flight, on bookies other than the victim; the
    acknowledgement times are kept so a rate over any window can be read afterwards."""

    def __init__(self, uri: str, ensemble: list[str]):
        self.client = LedgerClient(uri, add_timeout_s=60)
        self.handle = self.client.create_ledger(3, 3, 2, ensemble=ensemble)
        self.acked_at: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="running-writer", daemon=True)

    def start(self) -> RunningWriter:
        self._thread.start()
        return self

    def _run(self) -> None:
        data = b"w" * WRITER_ENTRY_BYTES
        pending = []
        try:
            while not self._stop.is_set():
                pending.append(self.handle.add_entry_async(data))
                if len(pending) >= ADDS_IN_FLIGHT_MAX:
                    pending.pop(0).result(timeout=120)
                    self.acked_at.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t in self.acked_at if start <= t < end) / max(end - start, 1e-3)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)
        self.handle.close()
        self.client.close()
        if self.error is not None:
            raise AssertionError(f"the running writer failed: {self.error!r}") from self.error


@dataclass
class BulkResult:
    copied_mb: float
    copies: float
    copy_s: float  # from the first copied byte to every fragment back to 3 copies
    kill_to_replicated_s: float
    writer_adds_per_s_without: float
    writer_adds_per_s_during: float
    copies_checked: int

    @property
    def mb_per_s(self) -> float:
        return self.copied_mb / max(self.copy_s, 1e-3)

    @property
    def copies_per_s(self) -> float:
        return self.copies / max(self.copy_s, 1e-3)

    @property
    def writer_ratio(self) -> float:
        return self.writer_adds_per_s_during / max(self.writer_adds_per_s_without, 1e-9)


def bulk_round(zk_uri: str, work: Path, size_gb: float, *extra_args: str, check_copies: bool = True,
               baseline_s: float = BASELINE_S) -> BulkResult:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, work / "cluster")
    service = writer = None
    try:
        victim, *others = cluster.bookies
        written = write_victim_ledgers(uri, victim.bookie_id, [b.bookie_id for b in others], int(size_gb * 1e9))
        writer = RunningWriter(uri, [b.bookie_id for b in others[:3]]).start()
        port = free_port()
        service = Autorecovery(uri, work / "autorecovery.log", "--metrics-port", str(port), *extra_args)
        wait_for_metrics(port, service)  # a niced service on a busy machine may take a while to start
        time.sleep(baseline_s)  # the service is elected; the writer's baseline
        with LedgerClient(uri, add_timeout_s=60) as client:
            killed = time.monotonic()
            victim.kill()
            base = counters(port)
            first_copy = None
            while True:
                now = time.monotonic()
                got = counters(port)
                if first_copy is None and got["autorecovery_rereplicated_bytes_total"] > base[
                        "autorecovery_rereplicated_bytes_total"]:
                    first_copy = now - POLL_S
                # Cheap checks first: this process runs the writer too, and reading every ledger's
                # metadata four times a second would slow it (the GIL) during the copy only.
                if first_copy is not None and got["autorecovery_rereplicated_ledgers_total"] >= len(written.entries) \
                        and not client.store.children(UNDERREPLICATED) and not under_replicated(
                            client, written, {victim.bookie_id}):
                    done = now
                    break
                if now - killed > WAIT_S_MAX:
                    raise AssertionError(f"not re-replicated within {WAIT_S_MAX:g} s; see {service.log_path}")
                time.sleep(POLL_S)
            time.sleep(baseline_s)  # the writer's rate after, to average with before
            after = time.monotonic()
            last = counters(port)
            without = (writer.rate(killed - baseline_s, killed) + writer.rate(done, after)) / 2
            during = writer.rate(first_copy, done)
            writer.stop()
            writer = None
            checked = check_every_copy(client, written) if check_copies else 0
        return BulkResult(
            copied_mb=(last["autorecovery_rereplicated_bytes_total"] - base["autorecovery_rereplicated_bytes_total"]) / 1e6,
            copies=last["autorecovery_rereplicated_entries_total"] - base["autorecovery_rereplicated_entries_total"],
            copy_s=done - first_copy, kill_to_replicated_s=done - killed, writer_adds_per_s_without=without,
            writer_adds_per_s_during=during, copies_checked=checked)
    finally:
        if writer is not None:
            writer.stop()
        if service is not None:
            service.stop()
        cluster.close()
