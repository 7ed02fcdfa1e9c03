"""The acceptance matrix of issue 21 on a real bookie process (mutual TLS, an operator secret file,
an operator certificate, --require-read-auth): every RPC (Add, Read, ReadLac, WriteLac, Fence,
DeleteLedger, Info, StorageStats, TriggerGc, LedgerKey) and the add listener, called with no certificate, a
certificate of another CA, an expired certificate, a wrong master key, no operator identity and a
wrong operator secret, is refused with a clear error and not one byte changes on disk; the same
calls with the right credentials succeed. Info is public to any caller with an accepted
certificate (it is the liveness call; docs/security.md), so it is refused only at the handshake."""

from __future__ import annotations

import hashlib
import re
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient, channel_options
from pyspark_ledger.transport.credentials import with_operator_secret
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.secured_cluster import OPERATOR_SECRET, SecuredCerts, secured_cluster
from tests.security.tls_helpers import add_addresses, disk_snapshot

KEY = hashlib.sha256(b"ledger" + b"the ledger password").digest()
WRONG = hashlib.sha256(b"ledger" + b"a guess").digest()
TIMEOUT_S = 10.0
TARGET, DELETE_BY_KEY, DELETE_BY_SECRET, DELETE_BY_CERT, FENCE_ME = ((0, n) for n in (11, 12, 13, 14, 15))
TLS_KINDS = ("no certificate", "another CA", "expired")
KEY_KINDS = {  # kind: (certificate, master key, operator secret)
    "wrong master key": ("client", WRONG, None),
    "no operator identity": ("client", b"", None),
    "wrong operator secret": ("client", b"", "not-the-operator-secret-42"),
}
RPCS = ("Add", "Read", "ReadLac", "WriteLac", "Fence", "DeleteLedger", "Info", "StorageStats", "TriggerGc",
        "LedgerKey")


def _ref(ledger: tuple[int, int]) -> pb.LedgerRef:
    return pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1])


def _calls(ledger: tuple[int, int], key: bytes) -> dict[str, Callable[[Any], Any]]:
    r = _ref(ledger)
    return {
        "Add": lambda s: list(s.Add(iter([pb.AddRequest(batches=[pb.AddBatch(
            request_id=1, ledger=r, master_key=key, entry_ids=[50], lacs=[2], entries=[b"intruder"])])]),
            timeout=TIMEOUT_S)),
        "Read": lambda s: s.Read(pb.ReadRequest(ledger=r, first_entry_id=0, last_entry_id=2, master_key=key),
                                 timeout=TIMEOUT_S),
        "ReadLac": lambda s: s.ReadLac(pb.ReadLacRequest(ledger=r, master_key=key), timeout=TIMEOUT_S),
        "WriteLac": lambda s: s.WriteLac(pb.WriteLacRequest(ledger=r, master_key=key, lac=2), timeout=TIMEOUT_S),
        "Fence": lambda s: s.Fence(pb.FenceRequest(ledger=r, master_key=key), timeout=TIMEOUT_S),
        "DeleteLedger": lambda s: s.DeleteLedger(pb.DeleteLedgerRequest(ledger=r, master_key=key), timeout=TIMEOUT_S),
        "Info": lambda s: s.Info(pb.InfoRequest(), timeout=TIMEOUT_S),
        "StorageStats": lambda s: s.StorageStats(pb.StorageStatsRequest(), timeout=TIMEOUT_S),
        "TriggerGc": lambda s: list(s.TriggerGc(pb.TriggerGcRequest(), timeout=TIMEOUT_S)),
        "LedgerKey": lambda s: s.LedgerKey(pb.LedgerKeyRequest(ledger=r), timeout=TIMEOUT_S),
    }


def _statuses(answer: Any) -> list[tuple[int, str]]:
    answers = answer if isinstance(answer, list) else [answer]
    out = []
    for a in answers:
        for res in getattr(a, "results", [a]):
            if hasattr(res, "status"):
                out.append((res.status, getattr(res, "message", "")))
    return out


