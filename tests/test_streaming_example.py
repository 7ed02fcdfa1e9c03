"""examples/streaming_pipeline.py, briefly (60 events): every event arrives once, and it prints
where the end-to-end latency goes, each phase with numbers that add up to the end-to-end figure
(docs/spark.md, "Latency", reads these lines)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVENTS = 60
PHASES = ("waiting for the trigger", "planning", "reading", "writing", "sink commit", "delivery to the reader")
NUMBER = r"(-?\d+\.\d{3})"


def check_breakdown(out: str, events: int) -> dict[str, float]:
    """The example's report: all events once, the end-to-end line, one line per phase (p50 <=
    p95), phase means adding up to the end-to-end mean, and Spark's per-batch figures. Returns
    the means."""
    assert f"delivered: {events} (each exactly once)" in out, out
    assert re.search(r"p50 \d+\.\d\d s +p95 \d+\.\d\d s +max \d+\.\d\d s", out), out
    means = {}
    for name in (*PHASES, "end-to-end"):
        m = re.search(rf"^  {re.escape(name)} +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.MULTILINE)
        assert m, f"no line for {name!r}:\n{out}"
        p50, p95, mean = (float(g) for g in m.groups())
        assert p50 <= p95, m.group(0)
        means[name] = mean
    # Per event the phases partition the end-to-end latency, so their means add up to its mean.
    assert abs(sum(means[name] for name in PHASES) - means["end-to-end"]) <= 0.01, f"phases do not add up: {means}"
    batches = re.search(r"micro-batches with data: (\d+), .*triggerExecution (\d+)", out)
    assert batches and int(batches.group(1)) >= 1 and int(batches.group(2)) > 0, out
    return means


def test_the_example_prints_where_its_latency_goes() -> None:
    run = subprocess.run([sys.executable, "examples/streaming_pipeline.py", "--events", str(EVENTS), "--rate", "100"],
                         cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    means = check_breakdown(run.stdout, EVENTS)
    print(run.stdout[run.stdout.index("events produced"):], means)


PLANTED = """events produced: 5, delivered: 5 (each exactly once); trigger default (back to back)
  p50 1.00 s   p95 2.00 s   max 2.50 s
  waiting for the trigger     0.400  0.900  0.450
  planning                    0.100  0.200  0.120
  reading                     0.200  0.300  0.210
  writing                     0.050  0.080  0.060
  sink commit                 0.050  0.090  0.060
  delivery to the reader      0.080  0.120  0.090
  end-to-end                  1.000  2.000  0.990
micro-batches with data: 2, 3 rows each on average; Spark's durationMs per batch (mean ms): triggerExecution 900
"""


def test_the_check_refuses_a_report_that_does_not_add_up_or_lacks_a_phase() -> None:
    """The check above on planted reports: a good one passes, a wrong sum and a missing phase fail."""
    assert check_breakdown(PLANTED, 5)["end-to-end"] == 0.990
    with pytest.raises(AssertionError, match="do not add up"):
        check_breakdown(PLANTED.replace("0.210", "0.510"), 5)
    with pytest.raises(AssertionError, match="sink commit"):
        check_breakdown(PLANTED.replace("  sink commit", "  commit"), 5)
    with pytest.raises(AssertionError, match="delivered"):
        check_breakdown(PLANTED, 6)
