"""ZooKeeper killed (kill -9 of the server this test started) under a log writer that rolls over
every few entries: the writer gets an error, not a hang; after ZooKeeper returns, the same client
(reconnected) opens a new writer that continues the log, and every acknowledged entry reads back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata.errors import MetadataUnavailableError
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

METADATA_TIMEOUT_S = 3.0
# Generous: the writer must stop within its metadata deadline plus one add timeout; a hang fails.
HANG_BOUND_S = 90.0
ACKED_BEFORE_KILL = 12


@pytest.fixture
def own_zk(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    zk = LocalZooKeeper(tmp_path / "zk").start()
    try:
        yield zk
    finally:
        zk.close()


def _append_until_error(writer: object, acked: list[bytes], failure: list[BaseException]) -> None:
    for i in range(100_000):  # bounded: the kill stops it long before
        payload = b"entry-%d" % i
        try:
            writer.append(payload)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            failure.append(exc)
            return
        acked.append(payload)


def _check_calls_fail_while_gone(client: LedgerClient, ledger: object) -> None:
    """Creating and opening (a ledger, a log writer) fail with an error, not a hang."""
    calls = {
        "create_ledger": client.create_ledger,
        "open_ledger": lambda: client.open_ledger(ledger),
        "open_log_writer": lambda: client.open_log_writer("outage", create=False),
    }
    for name, call in calls.items():
        errors: list[BaseException] = []

        def run(call: object = call) -> None:
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - inspected below
                errors.append(exc)

        started = time.monotonic()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(HANG_BOUND_S)
        assert not t.is_alive(), f"{name} hung with ZooKeeper gone"
        assert errors, f"{name} succeeded with ZooKeeper gone"
        print(f"{name}: {type(errors[0]).__name__} after {time.monotonic() - started:.2f} s: {errors[0]}")


def test_zookeeper_killed_during_appends_with_rollovers(own_zk: LocalZooKeeper, tmp_path: Path) -> None:
    uri = own_zk.uri("/outage") + "?session_timeout_ms=6000"
    with LocalCluster(3, metadata_uri=uri, work_dir=tmp_path / "cluster"):
        client = LedgerClient(uri, metadata_timeout_s=METADATA_TIMEOUT_S)
        try:
            writer = client.open_log_writer("outage", rollover_entries=4)
            acked: list[bytes] = []
            failure: list[BaseException] = []
            appender = threading.Thread(target=_append_until_error, args=(writer, acked, failure), daemon=True)
            appender.start()
            deadline = time.monotonic() + HANG_BOUND_S
            while len(acked) < ACKED_BEFORE_KILL and appender.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(acked) >= ACKED_BEFORE_KILL, f"no progress before the kill: {failure}"
            killed_at = time.monotonic()
            own_zk.kill()
            appender.join(HANG_BOUND_S)
            assert not appender.is_alive(), f"the writer hung with ZooKeeper gone ({HANG_BOUND_S:g} s)"
            assert failure, "the appender ended without an error"
            print(f"writer error {time.monotonic() - killed_at:.2f} s after the kill: {failure[0]!r}")
            _check_calls_fail_while_gone(client, writer.current_ledger)
            own_zk.start()
            try:
                writer.close()  # the stopped writer: the new writer below owns the log either way
            except Exception as exc:  # noqa: BLE001 - a stopped writer may refuse to close
                print(f"closing the stopped writer: {exc!r}")
            # The bookies' sessions survived or they re-registered: all three are back in the registry.
            # The client reconnects on its own schedule (kazoo's backoff): until then a call fails
            # with its clear error within its deadline, which here only means "not yet".
            deadline = time.monotonic() + HANG_BOUND_S
            while _registered(client) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(client.bookies()) == 3, f"bookies registered after the outage: {client.bookies()}"
            successor = client.open_log_writer("outage", create=False, rollover_entries=4)
            more = [b"after-%d" % i for i in range(10)]
            for payload in more:
                successor.append(payload)
            successor.close()
            content = [e.payload for e in client.open_log_reader("outage").read()]
            missing = [p for p in acked + more if p not in content]
            assert not missing, f"acknowledged entries lost: {missing[:5]}"
            assert len(content) == len(set(content))
        finally:
            client.close()


def _registered(client: LedgerClient) -> int:
    """Bookies in the registry, or -1 while the client is still reconnecting."""
    try:
        return len(client.bookies())
    except MetadataUnavailableError:
        return -1
