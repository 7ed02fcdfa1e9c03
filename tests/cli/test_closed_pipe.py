"""`ledger ... | head -1` ends with exit 0 and nothing on stderr when the reader closes the pipe
before the output is written (issue 23), instead of a BrokenPipeError traceback or exit 1."""

from __future__ import annotations

import subprocess
import sys


def test_output_into_a_closed_pipe_exits_0_quietly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_ledger.cli", "quorums", "-e", "5", "-w", "3", "-a", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes a byte (it is still importing)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_the_same_command_with_a_reader_prints_its_answer() -> None:
    out = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "quorums", "-e", "5", "-w", "3", "-a", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