def _outcome(call: Callable[[Any], Any], stub: Any) -> tuple[str, str]:
    """("ok" | "refused" | "UNAVAILABLE" | other code, the error text)."""
    try:
        answer = call(stub)
    except grpc.RpcError as exc:
        code = exc.code().name
        return ("refused" if code in ("PERMISSION_DENIED", "UNAUTHENTICATED") else code), f"{code} {exc.details()}"
    for status, message in _statuses(answer):
        if status == Status.UNAUTHORIZED:
            return "refused", f"UNAUTHORIZED {message}"
        if status != Status.OK:
            return Status(status).name, message
    return "ok", ""


class _Caller:
    """A stub over its own channel, with the given certificate and operator secret."""

    def __init__(self, address: str, tls: TlsSettings | None, secret: str | None):
        assert tls is not None
        raw = grpc.secure_channel(address, tls.channel_credentials(), options=channel_options())
        self.channel = raw
        self.stub = pb_grpc.BookieStub(with_operator_secret(raw, secret.encode() if secret else None))

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, SecuredCerts, int]]:
    cluster, certs, _ = secured_cluster(tmp_path_factory.mktemp("auth-matrix"), 1)
    metrics_port = free_port()
    # No background write may change the disk between two snapshots: no GC, no periodic checkpoint.
    # Its ledgers are written raw, with no metadata: no ledger-key verification (test_ledger_owner.py has it).
    cluster.bookie_args += ["--gc-interval-s", "0", "--checkpoint-interval-s", "3600", "--no-verify-ledger-keys",
                            "--metrics-port", str(metrics_port)]
    with cluster:
        writer = _Caller(cluster.bookies[0].address, certs.tls("client"), None)
        for ledger in (TARGET, DELETE_BY_KEY, DELETE_BY_SECRET, DELETE_BY_CERT, FENCE_ME):
            answer = writer.stub.Add(iter([pb.AddRequest(batches=[pb.AddBatch(
                request_id=1, ledger=_ref(ledger), master_key=KEY, entry_ids=[0, 1, 2], lacs=[-1, 0, 1],
                entries=[b"e0", b"e1", b"e2"])])]), timeout=TIMEOUT_S)
            assert [r.status for a in answer for r in a.results] == [Status.OK]
        writer.close()
        yield cluster, certs, metrics_port


@pytest.mark.parametrize("kind", TLS_KINDS)
def test_a_caller_without_an_accepted_certificate_is_refused_on_every_rpc_and_the_add_listener(
        secured: tuple[LocalCluster, SecuredCerts, int], kind: str) -> None:
    cluster, certs, _ = secured
    bookie = cluster.bookies[0]
    before = disk_snapshot(cluster)
    caller = _Caller(bookie.address, certs.tls(kind), OPERATOR_SECRET)  # even with the right secret and key
    try:
        for op, call in _calls(TARGET, KEY).items():
            outcome, text = _outcome(call, caller.stub)
            assert outcome == "UNAVAILABLE", (op, kind, text)  # the handshake failed: no handler ran
    finally:
        caller.close()
    with BookieClient(bookie.bookie_id, bookie.address, add_address=add_addresses(cluster)[bookie.bookie_id],
                      tls=certs.tls(kind), rpc_timeout_s=5.0, operator_secret=OPERATOR_SECRET.encode()) as client:
        with pytest.raises(BookieUnavailableError) as refused:  # what a user sees: the reason, in words
            client.delete_ledger(TARGET, master_key=KEY)
        assert "certificate" in str(refused.value) and OPERATOR_SECRET not in str(refused.value)
        with pytest.raises(BookieUnavailableError) as refused:
            client.add_batch(TARGET, KEY, [(60, 2, b"intruder")], lambda s, m: None)
        assert "certificate" in str(refused.value)
    assert disk_snapshot(cluster) == before


