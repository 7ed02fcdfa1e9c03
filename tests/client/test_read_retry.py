"""A read whose first replica says "no such entry" while the replicas that hold the entry are
still reconnecting (just restarted) must ask those holders again, not the first replica.

Seen in the suite (test_client_property seed 202, under load): entry 96 went to a replacement
bookie from its ensemble change on but was acknowledged by the two others of its write set;
after every bookie came back, the replacement answered NO_SUCH_ENTRY, the two holders were
still in gRPC reconnect backoff, and the read's retry round asked only the first replica again:
'entry 96 unreadable from its write set'."""

from __future__ import annotations

from typing import Any

import pytest

from bookie.status import Status
from metadata import write_set
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.ledger.read_handle import ReadHandle


def test_the_retry_round_asks_the_replicas_that_were_unreachable(client: LedgerClient,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    w = client.create_ledger(3, 3, 2)
    payloads = [b"entry-%d" % i for i in range(6)]
    for p in payloads:
        w.add_entry(p)
    w.close()
    meta = client.ledger_metadata(w.ledger_id)
    ensemble = meta.segments[0].bookies

    real_read_from = ReadHandle._read_from
    asked: list[str] = []

    def flaky_read_from(self: ReadHandle, bookie_id: str, first: int, last: int, wanted: set[int]) -> Any:
        """Each entry's first replica never has it; the other replicas are unreachable the
        first time they are asked (a channel still reconnecting), then answer."""
        asked.append(bookie_id)
        firsts = {e for e in wanted if ensemble[write_set(e, 3, 3)[0]] == bookie_id}
        if firsts == wanted:
            return {}, {e: [f"{bookie_id}: {Status.NO_SUCH_ENTRY.name}"] for e in wanted}, None
        if asked.count(bookie_id) == 1:
            return {}, {e: [f"bookie {bookie_id} unavailable: reconnecting"] for e in wanted}, None
        return real_read_from(self, bookie_id, first, last, wanted)

    monkeypatch.setattr(ReadHandle, "_read_from", flaky_read_from)
    with client.open_ledger(w.ledger_id) as reader:
        assert reader.read_entry(4).payload == payloads[4]
