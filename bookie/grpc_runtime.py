"""gRPC settings for the bookie process, applied before gRPC is imported.

Recent grpcio releases serve connections through the EventEngine, which hands each socket event
of an accepted connection to an event_engine thread before the Python thread that waits for it
runs. A bookie's hot path is one small add-stream message per entry per client, so those extra
hand-offs are a large share of its work: on the 2-core reference machine, bare gRPC streams shaped
like an E3/A2 add (bench/grpc_transport_bench.py) need about a fifth less CPU and 0.1 ms less
latency with the `event_engine_listener` experiment turned off, which puts accepted connections
back on gRPC's long-standing iomgr poller (the thread that waits for an event also polls for it).

Only the bookie process does this (bookie.server imports it first); client processes keep gRPC's
defaults, where the setting made no measurable difference. Opt out with
PYSPARK_LEDGER_GRPC_TUNING=0; an experiment already named in GRPC_EXPERIMENTS is left as set.
gRPC reads GRPC_EXPERIMENTS once, when it is imported.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from bookie.opt_out import opted_out

EXPERIMENTS = ("event_engine_listener",)
OPT_OUT_ENV = "PYSPARK_LEDGER_GRPC_TUNING"


def apply_grpc_tuning(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Turn the EventEngine listener experiment off unless opted out or already configured.
    Returns True if the environment was changed."""
    if opted_out(OPT_OUT_ENV, environ):
        return False
    current = environ.get("GRPC_EXPERIMENTS", "")
    named = {n.strip().lstrip("-") for n in current.split(",") if n.strip()}
    missing = [f"-{e}" for e in EXPERIMENTS if e not in named]
    if not missing:
        return False
    environ["GRPC_EXPERIMENTS"] = ",".join(([current] if current.strip() else []) + missing)
    return True
