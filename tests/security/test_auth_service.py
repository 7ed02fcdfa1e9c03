"""Authorization in the bookie's service over real storage, in-process (bookie/auth.py): a wrong
or missing master key, no or a wrong operator secret, a certificate identity that is not an
operator's: every RPC that needs a right is refused with a message naming the operation and
never the secret, counted in bookie_auth_refusals_total, with not one byte changed on disk. The
same calls with the master key or an operator identity succeed. A planted check that accepts any
key is caught by the same refusal check."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import bookie.auth
from bookie.auth import AuthConfigError, AuthPolicy, read_secret_file
from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.service import BookieService
from bookie.status import Status
from bookie.storage import BookieStorage, StorageConfig
from tests.security.auth_checks import (
    LEDGER,
    RIGHT_KEY,
    SECRET,
    WRONG_KEY,
    Aborted,
    FakeContext,
    disk_digest,
    ref,
    violations,
)

STRANGERS = {"no credential": FakeContext(), "a wrong operator secret": FakeContext(b"not-the-operator-secret-123"),
             "a client certificate that is no operator's": FakeContext(identity="ledger-client")}


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[tuple[BookieService, Path]]:
    data_dir = tmp_path / "bookie"
    storage = BookieStorage.open(StorageConfig(data_dir=data_dir, fsync=False))
    policy = AuthPolicy(SECRET, frozenset({"ledger-operator"}), require_read_auth=True)
    svc = BookieService(storage, "bookie-0", "test", "instance", Metrics(), data_dir=data_dir, auth=policy)
    # The ledger exists, written with its master key: entries 0..3.
    outcomes = svc.adds.handle(pb.AddRequest(batches=[pb.AddBatch(
        request_id=1, ledger=ref(), master_key=RIGHT_KEY, entry_ids=[0, 1, 2, 3], lacs=[-1, 0, 1, 2],
        entries=[b"e0", b"e1", b"e2", b"e3"])]))
    assert [o.status for o in outcomes] == [Status.OK]
    try:
        yield svc, data_dir
    finally:
        storage.close()


def test_every_call_without_a_right_is_refused_clearly_and_changes_nothing_on_disk(
        service: tuple[BookieService, Path]) -> None:
    svc, data_dir = service
    assert violations(svc, data_dir, STRANGERS) == []
    # Counted per operation: 3 credentials x 2 keys for each RPC that was refused.
    page = svc.metrics.render()
    for op in ("Add", "Read", "ReadLac", "WriteLac", "Fence", "DeleteLedger", "StorageStats", "TriggerGc"):
        m = re.search(rf'bookie_auth_refusals_total{{op="{op}"}} (\d+)', page)
        assert m is not None and int(float(m.group(1))) >= 6, f"{op} refusals not counted: {page}"
    # And the ledger is intact.
    resp = svc.Read(pb.ReadRequest(ledger=ref(), first_entry_id=0, last_entry_id=3, master_key=RIGHT_KEY), FakeContext())
    assert list(resp.entries) == [b"e0", b"e1", b"e2", b"e3"]


def test_a_refusal_says_which_operation_and_ledger_and_which_code(service: tuple[BookieService, Path]) -> None:
    svc, _ = service
    with pytest.raises(Aborted) as none:
        svc.DeleteLedger(pb.DeleteLedgerRequest(ledger=ref()), FakeContext())
    assert none.value.code.name == "UNAUTHENTICATED"
    assert "DeleteLedger refused for ledger 0:7" in str(none.value)
    with pytest.raises(Aborted) as wrong:
        svc.DeleteLedger(pb.DeleteLedgerRequest(ledger=ref(), master_key=WRONG_KEY), FakeContext())
    assert wrong.value.code.name == "PERMISSION_DENIED"
    with pytest.raises(Aborted) as wrong_secret:
        svc.WriteLac(pb.WriteLacRequest(ledger=ref(), lac=2), FakeContext(b"x" * 32))
    assert wrong_secret.value.code.name == "PERMISSION_DENIED" and "x" * 32 not in str(wrong_secret.value)


@pytest.mark.parametrize("who", ["master key", "operator secret", "operator certificate"])
def test_the_same_calls_with_the_right_credentials_succeed(service: tuple[BookieService, Path], who: str) -> None:
    svc, data_dir = service
    ctx = {"master key": FakeContext(), "operator secret": FakeContext(SECRET),
           "operator certificate": FakeContext(identity="ledger-operator")}[who]
    key = RIGHT_KEY if who == "master key" else b""
    read = svc.Read(pb.ReadRequest(ledger=ref(), first_entry_id=0, last_entry_id=3, master_key=key), ctx)
    assert read.status == Status.OK and list(read.entries) == [b"e0", b"e1", b"e2", b"e3"]
    assert svc.ReadLac(pb.ReadLacRequest(ledger=ref(), master_key=key), ctx).status == Status.OK
    assert svc.WriteLac(pb.WriteLacRequest(ledger=ref(), master_key=key, lac=3), ctx).status == Status.OK
    assert svc.ReadLac(pb.ReadLacRequest(ledger=ref(), master_key=key), ctx).lac == 3
    assert svc.Fence(pb.FenceRequest(ledger=ref(), master_key=key), ctx).status == Status.OK
    assert svc.storage.ledger_state(LEDGER).fenced
    if who != "master key":
        assert svc.StorageStats(pb.StorageStatsRequest(), ctx).bookie_id == "bookie-0"
        assert list(svc.TriggerGc(pb.TriggerGcRequest(), ctx))[-1].finished
    before = disk_digest(data_dir)
    assert svc.DeleteLedger(pb.DeleteLedgerRequest(ledger=ref(), master_key=key), ctx).status == Status.OK
    assert svc.storage.ledger_state(LEDGER) is None and disk_digest(data_dir) != before


def test_a_planted_check_that_accepts_any_key_is_caught(service: tuple[BookieService, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    svc, data_dir = service
    monkeypatch.setattr(bookie.auth, "keys_equal", lambda stored, presented: True)
    found = violations(svc, data_dir, {"no credential": FakeContext()})
    assert any(v.startswith("WriteLac/") for v in found), found
    assert any(v.startswith("Read/") for v in found), found
    assert any(v.startswith("DeleteLedger/") and "bytes changed on disk" in v for v in found), found


def test_a_planted_check_that_takes_any_operator_secret_is_caught(service: tuple[BookieService, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    svc, data_dir = service
    monkeypatch.setattr(bookie.auth.hmac, "compare_digest", lambda a, b: True)
    found = violations(svc, data_dir, {"a wrong operator secret": STRANGERS["a wrong operator secret"]})
    assert any(v.startswith("DeleteLedger/") for v in found), found


def test_the_operator_secret_file_must_be_long_enough_and_is_never_echoed(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"tiny-secret\n")
    with pytest.raises(AuthConfigError) as exc:
        read_secret_file(short, "operator secret")
    assert "tiny-secret" not in str(exc.value) and str(short) in str(exc.value)
    good = tmp_path / "good"
    good.write_bytes(SECRET + b"\n")
    good.chmod(0o600)
    assert read_secret_file(good, "operator secret") == SECRET
    policy = AuthPolicy.from_settings(str(good), "a, b", False)
    assert policy.operator_identities == {"a", "b"} and SECRET.decode() not in repr(policy)


def test_operator_settings_are_checked_at_start(tmp_path: Path) -> None:
    from bookie.config import ConfigError, build_parser, config_from_args
    from pyspark_ledger.testing.local_cluster import LocalBookie

    base = ["--metadata-uri", f"sqlite://{tmp_path / 'meta.db'}", "--data-dir", str(tmp_path / "data")]
    with pytest.raises(ConfigError) as no_mtls:
        config_from_args(build_parser().parse_args([*base, "--operator-identities", "ops"]))
    assert "--tls-client-auth" in str(no_mtls.value)
    # A real bookie process with a secret too short to be safe refuses to start, naming the file only.
    short = tmp_path / "short.secret"
    short.write_text("tiny-secret-7\n")
    bookie = LocalBookie(f"sqlite://{tmp_path / 'meta.db'}", tmp_path / "data",
                         extra_args=["--operator-secret-file", str(short)], log_path=tmp_path / "bookie.log")
    code, log_text = bookie.run_to_exit()
    assert code == 1 and str(short) in log_text and "tiny-secret-7" not in log_text, log_text
    assert not (tmp_path / "data").exists()  # refused before the data dir or a cookie was made