@pytest.mark.parametrize("kind", list(KEY_KINDS))
def test_a_caller_without_the_right_key_or_operator_identity_is_refused_and_nothing_changes(
        secured: tuple[LocalCluster, SecuredCerts, int], kind: str) -> None:
    cluster, certs, _ = secured
    cert, key, secret = KEY_KINDS[kind]
    bookie = cluster.bookies[0]
    before = disk_snapshot(cluster)
    caller = _Caller(bookie.address, certs.tls(cert), secret)
    try:
        for op, call in _calls(TARGET, key).items():
            outcome, text = _outcome(call, caller.stub)
            if op == "Info":
                assert outcome == "ok", text  # public to an accepted certificate
                continue
            assert outcome == "refused", (op, kind, outcome, text)
            assert f"{op} refused for" in text, text
            if op not in ("StorageStats", "TriggerGc"):
                assert "ledger 0:11" in text, text
            assert OPERATOR_SECRET not in text and (secret is None or secret not in text)
            assert disk_snapshot(cluster) == before, f"{op} ({kind}) changed bytes on disk"
    finally:
        caller.close()
    answers: list[tuple[Status, str]] = []
    done = threading.Event()
    with BookieClient(bookie.bookie_id, bookie.address, add_address=add_addresses(cluster)[bookie.bookie_id],
                      tls=certs.tls(cert), rpc_timeout_s=5.0) as client:
        client.add_batch(TARGET, key, [(60, 2, b"intruder")], lambda s, m: (answers.append((s, m)), done.set()))
        assert done.wait(TIMEOUT_S)
    assert answers[0][0] == Status.UNAUTHORIZED and "Add refused for ledger 0:11" in answers[0][1]
    assert disk_snapshot(cluster) == before


def _refusals(metrics_port: int) -> dict[str, int]:
    page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return {op: int(n) for op, n in re.findall(r'bookie_auth_refusals_total\{op="(\w+)"\} (\d+)', page)}


def test_every_refusal_is_counted_by_operation(secured: tuple[LocalCluster, SecuredCerts, int]) -> None:
    cluster, certs, metrics_port = secured
    before = _refusals(metrics_port)
    caller = _Caller(cluster.bookies[0].address, certs.tls("client"), None)
    try:
        for op, call in _calls(TARGET, WRONG).items():
            assert _outcome(call, caller.stub)[0] == ("ok" if op == "Info" else "refused"), op
    finally:
        caller.close()
    after = _refusals(metrics_port)
    assert {op: after.get(op, 0) - before.get(op, 0) for op in RPCS} == {op: int(op != "Info") for op in RPCS}


def test_the_same_calls_with_the_right_credentials_succeed(
        secured: tuple[LocalCluster, SecuredCerts, int]) -> None:
    cluster, certs, metrics_port = secured
    address = cluster.bookies[0].address
    by_key = _Caller(address, certs.tls("client"), None)
    by_secret = _Caller(address, certs.tls("client"), OPERATOR_SECRET)
    by_cert = _Caller(address, certs.tls("operator"), None)
    try:
        key_calls = _calls(TARGET, KEY)
        for op in ("Add", "Read", "ReadLac", "WriteLac", "Info"):
            assert _outcome(key_calls[op], by_key.stub) == ("ok", ""), op
        read = key_calls["Read"](by_key.stub)
        assert list(read.entries) == [b"e0", b"e1", b"e2"]
        assert _outcome(_calls(FENCE_ME, KEY)["Fence"], by_key.stub) == ("ok", "")
        for caller in (by_secret, by_cert):
            operator_calls = _calls(TARGET, b"")
            for op in ("Read", "ReadLac", "WriteLac", "StorageStats", "Info", "LedgerKey"):
                assert _outcome(operator_calls[op], caller.stub) == ("ok", ""), op
            assert operator_calls["LedgerKey"](caller.stub).master_key == KEY  # what autorecovery copies with
        # The ledger's own key does not buy its key back out: LedgerKey is for operators only.
        outcome, text = _outcome(key_calls["LedgerKey"], by_key.stub)
        assert outcome == "refused" and "LedgerKey refused for ledger 0:11: needs an operator identity" in text, text
        for ledger, caller, key in ((DELETE_BY_KEY, by_key, KEY), (DELETE_BY_SECRET, by_secret, b""),
                                    (DELETE_BY_CERT, by_cert, b"")):
            before = disk_snapshot(cluster)
            assert _outcome(_calls(ledger, key)["DeleteLedger"], caller.stub) == ("ok", "")
            assert disk_snapshot(cluster) != before  # the delete is journaled
            gone = _calls(ledger, key)["ReadLac"](by_secret.stub)
            assert gone.status == Status.NO_SUCH_LEDGER
        # Last: GC drops ledgers that metadata does not know, as these (written to the bookie only).
        assert _outcome(_calls(TARGET, b"")["TriggerGc"], by_secret.stub) == ("ok", "")
    finally:
        for c in (by_key, by_secret, by_cert):
            c.close()



