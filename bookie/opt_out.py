"""The one spelling of the project's PYSPARK_LEDGER_*=0 opt-outs of process tuning (gRPC, malloc,
Spark worker GC). A leaf module (standard library only), so the client may import it."""

from __future__ import annotations

import os
from collections.abc import Mapping

OFF_VALUES = ("0", "false", "no", "off")


def opted_out(name: str, environ: Mapping[str, str] = os.environ) -> bool:
    """True if the environment variable `name` turns its tuning off (unset means on)."""
    return environ.get(name, "1").strip().lower() in OFF_VALUES
