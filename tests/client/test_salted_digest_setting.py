"""New ledgers get salted password digests only once the cluster setting turns them on (issue 29:
new formats wait for a cluster setting, so clients of the previous release keep opening new
ledgers during an upgrade; issue 31 item 7: the salted digest itself)."""

from __future__ import annotations

import time

from metadata.cluster_settings import update_cluster_settings
from metadata.password_digest import digest_format
from pyspark_ledger.client import LedgerClient

WAIT_S = 60.0


def _digest_of_new_ledger(client: LedgerClient) -> str:
    w = client.create_ledger(1, 1, 1, password=b"secret")
    w.add_entry(b"x")
    w.close()
    with client.open_ledger(w.ledger_id, password=b"secret") as r:  # the right password opens it
        assert r.read_entry(0).payload == b"x"
    meta, _ = client.ledgers.read(w.ledger_id)
    return digest_format(meta.password_digest)


def test_salted_digests_follow_the_cluster_setting(client: LedgerClient) -> None:
    assert _digest_of_new_ledger(client) == "legacy-sha256"  # the default: what release 0.1.0 checks
    update_cluster_settings(client.store, {"salted_password_digests": True})
    deadline = time.monotonic() + WAIT_S
    while not client.cluster_settings.salted_password_digests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _digest_of_new_ledger(client) == "pbkdf2-sha256"
