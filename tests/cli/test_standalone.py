"""`ledger standalone` with real processes (issue 35 item 1): the quickstart's cluster comes back
on the same home, the shell and Spark read what was written before, SIGTERM ends every process
it started, and --detach / `ledger standalone stop` do the same from another terminal.

The home is the test's own (PYSPARK_LEDGER_HOME), never the user's ~; the shell's default
metadata URI is used (no --metadata-uri, no config file), as a user typing the commands gets it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from pyspark_ledger import LedgerClient
from pyspark_ledger.cli import main
from pyspark_ledger.cli.no_bookies import NO_BOOKIE_RUNNING
from pyspark_ledger.cli.standalone_pidfile import PID_FILE_NAME, running_standalone
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.process_lines import ProcessLines

REPO = Path(__file__).resolve().parents[2]
START_BOUND_S = 180.0  # generous: a loaded 2-core machine starts three bookies slowly
STOP_WITHIN_S = 15.0  # the acceptance figure for SIGTERM
ENTRIES = 50


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own home, and the shell's default resolution pointing at it."""
    home = tmp_path / "home"
    monkeypatch.setenv("PYSPARK_LEDGER_HOME", str(home))
    monkeypatch.delenv("LEDGER_METADATA_URI", raising=False)
    monkeypatch.setenv("LEDGER_CONFIG", str(tmp_path / "no-config.toml"))
    return home


@pytest.fixture
def written(home: Path) -> int:
    """The quickstart's setup: the embedded cluster on the home writes a log and a ledger, then
    its bookies stop. Yields the ledger's id."""
    with LocalCluster.embedded(3) as cluster, LedgerClient(cluster.metadata_uri) as client:
        assert cluster.metadata_uri == f"sqlite://{home / 'metadata.db'}"
        with client.open_log_writer("events") as log:
            for i in range(ENTRIES):
                log.append(f"event {i}".encode())
        ledger = client.create_ledger(3, 3, 2)
        ledger.add_entry(b"standalone ledger entry")
        ledger.close()
    return ledger.ledger_id.id


def shell(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def descendants(pid: int) -> set[int]:
    """Every live process below pid (from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def wait_gone(pids: set[int], bound_s: float) -> float:
    """Seconds until none of pids runs; fails past bound_s."""
    started = time.monotonic()
    while running(pids):
        assert time.monotonic() - started < bound_s, f"still running after {bound_s:g} s: {sorted(running(pids))}"
        time.sleep(0.05)
    return time.monotonic() - started


def start_foreground(*args: str) -> tuple[subprocess.Popen[str], ProcessLines]:
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_ledger.cli", "standalone", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    lines = ProcessLines(proc)
    if not lines.wait("Ctrl-C or SIGTERM stops it", START_BOUND_S):  # the banner's last line
        stop_what_this_test_started(proc)
        pytest.fail("ledger standalone did not come up:\n" + "\n".join(lines.lines))
    return proc, lines


def stop_what_this_test_started(proc: subprocess.Popen[str]) -> None:
    """After a failure: SIGTERM to the standalone command, then SIGKILL to it and its bookies."""
    if proc.poll() is not None:
        return
    children = descendants(proc.pid)
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
    for pid in running(children):
        os.kill(pid, signal.SIGKILL)


def test_standalone_serves_the_quickstart_data_to_the_shell_and_spark_and_stops_on_sigterm(
        home: Path, written: int, capsys: pytest.CaptureFixture[str], spark: pyspark.sql.SparkSession) -> None:
    code, _, err = shell(capsys, "readledger", str(written))
    assert (code, err.strip()) == (1, f"ledger readledger: {NO_BOOKIE_RUNNING}")

    proc, lines = start_foreground()
    try:
        uri = f"sqlite://{home / 'metadata.db'}"
        assert f"metadata URI: {uri}" in lines.lines, lines.lines
        assert any("Spark:" in x for x in lines.lines) and any("Python:" in x for x in lines.lines)
        code, out, err = shell(capsys, "readledger", str(written))
        assert code == 0 and "standalone ledger entry" in out, err
        code, out, _ = shell(capsys, "logs", "list")
        assert code == 0 and "events" in out.split()
        code, out, _ = shell(capsys, "listbookies")  # the same bookies as the first run, on the same dirs
        assert code == 0 and [x.split()[0] for x in out.splitlines()[2:]] == ["bookie-0", "bookie-1", "bookie-2"]
        assert sorted(p.name for p in (home / "bookies").iterdir() if p.is_dir()) == ["bookie-0", "bookie-1", "bookie-2"]
        df = spark.read.format("ledger").option("metadataServiceUri", uri).option("log", "events").load()
        assert sorted(r.payload.decode() for r in df.select("payload").collect()) == sorted(
            f"event {i}" for i in range(ENTRIES))

        children = descendants(proc.pid)
        assert len(children) >= 3, children  # the bookies
        proc.send_signal(signal.SIGTERM)
        took_s = wait_gone(children | {proc.pid}, STOP_WITHIN_S)
        assert proc.wait(timeout=STOP_WITHIN_S) == 0, "\n".join(lines.lines)
        with capsys.disabled():
            print(f"\nSIGTERM: the standalone command and its {len(children)} children gone in {took_s:.2f} s")
    finally:
        stop_what_this_test_started(proc)
    assert not (home / PID_FILE_NAME).exists()
    code, _, err = shell(capsys, "logs", "show", "events")
    assert code == 0  # metadata needs no bookie
    code, _, err = shell(capsys, "readledger", str(written))
    assert (code, err.strip()) == (1, f"ledger readledger: {NO_BOOKIE_RUNNING}")


def test_detach_and_stop(home: Path, written: int, capsys: pytest.CaptureFixture[str]) -> None:
    other = home  # given with --home, as from a terminal where the default is another home
    run = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "standalone", "--home", str(other), "--detach"],
                         cwd=REPO, capture_output=True, text=True, timeout=START_BOUND_S)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"metadata URI: sqlite://{other / 'metadata.db'}" in run.stdout
    pid = int(run.stdout.split("pid ", 1)[1].split(",")[0])
    group = descendants(pid) | {pid}
    try:
        assert running_standalone(other) == pid  # what the quickstart asks before starting bookies of its own
        uri = f"sqlite://{other / 'metadata.db'}"
        code, out, err = shell(capsys, "--metadata-uri", uri, "readledger", str(written))
        assert code == 0 and "standalone ledger entry" in out, err
        again = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "standalone", "--home", str(other)],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr

        code, out, err = shell(capsys, "standalone", "stop", "--home", str(other))
        assert code == 0 and f"pid {pid}" in out, err
        wait_gone(group, STOP_WITHIN_S)
        assert not (other / PID_FILE_NAME).exists() and running_standalone(other) is None
    finally:
        if running({pid}):
            os.killpg(pid, signal.SIGKILL)  # its own session, started by this test's --detach

    code, _, err = shell(capsys, "standalone", "stop", "--home", str(other))
    assert code == 1 and "no standalone cluster is running" in err
    dead = subprocess.Popen(["true"])  # a pid that has exited: a stale pid file
    dead.wait()
    (other / PID_FILE_NAME).write_text(f'{{"pid": {dead.pid}, "detached": true}}')
    code, _, err = shell(capsys, "standalone", "stop", "--home", str(other))
    assert code == 1 and "stale pid file, removed" in err
    assert not (other / PID_FILE_NAME).exists()
