"""The malloc settings the bookie (at start), Spark executors (at their first read) and a
LedgerClient (once per process) apply: they respect an operator's own settings and the opt-out."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

import bookie.malloc_tuning as tuning

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("environ", [
    {"PYSPARK_LEDGER_MALLOC_TUNING": "0"},
    {"PYSPARK_LEDGER_MALLOC_TUNING": "off"},
    {"MALLOC_MMAP_THRESHOLD_": "131072"},
    {"MALLOC_TRIM_THRESHOLD_": "0"},
])
def test_opted_out_or_operator_set_means_untouched(environ: dict[str, str]) -> None:
    assert tuning.tune_malloc(environ) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_applied_on_glibc() -> None:
    # In a child process: the settings are process-wide.
    code = "import bookie.malloc_tuning as m; print(m.tune_malloc({}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_client_applies_it_once_per_process(sqlite_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LedgerClient tunes malloc for its writers' ~128 KiB batch and entry buffers, once."""
    import pyspark_ledger.client as client_module

    calls: list[int] = []
    monkeypatch.setattr(client_module, "tune_malloc", lambda: calls.append(1) or True)
    client_module._tune_malloc_once.cache_clear()
    try:
        for _ in range(2):
            with client_module.LedgerClient(sqlite_uri):
                pass
        assert calls == [1]
    finally:
        client_module._tune_malloc_once.cache_clear()