def test_a_client_with_the_ledger_password_reads_from_a_bookie_that_requires_read_auth(
        secured: tuple[LocalCluster, SecuredCerts, int]) -> None:
    """Reads carry the master key (read handle, LAC reads, the run-encoded bulk reads): no operator
    identity is needed to read a ledger whose password the client has."""
    from pyspark_ledger import LedgerClient
    from pyspark_ledger.protocol.digest import master_key

    cluster, _, _ = secured
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
        w = client.create_ledger(1, 1, 1, password="pw-of-this-ledger")
        for i in range(10):
            w.add_entry(b"entry %d" % i)
        r = client.open_ledger(w.ledger_id, password="pw-of-this-ledger")
        assert r.last_add_confirmed() >= 8  # LAC reads from the bookie while the writer is open
        w.close()
        assert [e.payload for e in client.open_ledger(w.ledger_id, password="pw-of-this-ledger").read_entries(0, 9)] \
            == [b"entry %d" % i for i in range(10)]
        key = (w.ledger_id.scope_id, w.ledger_id.id)
        bookie = client.pool.get(cluster.bookies[0].bookie_id)
        runs = bookie.read_runs(key, 0, 9, master_key=master_key(b"pw-of-this-ledger"))
        assert runs.status == Status.OK
        with pytest.raises(BookieUnavailableError) as refused:  # the same bulk read without the key
            bookie.read_runs(key, 0, 9)
        assert "Read refused for ledger" in str(refused.value)


def test_a_client_deletes_bookie_data_with_the_ledger_password_and_otherwise_leaves_it_to_gc(
        secured: tuple[LocalCluster, SecuredCerts, int]) -> None:
    from pyspark_ledger import LedgerClient
    from pyspark_ledger.errors import BadPasswordError

    cluster, certs, _ = secured
    operator = _Caller(cluster.bookies[0].address, certs.tls("client"), OPERATOR_SECRET)
    try:
        with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
            kept, gone = (client.create_ledger(1, 1, 1, password="pw") for _ in range(2))
            for w in (kept, gone):
                w.add_entry(b"x")
                w.close()
            with pytest.raises(BadPasswordError):
                client.delete_ledger(gone.ledger_id, password="not pw")
            client.delete_ledger(gone.ledger_id, password="pw")
            client.delete_ledger(kept.ledger_id)  # no password, no operator: metadata only
            lac = {w: _calls((w.ledger_id.scope_id, w.ledger_id.id), b"")["ReadLac"](operator.stub).status
                   for w in (kept, gone)}
            assert lac == {kept: Status.OK, gone: Status.NO_SUCH_LEDGER}
            assert {kept.ledger_id, gone.ledger_id}.isdisjoint(client.list_ledgers())
    finally:
        operator.close()
