"""The `ledger` CLI's password off the command line (pyspark_ledger/cli/passwords.py):
LEDGER_PASSWORD, LEDGER_PASSWORD_FILE and --password-prompt; --password still works but warns
that ps and history show it; an empty password warns on create and is refused with "mac"."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_ledger.cli import passwords
from pyspark_ledger.cli.app import main
from pyspark_ledger.cli.passwords import PasswordError, check_new_ledger_password, resolve_password
from pyspark_ledger.testing.local_cluster import LocalCluster

SECRET = "correct horse battery staple"


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"password": None, "password_prompt": False, **kw})


def test_the_password_comes_from_the_environment_a_file_or_a_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve_password(_args(), environ={"LEDGER_PASSWORD": SECRET}) == SECRET.encode()
    f = tmp_path / "pw"
    f.write_bytes(SECRET.encode() + b"\n")
    assert resolve_password(_args(), environ={"LEDGER_PASSWORD_FILE": str(f)}) == SECRET.encode()
    monkeypatch.setattr(passwords.getpass, "getpass", lambda prompt: "typed " + SECRET)
    assert resolve_password(_args(password_prompt=True), environ={}) == ("typed " + SECRET).encode()
    assert resolve_password(_args(), environ={}) == b""
    assert capsys.readouterr().err == ""  # none of these warns
    with pytest.raises(PasswordError) as missing:
        resolve_password(_args(), environ={"LEDGER_PASSWORD_FILE": str(tmp_path / "absent")})
    assert "absent" in str(missing.value)


def test_password_on_the_command_line_still_works_but_warns(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve_password(_args(password=SECRET), environ={"LEDGER_PASSWORD": "other"}) == SECRET.encode()
    err = capsys.readouterr().err
    assert "visible" in err and "ps" in err and "LEDGER_PASSWORD" in err and SECRET not in err


def test_an_empty_password_warns_and_is_refused_with_mac(capsys: pytest.CaptureFixture[str]) -> None:
    check_new_ledger_password(b"", "crc32c")
    assert "empty password" in capsys.readouterr().err
    with pytest.raises(PasswordError) as refused:
        check_new_ledger_password(b"", "mac")
    assert "mac" in str(refused.value)
    check_new_ledger_password(b"pw", "mac")
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(3, work_dir=tmp_path_factory.mktemp("cli-pw")) as c:
        yield c


def test_the_cli_creates_mac_ledgers_only_with_a_password(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LEDGER_PASSWORD", raising=False)
    monkeypatch.delenv("LEDGER_PASSWORD_FILE", raising=False)
    uri = cluster.metadata_uri
    assert main(["--metadata-uri", uri, "simpletest", "-n", "5", "--digest", "mac"]) == 1
    assert 'digest "mac" with an empty password' in capsys.readouterr().err
    monkeypatch.setenv("LEDGER_PASSWORD", SECRET)
    assert main(["--metadata-uri", uri, "simpletest", "-n", "5", "--digest", "mac"]) == 0
    out, err = capsys.readouterr()
    assert "simpletest ok" in out and SECRET not in out + err
    monkeypatch.delenv("LEDGER_PASSWORD")
    assert main(["--metadata-uri", uri, "simpletest", "-n", "5"]) == 0
    assert "empty password" in capsys.readouterr().err


def test_zk_credentials_on_a_command_line_are_warned_about(capsys: pytest.CaptureFixture[str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from bookie.config import build_parser, config_from_args
    from pyspark_ledger.cli.app import resolve_metadata_uri

    uri = "zk://127.0.0.1:2181/ledgers?zk_auth=digest:u:" + SECRET.replace(" ", "-")
    assert resolve_metadata_uri(uri) == uri
    err = capsys.readouterr().err
    assert "LEDGER_ZK_AUTH" in err and SECRET.replace(" ", "-") not in err
    config_from_args(build_parser().parse_args(["--metadata-uri", uri, "--data-dir", "/tmp/x"]))
    assert "visible in ps" in caplog.text and SECRET.replace(" ", "-") not in caplog.text
