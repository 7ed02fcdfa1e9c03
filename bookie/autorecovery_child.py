"""`bookie --autorecovery`: the autorecovery service (pyspark_ledger.autorecovery) next to the bookie.

The bookie never imports the client (DESIGN.md, tests/test_architecture.py), and autorecovery is
client code, so the bookie runs `ledger autorecovery` as its child process rather than in its own
interpreter: same metadata URI, same operator secret file (the child presents it to the other
bookies). The child reads its stdin until end of file and then stops, so it ends with the bookie
however the bookie ends (a kill -9 closes the pipe too); a graceful stop sends it SIGTERM first.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

log = logging.getLogger(__name__)

CHILD_STOP_TIMEOUT_S = 6.0  # the service stops within 5 s of SIGTERM


def start_autorecovery_child(metadata_uri: str, lost_bookie_grace_s: float,
                             operator_secret_file: str | None, *,
                             rereplication_rate_mb_s: float = 50.0) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if operator_secret_file:
        env["LEDGER_OPERATOR_SECRET_FILE"] = operator_secret_file
    cmd = [sys.executable, "-m", "pyspark_ledger.cli", "--metadata-uri", metadata_uri, "autorecovery",
           "--lost-bookie-grace-s", str(lost_bookie_grace_s),
           "--rereplication-rate-mb-s", str(rereplication_rate_mb_s), "--exit-with-stdin"]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, env=env)
    log.info("autorecovery started next to the bookie pid=%d", child.pid)
    return child


def stop_autorecovery_child(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=CHILD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("autorecovery did not stop in time; killing it pid=%d", child.pid)
            child.kill()
            child.wait(timeout=CHILD_STOP_TIMEOUT_S)
    if child.stdin is not None:
        child.stdin.close()
