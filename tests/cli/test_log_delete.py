"""`ledger logs delete NAME` on both metadata stores (the embedded one and a real ZooKeeper):
it asks on a terminal, refuses without --yes when nobody can answer, fences a writer that is
still appending (its next append fails), and deletes the log and every ledger it had."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from metadata import LedgerId
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.local_cluster import LocalCluster

ROLLOVER_ENTRIES = 3
APPENDS = 10  # 4 ledgers: three of 3 entries, the writer's current one


class Terminal(io.StringIO):
    """A stdin that says it is a terminal and answers the prompt with its text."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module", params=["sqlite", "zk"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    work = tmp_path_factory.mktemp(f"log-delete-{request.param}")
    uri = request.getfixturevalue("zk_server").uri(f"/{work.name}") if request.param == "zk" else \
        f"sqlite://{work / 'metadata.db'}"
    c = LocalCluster(3, metadata_uri=uri, work_dir=work / "cluster")
    c.start()
    yield c
    c.close()


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[LedgerClient]:
    with LedgerClient(cluster.metadata_uri, add_timeout_s=5) as c:
        yield c


def write_log(client: LedgerClient, name: str) -> tuple[object, list[LedgerId]]:
    writer = client.open_log_writer(name, rollover_entries=ROLLOVER_ENTRIES)
    for i in range(APPENDS):
        writer.append(f"{name} {i}".encode())
    return writer, [lg.ledger_id for lg in client.describe_log(name).ledgers]


def delete_cmd(cluster: LocalCluster, *args: str) -> int:
    return main(["--metadata-uri", cluster.metadata_uri, "logs", "delete", *args])


def test_delete_fences_a_live_writer_and_removes_the_log_and_its_ledgers(
        cluster: LocalCluster, client: LedgerClient, capsys: pytest.CaptureFixture[str]) -> None:
    writer, ledgers = write_log(client, "doomed")
    assert len(ledgers) == 4
    assert delete_cmd(cluster, "doomed", "--yes") == 0
    assert "deleted log doomed and 4 ledger(s)" in capsys.readouterr().out
    assert "doomed" not in client.list_logs()
    assert [lid for lid in ledgers if client.ledgers.get(lid) is not None] == []
    with pytest.raises(LedgerError):  # fenced: no append is acknowledged into a deleted log
        writer.append(b"after the delete")


def test_without_a_terminal_it_refuses_unless_told_yes(
        cluster: LocalCluster, client: LedgerClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    writer, ledgers = write_log(client, "kept")
    writer.close()
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert delete_cmd(cluster, "kept") == 2
    err = capsys.readouterr().err
    assert "standard input is not a terminal" in err and "--yes" in err
    assert "kept" in client.list_logs() and all(client.ledgers.get(lid) is not None for lid in ledgers)
    assert delete_cmd(cluster, "kept", "--yes", "--json") == 0
    assert '"deletedLedgers": 4' in capsys.readouterr().out


@pytest.mark.parametrize("answer, deleted", [("n\n", False), ("\n", False), ("yes\n", True)])
def test_on_a_terminal_it_asks_and_only_yes_deletes(
        cluster: LocalCluster, client: LedgerClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, answer: str, deleted: bool) -> None:
    name = f"asked-{len(answer)}"
    writer, _ = write_log(client, name)
    writer.close()
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert delete_cmd(cluster, name) == (0 if deleted else 1)
    assert f"delete log {name} with 4 ledgers? [y/N]" in capsys.readouterr().out
    assert (name not in client.list_logs()) is deleted


def test_no_such_log_is_an_error(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert delete_cmd(cluster, "never-was", "--yes") == 1
    assert "no such log 'never-was'" in capsys.readouterr().err
