"""Starting a process from a program that uses the client (pyspark starting its JVM is one) must
not fail because of gRPC: grpcio's fork handlers, on by default, make a forked child that is
about to exec abort or hang once Python closes gRPC's descriptors (grpc/grpc#43055). Importing
pyspark_ledger turns them off unless the application chose (pyspark_ledger/__init__.py).

Found by the whole suite: a Spark session started after a worker's bookie tests failed with
"Java gateway process exited before sending its port number".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE_FORKS = 400  # about 2 s when safe; grpcio's handlers failed within the first 100 in every trial
PLANTED_FORKS_MAX = 1500


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}  # as a fresh shell has it
    return {**env, "PYTHONPATH": str(REPO), "GRPC_VERBOSITY": "ERROR", **extra}


def _probe(*args: str, **env: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "tests.client.fork_exec_probe", *args], cwd=REPO, env=_env(**env),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fork_setting_after_import(**env: str) -> str:
    code = "import os, pyspark_ledger; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(**env), capture_output=True, text=True,
                          timeout=60)
    return done.stdout.strip()


def test_importing_the_package_turns_grpc_fork_handlers_off_unless_the_application_chose() -> None:
    assert _fork_setting_after_import() == "false"
    assert _fork_setting_after_import(GRPC_ENABLE_FORK_SUPPORT="1") == "1"


def test_forks_that_exec_survive_grpc_calls_in_flight() -> None:
    got = _probe(str(PROBE_FORKS), "package")
    assert got == {"tried": PROBE_FORKS, "failed": 0, "hung": False, "fork_support": "false"}, got


def test_the_probe_catches_grpc_fork_handlers() -> None:
    """Planted: the same probe without the package's setting (gRPC's default) must see a failed
    or hung child, or the test above proves nothing."""
    got = _probe(str(PLANTED_FORKS_MAX), "grpc-only", "--stop-at-first")
    assert got["failed"] == 1 and got["fork_support"] is None, got
