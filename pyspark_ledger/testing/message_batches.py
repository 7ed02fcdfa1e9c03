"""Turn the cluster setting message_batches on or off for a test or bench, and wait until a
client sees it (its settings watch), within a bound."""

from __future__ import annotations

import time

from metadata.cluster_settings import update_cluster_settings
from pyspark_ledger.client import LedgerClient

SEEN_WAIT_S = 60.0


def set_message_batches(client: LedgerClient, on: bool) -> None:
    update_cluster_settings(client.store, {"message_batches": on})
    deadline = time.monotonic() + SEEN_WAIT_S
    while client.cluster_settings.message_batches != on:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the client did not see message_batches={on} within {SEEN_WAIT_S:g} s")
        time.sleep(0.01)
