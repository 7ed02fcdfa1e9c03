"""The `ledger` admin shell against a real cluster: real bookies and a real ZooKeeper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import CloseContext, CreateContext, LedgerId, LedgerState
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(zk_uri: str, tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(4, metadata_uri=zk_uri, work_dir=tmp_path / "cluster")
    c.start()
    yield c
    c.close()


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[LedgerClient]:
    with LedgerClient(cluster.metadata_uri, add_timeout_s=5) as c:
        yield c


def run(capsys: pytest.CaptureFixture[str], uri: str, *args: str) -> tuple[int, str, str]:
    code = main(["--metadata-uri", uri, *args])
    out, err = capsys.readouterr()
    return code, out, err


def make_ledger(client: LedgerClient, n: int = 5, **kw) -> LedgerId:
    w = client.create_ledger(3, 3, 2, **kw)
    for i in range(n):
        w.add_entry(f"entry {i}".encode())
    w.close()
    return w.ledger_id


def test_listledgers_metadata_and_read(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    uri = cluster.metadata_uri
    a = make_ledger(client)
    scoped = client.create_ledger(3, 3, 2, scope_id=7)
    scoped.add_entry(b"\x00\xffbinary")
    scoped.close()
    code, out, _ = run(capsys, uri, "listledgers")
    assert code == 0 and a.qualified_name in out and scoped.ledger_id.qualified_name in out
    code, out, _ = run(capsys, uri, "listledgers", "--scope", "7", "--json")
    assert code == 0 and [x["qualifiedName"] for x in json.loads(out)] == [scoped.ledger_id.qualified_name]
    code, out, _ = run(capsys, uri, "listledgers", "--state", "OPEN")
    assert code == 0 and a.qualified_name not in out
    bookie = client.ledger_metadata(a).segments[0].bookies[0]
    code, out, _ = run(capsys, uri, "listledgers", "--bookie", bookie, "--json")
    assert a.qualified_name in out
    for form in ([str(a.id)], ["--ledger-qualified-name", a.qualified_name], ["--ledger-scope-id", "0", str(a.id)]):
        code, out, _ = run(capsys, uri, "ledgermetadata", *form)
        assert code == 0 and "state             CLOSED" in out and "last entry        4" in out
    code, out, _ = run(capsys, uri, "ledgermetadata", "--ledger-scope-id", "7", str(scoped.ledger_id.id), "--json")
    assert json.loads(out)["ledger"]["scope_id"] == 7
    code, out, _ = run(capsys, uri, "readledger", str(a.id), "--first", "1", "--last", "2")
    assert code == 0 and out.splitlines() == ["1\tentry 1", "2\tentry 2"]
    code, out, _ = run(capsys, uri, "readledger", scoped.ledger_id.qualified_name, "--format", "hex", "--json")
    assert json.loads(out)[0]["payload"] == b"\x00\xffbinary".hex()


def test_readledger_force_recovery_closes_an_open_ledger(
        capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    w = client.create_ledger(3, 3, 2)
    for i in range(3):
        w.add_entry(b"open %d" % i)
    code, out, _ = run(capsys, cluster.metadata_uri, "readledger", str(w.ledger_id.id), "--force-recovery")
    assert code == 0 and out.count("open ") == 3
    assert client.ledger_metadata(w.ledger_id).state is LedgerState.CLOSED


def test_recover_dry_run_then_recover_a_killed_bookies_ledgers(
        capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    uri = cluster.metadata_uri
    victim = cluster.bookies[0]
    writers, acked = [], {}
    for _ in range(3):
        w = client.create_ledger(3, 3, 2, ensemble=[victim.bookie_id, cluster.bookies[1].bookie_id, cluster.bookies[2].bookie_id])
        acked[w.ledger_id] = [w.add_entry(b"acked %d" % i) for i in range(20)]
        writers.append(w)
    closed = make_ledger(client, ensemble=[victim.bookie_id, cluster.bookies[1].bookie_id, cluster.bookies[3].bookie_id])
    for w in writers:
        w._close_quietly()  # the writers die without closing
    victim.kill()
    before = {lid: client.ledgers.read(lid) for lid in list(acked) + [closed]}
    code, out, _ = run(capsys, uri, "recover", "--bookie", victim.bookie_id, "--dry-run")
    assert code == 0 and "would fence and close" in out
    assert {lid: client.ledgers.read(lid) for lid in before} == before, "--dry-run changed metadata"
    code, out, err = run(capsys, uri, "recover", "--bookie", victim.bookie_id)
    assert code == 0, err
    for lid, ids in acked.items():
        meta = client.ledger_metadata(lid)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id >= max(ids)
        assert victim.bookie_id not in meta.bookies()
        got = [e.payload for e in client.open_ledger(lid).read_entries(0, meta.last_entry_id)]
        assert got[: len(ids)] == [b"acked %d" % i for i in ids]
    meta = client.ledger_metadata(closed)
    assert victim.bookie_id not in meta.bookies()
    assert [e.payload for e in client.open_ledger(closed).read_entries(0, 4)] == [b"entry %d" % i for i in range(5)]


def test_recover_keeps_going_and_reports_failures(
        capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    w1 = client.create_ledger(3, 3, 2, password=b"pw1")
    w1.add_entry(b"x")
    w2 = client.create_ledger(3, 3, 2)
    w2.add_entry(b"y")
    code, out, err = run(capsys, cluster.metadata_uri, "recover", str(w1.ledger_id.id))
    assert code == 1 and "wrong password" in err
    code, out, err = run(capsys, cluster.metadata_uri, "recover", str(w2.ledger_id.id))
    assert code == 0 and client.ledger_metadata(w2.ledger_id).is_closed


def test_deleteledger_listbookies_simpletest_bookiesanity(
        capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    uri = cluster.metadata_uri
    lid = make_ledger(client)
    code, out, _ = run(capsys, uri, "deleteledger", str(lid.id), "--force")
    assert code == 0 and lid not in set(client.list_ledgers())
    code, out, _ = run(capsys, uri, "listbookies", "--json")
    assert sorted(b["bookieId"] for b in json.loads(out)) == sorted(b.bookie_id for b in cluster.bookies)
    registered = {i.bookie_id: i.add_address for i in client.bookies()}
    assert {b["bookieId"]: b["addAddress"] for b in json.loads(out)} == registered
    assert all(a.startswith("127.0.0.1:") for a in registered.values())  # every bookie has an add listener
    code, out, _ = run(capsys, uri, "listbookies")
    assert code == 0 and "add address" in out and all(a in out for a in registered.values())
    code, out, _ = run(capsys, uri, "listbookies", "--ro")
    assert code == 0 and cluster.bookies[0].bookie_id not in out
    code, out, _ = run(capsys, uri, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "50")
    assert code == 0 and "simpletest ok" in out
    code, out, _ = run(capsys, uri, "bookiesanity", "--json")
    assert code == 0 and len(json.loads(out)) == 4 and all(r["ok"] for r in json.loads(out))
    cluster.bookies[3].kill()
    code, out, _ = run(capsys, uri, "bookiesanity", "--bookie", cluster.bookies[3].bookie_id)
    assert code == 1 and "FAILED" in out
    assert not [x for x in client.list_ledgers()], "simpletest and bookiesanity must clean up their ledgers"


def test_logs_list_show_trim(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    uri = cluster.metadata_uri
    w = client.open_log_writer("clicks", rollover_entries=3)
    positions = [w.append(b"c%d" % i) for i in range(10)]
    code, out, _ = run(capsys, uri, "logs", "list")
    assert out.split() == ["clicks"]
    code, out, _ = run(capsys, uri, "logs", "show", "clicks", "--json")
    assert len(json.loads(out)["ledgers"]) == 4
    code, out, _ = run(capsys, uri, "logs", "trim", "clicks", "--before", json.dumps(positions[7].to_json()))
    assert code == 0 and "trimmed 2 ledger(s)" in out
    code, out, _ = run(capsys, uri, "logs", "show", "clicks")
    assert code == 0 and "2 ledger(s)" in out
    newest = client.logs.read_head("clicks")[0].record.ledgers[-1]
    assert f"newest ledger: seq {newest.seq} (its position in the log), ledger id {newest.ledger_id}" in out
    w.close()


def test_orphans_owner_and_lifespan(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, client: LedgerClient) -> None:
    uri = cluster.metadata_uri
    now_ms = int(time.time() * 1000)
    overdue = client.create_ledger(3, 3, 2, create_context=CreateContext.builder()
                                   .created_by("Company X", "System y", "service.z", "host1")
                                   .part_of_data_set("persistent://public/default/t")
                                   .expected_max_open_duration(3600).build())
    overdue.add_entry(b"x")
    overdue.close(CloseContext.builder().because_inactive().expect_reads_until(now_ms - 7_200_000)
                  .expect_delete_after(now_ms - 3_600_000).build())
    not_yet = client.create_ledger(3, 3, 2)
    not_yet.close(CloseContext.builder().expect_delete_after(now_ms + 3_600_000).build())
    parent = make_ledger(client)
    child = client.create_ledger(3, 3, 2, create_context=CreateContext.builder().child_of_ledger(parent).build())
    child.close()
    orphan_child = client.create_ledger(3, 3, 2, create_context=CreateContext.builder().child_of_ledger((0, 999_999)).build())
    orphan_child.close()
    make_ledger(client)  # plain: no context at all
    code, out, _ = run(capsys, uri, "auditor", "--grace-period-s", "60", "--rate", "1000")
    assert code == 0 and "2 orphaned" in out
    code, out, _ = run(capsys, uri, "listorphaned", "--printorphanreason")
    lines = sorted(out.splitlines())
    assert lines == sorted([
        f"{overdue.ledger_id} DELETE_OVERDUE {(now_ms - 3_600_000) // 1000}",
        f"{orphan_child.ledger_id} BROKEN_PARENT_REF 999999",
    ])
    code, out, _ = run(capsys, uri, "listorphaned")
    assert sorted(out.split()) == sorted([str(overdue.ledger_id), str(orphan_child.ledger_id)])
    code, out, _ = run(capsys, uri, "showowner", str(overdue.ledger_id.id))
    owner = json.loads(out)
    assert owner["createdBy"] == {"enterprise": "Company X", "system": "System y", "service": "service.z", "instance": "host1"}
    assert owner["onBehalfOf"] is None and owner["dataSet"] == "persistent://public/default/t"
    code, out, _ = run(capsys, uri, "predictlifespan", str(overdue.ledger_id.id))
    life = json.loads(out)
    meta = client.ledger_metadata(overdue.ledger_id)
    assert life == {
        "createTime": meta.ctime_ms // 1000, "expectedSealTime": (meta.ctime_ms + 3_600_000) // 1000,
        "actualSealTime": meta.seal_time_ms // 1000, "expectedReadUntilTime": (now_ms - 7_200_000) // 1000,
        "expectedDeleteTime": (now_ms - 3_600_000) // 1000,
    }
    # Deleting an orphan clears it on the next (periodic) pass.
    client.delete_ledger(overdue.ledger_id)
    code, out, _ = run(capsys, uri, "auditor", "--interval-s", "0.1", "--passes", "2", "--grace-period-s", "60")
    assert out.count("audit pass") == 2
    code, out, _ = run(capsys, uri, "listorphaned")
    assert out.split() == [str(orphan_child.ledger_id)]


def test_errors_are_one_line_with_exit_codes(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, tmp_path: Path) -> None:
    uri = cluster.metadata_uri
    for args, fragment in ((["ledgermetadata", "12345"], "no such ledger 12345"),
                           (["ledgermetadata", "not-an-id"], "not a ledger id"),
                           (["readledger", "--ledger-qualified-name", "xyz"], "not a ledger qualified name"),
                           (["quorums", "-e", "1", "-w", "2", "-a", "1"], "invalid quorum")):
        code, out, err = run(capsys, uri, *args)
        assert code == 1 and fragment in err and len(err.strip().splitlines()) == 1, (args, err)
    code, _, err = run(capsys, uri, "readledger")
    assert code == 2
    # Unreachable metadata, through the real console script: one line, exit 1, no traceback.
    proc = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "--metadata-uri",
                           "zk://127.0.0.1:1/x?connect_timeout_ms=1000", "listledgers"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 1 and "could not connect to ZooKeeper at 127.0.0.1:1" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "listledgers"], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
                                                     "PYSPARK_LEDGER_HOME": str(tmp_path / "none")})
    assert proc.returncode == 2 and "no metadata service given" in proc.stderr


def test_metadata_uri_from_environment(
        capsys: pytest.CaptureFixture[str], cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_METADATA_URI", cluster.metadata_uri)
    assert main(["listbookies"]) == 0
    assert cluster.bookies[0].bookie_id in capsys.readouterr().out
