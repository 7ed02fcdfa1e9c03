"""`ledger standalone`: the quickstart's cluster, kept up until Ctrl-C or SIGTERM.

It runs the embedded metadata store (SQLite at <home>/metadata.db) and N real `bookie`
processes with the quickstart's stable ids and data dirs (LocalCluster.embedded), so a second
start, like the quickstart, reads what the first one wrote. `--detach` runs the same command in
a session of its own (log in <home>/standalone.log); `ledger standalone stop` ends it through
the pid file <home>/standalone.pid (pyspark_ledger/cli/standalone_pidfile.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from metadata.embedded_store import embedded_path_from_env_default
from pyspark_ledger.cli.standalone_pidfile import PidFile, StandaloneError, running_standalone, stop_running
from pyspark_ledger.testing.local_cluster import BookieStartError, LocalCluster

BOOKIES_DEFAULT = 3
BOOKIES_MAX = 16  # a local cluster on one machine: more is a typo, not a plan
# --detach waits this long for the detached cluster to serve (bookies start in about 2 s each,
# in parallel; a loaded 2-core machine takes several times that).
DETACH_READY_TIMEOUT_S = 120.0
WATCH_INTERVAL_S = 0.5  # how often the foreground run checks its bookies are still alive


def add_parser(sub: Any) -> None:
    p = sub.add_parser("standalone", help="run the embedded metadata store and N bookies until Ctrl-C (the quickstart's cluster)")
    p.add_argument("action", nargs="?", choices=["stop"],
                   help="stop: end the standalone cluster running on the home (with --detach or in another terminal)")
    p.add_argument("--bookies", type=int, default=BOOKIES_DEFAULT, metavar="N",
                   help=f"bookie processes to run (default {BOOKIES_DEFAULT})")
    p.add_argument("--home", help="data and metadata directory (default: $PYSPARK_LEDGER_HOME, else ~/.pyspark-ledger)")
    p.add_argument("--detach", action="store_true", help="run in the background; `ledger standalone stop` ends it")


def standalone(_client: object, args: argparse.Namespace) -> int:
    home = Path(args.home).expanduser().resolve() if args.home else default_home()
    if args.action == "stop":
        print(stop_running(home))
        return 0
    if not 1 <= args.bookies <= BOOKIES_MAX:
        raise ValueError(f"--bookies must be between 1 and {BOOKIES_MAX}, not {args.bookies}")
    pid = running_standalone(home)
    if pid is not None:
        raise StandaloneError(f"a standalone cluster is already running on {home} (pid {pid}); "
                              f"`ledger standalone stop{_home_flag(home)}` stops it")
    if args.detach:
        return _detach(home, args.bookies)
    return _run_foreground(home, args.bookies)


def default_home() -> Path:
    """Where the quickstart, the shell and format("ledger") find the embedded store by default."""
    return embedded_path_from_env_default().parent.expanduser().resolve()


def _home_flag(home: Path) -> str:
    return "" if home == default_home() else f" --home {home}"


def usage_text(home: Path, metadata_uri: str) -> str:
    """How to reach the cluster: the shell, Python and Spark."""
    default = home == default_home()
    shell = "ledger" if default else f"ledger --metadata-uri {metadata_uri}"
    spark_uri = "" if default else f'.option("metadataServiceUri", "{metadata_uri}")'
    return "\n".join([
        f"metadata URI: {metadata_uri}",
        f"  shell:  {shell} logs list" + ("" if default else f"   (or export LEDGER_METADATA_URI={metadata_uri})"),
        f'  Python: LedgerClient("{metadata_uri}")',
        f'  Spark:  spark.read.format("ledger"){spark_uri}.option("log", "quickstart").load()'
        + ("   (the default store: no option needed)" if default else ""),
    ])


def _run_foreground(home: Path, bookies: int) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # Installed before the bookies start: a signal during the start stops right after it.
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    pid_file = PidFile(home)
    cluster = LocalCluster.embedded(bookies, home=home)
    try:
        try:
            cluster.start()
        except BookieStartError as exc:  # e.g. the data dirs in use by a quickstart still running
            raise StandaloneError(f"a bookie did not start: {exc}") from None
        pid_file.write(detached=os.getpgid(0) == os.getpid())
        names = ", ".join(f"{b.bookie_id} {b.address}" for b in cluster.bookies)
        print(f"standalone cluster up: {len(cluster.bookies)} bookie(s) ({names}), data in {home}\n"
              f"{usage_text(home, cluster.metadata_uri)}\n"
              f"Ctrl-C or SIGTERM stops it (the data stays); so does `ledger standalone stop{_home_flag(home)}`", flush=True)
        exited = _watch(cluster, stop)
        if exited:
            raise StandaloneError(exited)
        print("stopping the bookies", flush=True)
        return 0
    finally:
        cluster.close()
        pid_file.remove_if_own()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _watch(cluster: LocalCluster, stop: threading.Event) -> str:
    """Wait for a stop signal; returns why a bookie ended the run ("" when none did)."""
    while not stop.wait(WATCH_INTERVAL_S):
        for b in cluster.bookies:
            if not b.running:
                return f"bookie {b.bookie_id} exited (log {b.log_path}):\n{b.tail_log(10)}"
    return ""


def _detach(home: Path, bookies: int) -> int:
    """Start the foreground command in a session of its own, wait until it serves."""
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "standalone.log"
    cmd = [sys.executable, "-m", "pyspark_ledger.cli", "standalone", "--home", str(home), "--bookies", str(bookies)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + DETACH_READY_TIMEOUT_S
    pid_file = PidFile(home)
    while True:
        running = pid_file.read()
        if running is not None and running.pid == proc.pid:
            break
        if proc.poll() is not None:
            raise StandaloneError(f"the standalone cluster exited with {proc.returncode} before serving; "
                                  f"its log {log_path}:\n{_tail(log_path)}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: only what this call started
            proc.wait(timeout=30)
            raise StandaloneError(f"the standalone cluster did not serve within {DETACH_READY_TIMEOUT_S:g} s; "
                                  f"its log {log_path}:\n{_tail(log_path)}")
        time.sleep(0.1)
    print(f"standalone cluster running in the background: pid {proc.pid}, {bookies} bookie(s), log {log_path}")
    print(usage_text(home, f"sqlite://{home / 'metadata.db'}"))
    print(f"`ledger standalone stop{_home_flag(home)}` stops it (the data stays)")
    return 0


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
