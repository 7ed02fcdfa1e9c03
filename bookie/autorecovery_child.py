"""`bookie --autorecovery`: the autorecovery service (pyspark_ledger.autorecovery) next to the bookie.

The bookie never imports the client (docs/architecture.md, "Which way imports go", enforced by
tests/test_architecture.py), and autorecovery is client code, so the bookie runs `ledger
autorecovery` as its child process rather than in its own interpreter: same metadata URI, same
operator secret file (the child presents it to the other bookies). Both reach the child through
its environment, never its command line: the URI may carry the ZooKeeper secret (zk_auth), and a
command line is readable by every local user (ps, /proc/PID/cmdline) while a process's
environment is readable only by its owner and root. The child's `ledger` reads
LEDGER_METADATA_URI when no --metadata-uri is given.

The child reads its stdin until end of file and then stops, so it ends with the bookie however the
bookie ends (a kill -9 closes the pipe too); a graceful stop sends it SIGTERM first.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

log = logging.getLogger(__name__)

CHILD_STOP_TIMEOUT_S = 6.0  # the service stops within 5 s of SIGTERM
# What `ledger` reads (pyspark_ledger.cli.app.ENV_URI and the operator secret file's variable; the
# bookie may not import the client, tests/security/test_no_secret_on_command_lines.py checks the names).
METADATA_URI_ENV = "LEDGER_METADATA_URI"
OPERATOR_SECRET_FILE_ENV = "LEDGER_OPERATOR_SECRET_FILE"


def autorecovery_command(lost_bookie_grace_s: float) -> list[str]:
    """The child's command line: no URI and no secret in it."""
    return [sys.executable, "-m", "pyspark_ledger.cli", "autorecovery",
            "--lost-bookie-grace-s", str(lost_bookie_grace_s), "--exit-with-stdin"]


def autorecovery_environment(metadata_uri: str, operator_secret_file: str | None) -> dict[str, str]:
    """The child's environment: the bookie's own, plus the metadata URI (zk_auth and all) and the
    operator secret file's path. The URI replaces any LEDGER_METADATA_URI the bookie inherited:
    the child works on the bookie's own metadata service."""
    env = dict(os.environ)
    env[METADATA_URI_ENV] = metadata_uri
    if operator_secret_file:
        env[OPERATOR_SECRET_FILE_ENV] = operator_secret_file
    return env


def start_autorecovery_child(metadata_uri: str, lost_bookie_grace_s: float,
                             operator_secret_file: str | None) -> subprocess.Popen[bytes]:
    cmd = autorecovery_command(lost_bookie_grace_s)
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, env=autorecovery_environment(metadata_uri, operator_secret_file))
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
