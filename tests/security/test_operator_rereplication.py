"""Autorecovery needs no ledger password (issues 20 and 21): it authenticates to bookies as the
operator and takes each ledger's master key from a bookie that holds a copy.

Four real bookies with mutual TLS, an operator secret and --require-read-auth on a real ZooKeeper;
ledgers each with its own password, "mac" and "crc32c" digests, one left OPEN by a dead writer.
kill -9 a bookie:
- a `ledger autorecovery` process WITHOUT the operator secret cannot repair the password ledgers
  (bookies refuse it as the operator; it says so) — the check below fails for it;
- one WITH the operator secret (LEDGER_OPERATOR_SECRET_FILE, no password anywhere) repairs every
  ledger; then every copy, the new ones included, is read from its bookie alone with the OWNER's
  key and checked with the owner's digest (a "mac" copy keeps its MAC), and the owner can still
  delete the ledger on the replacement bookie with its own key (the copy carries the right key).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from metadata import LedgerId, write_set
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from tests.autorecovery.cluster_shape import (
    Autorecovery,
    Written,
    payload,
    wait_fully_replicated,
    zk_uri_with_short_sessions,
)
from tests.security.secured_cluster import secured_cluster

LEDGERS = 6
REFUSED_WAIT_S = 12.0  # the service without the secret has this long to (not) repair


def _password(i: int) -> bytes:
    return f"owner-pw-{i}-5d1c".encode()


def _tls_uri(uri: str, tls: dict[str, str]) -> str:
    return uri + "".join(f"&{k}={v}" for k, v in tls.items())


def _write(uri: str) -> dict[LedgerId, tuple[bytes, list[bytes]]]:
    """LEDGERS E3W2A2 ledgers, each with its own password; even ones "mac"; the last left OPEN."""
    out: dict[LedgerId, tuple[bytes, list[bytes]]] = {}
    with LedgerClient(uri, add_timeout_s=30) as client:
        for i in range(LEDGERS):
            pw = _password(i)
            w = client.create_ledger(3, 2, 2, digest_type="mac" if i % 2 == 0 else "crc32c", password=pw)
            data = [payload(i, e, 200 + 300 * e) for e in range(7)]
            for f in [w.add_entry_async(p) for p in data]:
                f.result(timeout=60)
            if i == LEDGERS - 1:
                client._handles.remove(w)
            else:
                w.close()
            out[w.ledger_id] = (pw, data)
    return out


def _a_bookie_of_the_open_ledger(cluster: LocalCluster, uri: str,
                                 written: dict[LedgerId, tuple[bytes, list[bytes]]]) -> LocalBookie:
    """The victim must hold a copy of the ledger left OPEN, or nothing makes autorecovery close it
    (E3 of 4 bookies leaves one bookie out of each ensemble: killing that one failed 1 run in 4)."""
    open_ledger = list(written)[-1]
    with LedgerClient(uri) as client:
        on = client.ledger_metadata(open_ledger).bookies()
    return next(b for b in cluster.bookies if b.bookie_id in on)


def _check_copies_with_owner_keys(client: LedgerClient, written: dict[LedgerId, tuple[bytes, list[bytes]]]) -> int:
    checked = 0
    for lid, (pw, data) in written.items():
        meta = client.ledger_metadata(lid)
        assert meta.is_closed and meta.last_entry_id == len(data) - 1, f"{lid}: {meta.state.value} {meta.last_entry_id}"
        digest, key = Digest.for_ledger(meta.digest_type, pw), master_key(pw)
        for e, expected in enumerate(data):
            ensemble = meta.ensemble_for(e)
            for slot in write_set(e, meta.ensemble_size, meta.write_quorum_size):
                resp = client.pool.get(ensemble[slot]).read((lid.scope_id, lid.id), e, e, master_key=key, timeout_s=30)
                assert list(resp.entry_status) == [0], f"{lid} entry {e} on {ensemble[slot]}: {list(resp.entry_status)}"
                got = decode_entry(digest, resp.entries[0], lid.scope_id, lid.id, e)  # checks the MAC / CRC
                assert got.payload == expected, f"{lid} entry {e} on {ensemble[slot]} differs"
                checked += 1
    return checked


def test_autorecovery_repairs_password_ledgers_as_the_operator(zk_uri: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_OPERATOR_SECRET", raising=False)
    monkeypatch.delenv("LEDGER_OPERATOR_SECRET_FILE", raising=False)
    monkeypatch.delenv("LEDGER_PASSWORD", raising=False)
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster, _certs, secret_file = secured_cluster(tmp_path, 4, metadata_uri=uri, require_read_auth=True)
    tls_uri = _tls_uri(uri, cluster.client_tls)
    services: list[Autorecovery] = []
    with cluster:
        written = _write(tls_uri)
        shape = Written({lid: data for lid, (_pw, data) in written.items()})
        victim = _a_bookie_of_the_open_ledger(cluster, tls_uri, written)
        victim.kill()

        without = Autorecovery(tls_uri, tmp_path / "without-secret.log")
        services.append(without)
        try:
            with LedgerClient(tls_uri, add_timeout_s=30) as client:
                with pytest.raises(AssertionError, match="not re-replicated"):
                    wait_fully_replicated(client, shape, {victim.bookie_id}, timeout_s=REFUSED_WAIT_S)
            assert without.stop() == 0
            assert "refuse this client as the operator" in without.log(), without.log()[-3000:]

            monkeypatch.setenv("LEDGER_OPERATOR_SECRET_FILE", str(secret_file))  # the service's only secret
            operator = Autorecovery(tls_uri, tmp_path / "operator.log")
            services.append(operator)
            with LedgerClient(tls_uri, add_timeout_s=30) as client:
                started = time.monotonic()
                wait_fully_replicated(client, shape, {victim.bookie_id})
                print(f"operator autorecovery repaired {LEDGERS} ledgers in {time.monotonic() - started:.1f} s")
                assert _check_copies_with_owner_keys(client, written) == sum(2 * len(d) for _, d in written.values())
                _owner_deletes_on_every_bookie(client, written)
            assert operator.stop() == 0
            assert "refuse this client as the operator" not in operator.log()
        finally:
            for s in services:
                s.kill()


def _owner_deletes_on_every_bookie(client: LedgerClient, written: dict[LedgerId, tuple[bytes, list[bytes]]]) -> None:
    """The owner's key is the one every copy was written with: each bookie deletes for it."""
    for lid, (pw, _data) in written.items():
        meta = client.ledger_metadata(lid)
        for bookie in sorted(meta.bookies()):
            resp = client.pool.get(bookie).delete_ledger((lid.scope_id, lid.id), master_key=master_key(pw), timeout_s=30)
            assert resp.status == 0, f"{lid} on {bookie}: {resp.status} {resp.message}"
