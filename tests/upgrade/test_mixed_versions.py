"""Mixed versions: the last release (RELEASES.toml, built from this repository's history by
pyspark_ledger.testing.old_release) and this checkout's code in one cluster, real processes on
loopback.

- new clients on old bookies, old clients on new bookies: ledgers and a log, appended and read;
  then those bookies go back to the last release (no new format was turned on) and still serve it;
- message batches (the cluster setting message_batches on): the last release's reader refuses a
  batched log naming the entry format, never returning a batch as a message;
- a rolling upgrade under a writing log: three old bookies replaced one at a time by this code on
  the same data directory (stop, start the new code), while a client of the last release appends;
  no acknowledged entry lost, every entry and the data written before the upgrade read back, by
  both releases; then the new on-disk format is turned on (the cluster setting
  storage_format_version), every bookie marks its directory, and entries written in it read back
  across a kill -9.

The old release's processes (its `bookie` script, tests/upgrade/release_client.py run with its
python) are checked to import the old code, not the checkout's.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pyspark_ledger
from bookie.proto.versions import OUR_RANGE, RELEASE
from bookie.storage.format_version import FORMAT_VERSION_MAX, read_format
from metadata import BookieRegistry, log_settings, open_store
from metadata.cluster_settings import update_cluster_settings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import Position
from pyspark_ledger.testing.local_cluster import BookieLauncher, LocalBookie
from pyspark_ledger.testing.message_batches import set_message_batches
from pyspark_ledger.testing.old_release import OldRelease, Release, ReleaseBuildError, build_release, last_release
from pyspark_ledger.testing.process_lines import ProcessLines
from pyspark_ledger.testing.zookeeper_server import free_port

CLIENT_SCRIPT = Path(__file__).with_name("release_client.py")
WAIT_S = 120.0  # progress waits: generous, the machine is shared
ADD_TIMEOUT_S = 60.0  # a slow answer on a loaded machine is not a failed bookie (a stopped one fails at once)
NEW = BookieLauncher()


@pytest.fixture(scope="module")
def old() -> OldRelease:
    built = build_release(last_release())
    print(f"release {built.release.version} ({built.release.commit[:12]}): "
          + (f"built in {built.build_s:.1f} s" if built.build_s else "from the cache"))
    return built


def run_old_client(old: OldRelease, *args: str) -> dict[str, Any]:
    out = subprocess.run([str(old.python), str(CLIENT_SCRIPT), *args], env=old.env(), cwd=old.cwd,
                         capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 0, f"release {old.release.version} client {args[0]} failed:\n{out.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


class Bookies:
    """Three bookies with stable ids, ports and data dirs, each started from a launcher."""

    def __init__(self, work: Path, uri: str, launcher: BookieLauncher, version: str, n: int = 3):
        self.uri = uri
        self.versions = {f"bookie-{i}": version for i in range(n)}  # what each runs
        self.bookies = [LocalBookie(uri, work / f"bookie-{i}", port=free_port(), bookie_id=f"bookie-{i}",
                                    log_path=work / f"bookie-{i}.log", launcher=launcher) for i in range(n)]
        try:
            for b in self.bookies:
                b.start(wait=False)
            for b in self.bookies:
                b.wait_serving()
            self.wait_registered()
        except BaseException:
            self.close()
            raise

    def upgrade(self, i: int, launcher: BookieLauncher, version: str) -> None:
        """Stop bookie i (SIGTERM: drain, checkpoint, deregister) and start `launcher`'s code,
        release `version`, on its data dir."""
        b = self.bookies[i]
        assert b.stop() == 0, b.tail_log()
        b.launcher = launcher
        self.versions[b.bookie_id] = version
        b.start()
        self.wait_registered()

    def wait_registered(self) -> None:
        """Until every bookie is registered by the release it runs (a bookie answers Info just
        before it registers)."""
        deadline = time.monotonic() + WAIT_S
        while {b: v[0] for b, v in registered_versions(self.uri).items()} != self.versions:
            assert time.monotonic() < deadline, f"registered: {registered_versions(self.uri)}, expected {self.versions}"
            time.sleep(0.05)

    def close(self) -> None:
        for b in self.bookies:
            b.stop()


@pytest.fixture
def started() -> Iterator[list[Bookies]]:
    """Holds what a test starts; stops it all at the end."""
    started: list[Bookies] = []
    yield started
    for s in started:
        s.close()


def registered_versions(uri: str) -> dict[str, tuple[str, int, int]]:
    store = open_store(uri)
    try:
        return {i.bookie_id: (i.version, i.wire_version_min, i.wire_version_max) for i in BookieRegistry(store).list()}
    finally:
        store.close()


def read_log(client: LedgerClient, name: str) -> list[tuple[Position, bytes]]:
    with client.open_log_reader(name) as reader:
        return [(e.position, e.payload) for e in reader.read()]


def old_read_log(old: OldRelease, uri: str, name: str) -> list[tuple[Position, bytes]]:
    return [(Position.from_json(p), bytes.fromhex(h)) for p, h in run_old_client(old, "log-read", uri, name)["entries"]]


# ---- the harness itself ---------------------------------------------------------------------------

def test_the_last_release_is_built_from_history_and_runs_its_own_code(old: OldRelease, tmp_path: Path) -> None:
    assert old.release.version != RELEASE == pyspark_ledger.__version__
    old.check_imports_old_code()  # bookie, metadata, pyspark_ledger from its venv, not the checkout
    got = run_old_client(old, "info")
    assert got["version"] == old.release.version
    assert all(Path(f).is_relative_to(old.site_packages) for f in got["files"].values()), got["files"]
    script = subprocess.run([str(old.bookie_script), "--version"], env=old.env(), cwd=old.cwd, capture_output=True,
                            text=True, timeout=60)
    assert script.stdout.split() == ["bookie", old.release.version], script
    with pytest.raises(ReleaseBuildError, match=f"commit {'0' * 40} is not in the history .*shallow clone"):
        build_release(Release("0.0.0", "0" * 40), cache_dir=tmp_path / "cache")


# ---- each side of the wire with the other release ------------------------------------------------

def test_clients_of_this_release_on_bookies_of_the_last(old: OldRelease, tmp_path: Path,
                                                        started: list[Bookies]) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    started.append(Bookies(tmp_path, uri, old.launcher(), old.release.version))
    # Old registrations carry no wire range: this client takes them for version 1 only.
    assert registered_versions(uri) == {f"bookie-{i}": (old.release.version, 0, 0) for i in range(3)}
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        assert {client.pool.get(f"bookie-{i}").info().version for i in range(3)} == {old.release.version}
        w = client.create_ledger(3, 3, 2)
        futures = [w.add_entry_async(b"new-client-%d" % i) for i in range(200)]
        assert [f.result(timeout=WAIT_S) for f in futures] == list(range(200))
        # Over the add connections just used (or, for one a slow moment reset, the registrations).
        assert [client.pool.get(f"bookie-{i}").wire_version() for i in range(3)] == [1, 1, 1]
        w.close()
        ledger = w.ledger_id.qualified_name
        assert [e.payload for e in client.open_ledger(ledger).read_entries(0, 199)] == [b"new-client-%d" % i for i in range(200)]
        with client.open_log_writer("mixed") as log:
            positions = [log.append(b"new-log-%d" % i) for i in range(100)]
        assert read_log(client, "mixed") == [(p, b"new-log-%d" % i) for i, p in enumerate(positions)]
    # And the old release's own client reads what this one wrote through its bookies.
    assert run_old_client(old, "ledger-read", uri, ledger)["payloads"] == [(b"new-client-%d" % i).hex() for i in range(200)]
    assert old_read_log(old, uri, "mixed") == [(p, b"new-log-%d" % i) for i, p in enumerate(positions)]


def test_clients_of_the_last_release_on_bookies_of_this_one(old: OldRelease, tmp_path: Path,
                                                            started: list[Bookies]) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    started.append(Bookies(tmp_path, uri, NEW, RELEASE))
    assert registered_versions(uri) == {f"bookie-{i}": (RELEASE, OUR_RANGE.low, OUR_RANGE.high) for i in range(3)}
    ledger = run_old_client(old, "ledger-write", uri, "150", "old-client")["ledger"]
    expected = [(b"old-client-%d" % i).hex() for i in range(150)]
    assert run_old_client(old, "ledger-read", uri, ledger)["payloads"] == expected
    appended = run_old_client(old, "log-append", uri, "mixed", "100", "old-log")["positions"]
    old_positions = [Position.from_json(p) for p in appended]
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        assert [e.payload.hex() for e in client.open_ledger(ledger).read_entries(0, 149)] == expected
        with client.open_log_writer("mixed") as log:  # this release's writer takes the log over
            new_positions = [log.append(b"new-log-%d" % i) for i in range(50)]
        written = ([(p, b"old-log-%d" % i) for i, p in enumerate(old_positions)]
                   + [(p, b"new-log-%d" % i) for i, p in enumerate(new_positions)])
        assert read_log(client, "mixed") == written
        # The log's settings (issue 32) live where the last release's compare-and-set keeps them.
        settings = {"backlog_policy": "trim", "rollover_max_bytes": "4096"}
        client.logs.update_head("mixed", lambda r: log_settings.with_settings(r, settings))
    assert old_read_log(old, uri, "mixed") == written
    again = run_old_client(old, "log-append", uri, "mixed", "5", "old-again")["positions"]
    written += [(Position.from_json(p), b"old-again-%d" % i) for i, p in enumerate(again)]
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        assert log_settings.stored(client.logs.read_head("mixed")[0].record) == settings
        assert read_log(client, "mixed") == written
    # The new on-disk formats are off (the default), so the bookies can go back to the last
    # release, one at a time, on the data this release's bookies wrote.
    for i in range(3):
        started[0].upgrade(i, old.launcher(), old.release.version)
    assert registered_versions(uri) == {f"bookie-{i}": (old.release.version, 0, 0) for i in range(3)}
    assert old_read_log(old, uri, "mixed") == written
    assert run_old_client(old, "ledger-read", uri, ledger)["payloads"] == expected
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        assert read_log(client, "mixed") == written


def test_a_client_of_the_last_release_refuses_batched_messages(old: OldRelease, tmp_path: Path,
                                                               started: list[Bookies]) -> None:
    """Once message_batches is on, this release's writer batches (entry format 3); the last
    release's reader stops with an error naming the format, never handing a batch over as a message."""
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    started.append(Bookies(tmp_path, uri, NEW, RELEASE))
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        set_message_batches(client, True)
        with client.open_log_writer("batched") as log:
            handles = [log.append_async(b"batched-%d" % i) for i in range(10)]
            log.flush()
        assert {h.result(WAIT_S).entry_id for h in handles} == {0}  # one entry, ten messages
        assert [m for _, m in read_log(client, "batched")] == [b"batched-%d" % i for i in range(10)]
    out = subprocess.run([str(old.python), str(CLIENT_SCRIPT), "log-read", uri, "batched"], env=old.env(),
                         cwd=old.cwd, capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode != 0 and "unsupported entry format (flags 0xb2)" in out.stderr, out.stderr[-2000:]
    assert "batched-" not in out.stdout


# ---- a rolling upgrade -------------------------------------------------------------------------------

def test_a_rolling_upgrade_under_a_writing_log_loses_nothing(old: OldRelease, tmp_path: Path, zk_uri: str) -> None:
    bookies = Bookies(tmp_path, zk_uri, old.launcher(), old.release.version)
    writer: subprocess.Popen[str] | None = None
    try:
        before = run_old_client(old, "ledger-write", zk_uri, "100", "before-upgrade")["ledger"]
        stop_file = tmp_path / "stop-writer"
        writer = subprocess.Popen([str(old.python), str(CLIENT_SCRIPT), "log-write-until", zk_uri, "rolling", "rolling",
                                   str(stop_file)], env=old.env(), cwd=old.cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        lines = ProcessLines(writer)
        assert lines.wait_for(lambda: lines.count("ACK ") >= 50, WAIT_S), lines.lines[-20:]
        for i in range(3):
            started = time.monotonic()
            bookies.upgrade(i, NEW, RELEASE)
            acked = lines.count("ACK ")
            # The writer carries on (re-opening the log when its ledger lost a quorum) before the next bookie goes.
            assert lines.wait_for(lambda: lines.count("ACK ") >= acked + 50, WAIT_S), lines.lines[-20:]
            print(f"bookie-{i} upgraded; the writer acknowledged 50 more within {time.monotonic() - started:.1f} s")
        assert registered_versions(zk_uri) == {f"bookie-{i}": (RELEASE, OUR_RANGE.low, OUR_RANGE.high) for i in range(3)}
        stop_file.touch()
        assert lines.wait("DONE", WAIT_S), lines.lines[-20:]
        assert writer.wait(WAIT_S) == 0
        acked_entries = [(Position.from_json(x.split(" ")[1]), bytes.fromhex(x.split(" ")[2]))
                         for x in lines.lines if x.startswith("ACK ")]
        reopens = [x for x in lines.lines if x.startswith("REOPEN ")]
        print(f"acknowledged {len(acked_entries)} entries, {len(reopens)} reopens: {reopens}")

        with LedgerClient(zk_uri, add_timeout_s=ADD_TIMEOUT_S) as client:
            entries = read_log(client, "rolling")
            assert [p for p, _ in entries] == sorted({p for p, _ in entries}), "positions out of order or repeated"
            by_position = dict(entries)
            lost = [(p, payload) for p, payload in acked_entries if by_position.get(p) != payload]
            assert not lost, f"{len(lost)} acknowledged entries lost or changed, first: {lost[:3]}"
            # The data the old bookies wrote before the upgrade, read from this release's bookies.
            assert [e.payload for e in client.open_ledger(before).read_entries(0, 99)] == \
                [b"before-upgrade-%d" % i for i in range(100)]
        assert old_read_log(old, zk_uri, "rolling") == entries  # and the old release reads the same

        # Every bookie runs this release: turn the new on-disk format on. Each bookie marks its
        # directory (no restart), and what it writes from then on, replayed after a kill -9, reads.
        with open_store(zk_uri) as store:
            update_cluster_settings(store, {"storage_format_version": FORMAT_VERSION_MAX})
        deadline = time.monotonic() + WAIT_S
        while any(read_format(b.data_dir) != FORMAT_VERSION_MAX for b in bookies.bookies):
            assert time.monotonic() < deadline, [read_format(b.data_dir) for b in bookies.bookies]
            time.sleep(0.05)
        with LedgerClient(zk_uri, add_timeout_s=ADD_TIMEOUT_S) as client:
            with client.open_log_writer("rolling") as log:
                later = [log.append(b"format-2-%d" % i) for i in range(50)]
            bookies.bookies[0].kill()
            bookies.bookies[0].start()  # replays its journal, records of both formats
            bookies.wait_registered()
            assert read_log(client, "rolling") == entries + [(p, b"format-2-%d" % i) for i, p in enumerate(later)]
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
            writer.wait(WAIT_S)
        bookies.close()
