"""A writer outlives a registry it cannot read: the bookie pool answers a bookie whose
registration is unreadable (the metadata store briefly unreachable) with the address it last saw,
or with BookieUnavailableError (a transport failure of that bookie), never with a metadata error
that kills the writer's sender thread. Found by the whole suite under load: an explicit LAC's
registry lookup timed out, the sender died, and the ledger stayed OPEN."""

from __future__ import annotations

import time

import pytest

from metadata import MetadataUnavailableError
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.testing.local_cluster import LocalCluster


class _UnreadableRegistry:
    """The pool's registry while the metadata store is unreachable."""

    def get(self, bookie_id: str) -> None:
        raise MetadataUnavailableError(f"metadata store unavailable: get {bookie_id} did not complete within its deadline")


def test_unreadable_registry_falls_back_to_the_last_address_or_fails_that_bookie(
        cluster3: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    with LedgerClient(cluster3.metadata_uri) as client:
        pool = client.pool
        known = cluster3.bookies[0].bookie_id
        seen = pool.get(known).address
        pool._clients.clear()  # the next get must look the address up again
        monkeypatch.setattr(pool, "registry", _UnreadableRegistry())
        assert pool.get(known).address == seen
        with pytest.raises(BookieUnavailableError, match="registration could not be read"):
            pool.get("never-seen-bookie")


def test_a_writer_closes_its_ledger_while_the_registry_is_unreadable(
        cluster3: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    with LedgerClient(cluster3.metadata_uri, explicit_lac_interval_ms=20) as client:
        handle = client.create_ledger()
        for i in range(10):
            handle.add_entry(b"entry-%d" % i)
        pool = client.pool
        pool._clients.clear()  # the explicit LAC must look the bookies up again
        with monkeypatch.context() as outage:
            outage.setattr(pool, "registry", _UnreadableRegistry())
            time.sleep(0.3)  # several explicit-LAC intervals: each looks its bookies up
        handle.add_entry(b"after the outage")
        handle.close()
        meta = client.ledger_metadata(handle.ledger_id)
        assert meta.is_closed and meta.last_entry_id == 10
