"""No secret in ps, logs or exception messages (issue 21): a secured cluster on a real ZooKeeper with
ACLs (LEDGER_ZK_AUTH), three bookie processes with an operator secret file and mutual TLS, `ledger`
CLI processes given the ledger password in LEDGER_PASSWORD and the operator secret in
LEDGER_OPERATOR_SECRET_FILE, and refused calls of every kind. Then `ps -eo pid,args` of every
process the test started, every log file and output, and every refused call's exception text are
scanned for the three secrets: 0 hits. A URI carrying zk_auth shows as zk_auth=*** when printed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_ledger import LedgerClient
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from tests.security.secured_cluster import OPERATOR_SECRET, secured_cluster
from tests.security.uri_helpers import uri_with_zk_auth as with_zk_auth

ZK_SECRET = "zk-pw-3e8b1c7d"
LEDGER_PASSWORD = "ledger-pw-91af04d2"
SECRETS = (ZK_SECRET, LEDGER_PASSWORD, OPERATOR_SECRET)
CLI_TIMEOUT_S = 120


def _ps_args(pids: list[int]) -> str:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=10, check=True).stdout
    lines = [line for line in out.splitlines()[1:] if line.split(None, 1)[0].isdigit()]
    mine = [line for line in lines if int(line.split(None, 1)[0]) in pids]
    assert len(mine) == len(pids), f"not all started processes found in ps: {pids}"
    return "\n".join(mine)


def _cli(args: list[str], env: dict[str, str], pids: list[int], ps_seen: list[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_ledger.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        ps_seen.append(_ps_args([proc.pid]))  # while it runs (it imports for about a second)
    except AssertionError:
        ps_seen.append(" ".join(proc.args))  # already gone: its argv then
    out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    pids.append(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_no_secret_in_ps_logs_or_exception_messages(zk_server: LocalZooKeeper, zk_uri: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LEDGER_ZK_AUTH", f"digest:ledger:{ZK_SECRET}")  # the bookies inherit it
    monkeypatch.delenv("LEDGER_PASSWORD", raising=False)
    cluster, certs, secret_file = secured_cluster(tmp_path, 3, metadata_uri=zk_uri, require_read_auth=False)
    texts: list[str] = []  # every exception message and output to scan
    ps_seen: list[str] = []
    cli_pids: list[int] = []
    with cluster:
        ps_seen.append(_ps_args([b.proc.pid for b in cluster.bookies if b.proc is not None]))
        with LedgerClient(zk_uri, **cluster.client_tls) as client:
            w = client.create_ledger(3, 3, 2, digest_type="mac", password=LEDGER_PASSWORD)
            for i in range(20):
                w.add_entry(b"entry %d" % i)
            w.close()
            doomed = client.create_ledger(3, 3, 2, password=LEDGER_PASSWORD)
            doomed.add_entry(b"x")
            doomed.close()
            # Refused calls: a wrong ledger password, a delete without the operator identity.
            for attempt in (lambda: client.open_ledger(w.ledger_id, password="a wrong guess"),
                            lambda: client.pool.get(cluster.bookies[0].bookie_id).delete_ledger(
                                (w.ledger_id.scope_id, w.ledger_id.id))):
                with pytest.raises(Exception) as refused:
                    attempt()
                texts += [str(refused.value), repr(refused.value)]
        with LedgerClient(zk_uri, operator_secret="not the operator secret", **cluster.client_tls) as wrong_op:
            with pytest.raises(Exception) as refused:
                wrong_op.pool.get(cluster.bookies[0].bookie_id).storage_stats()
            texts += [str(refused.value), repr(refused.value)]
        # ZooKeeper: wrong credentials on the URI, printed by repr and in the error.
        with pytest.raises(Exception) as refused:
            with LedgerClient(with_zk_auth(zk_uri, "digest:ledger:wrong-" + ZK_SECRET)) as bad:
                texts.append(repr(bad.store.uri))
                list(bad.list_ledgers())
        texts += [str(refused.value), repr(refused.value)]
        assert "NoAuth" in str(refused.value)

        env = {**os.environ, "LEDGER_PASSWORD": LEDGER_PASSWORD, "LEDGER_OPERATOR_SECRET_FILE": str(secret_file),
               "LEDGER_METADATA_URI": zk_uri}
        tls = ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.client.cert), "--tls-key", str(certs.client.key)]
        read = _cli([*tls, "readledger", str(w.ledger_id.id)], env, cli_pids, ps_seen)
        assert read.returncode == 0 and "entry 19" in read.stdout, read.stderr
        gone = _cli([*tls, "deleteledger", str(doomed.ledger_id.id), "--force"], env, cli_pids, ps_seen)
        assert gone.returncode == 0, gone.stderr
        stats = _cli([*tls, "bookieinfo", "--json"], env, cli_pids, ps_seen)  # needs the operator identity
        assert stats.returncode == 0, stats.stderr
        # The CLI's errors: a metadata URI with wrong ZooKeeper credentials.
        bad_env = {**env, "LEDGER_METADATA_URI": with_zk_auth(zk_uri, "digest:ledger:wrong-" + ZK_SECRET)}
        refused_cli = _cli([*tls, "listledgers"], bad_env, cli_pids, ps_seen)
        assert refused_cli.returncode == 1 and "NoAuth" in refused_cli.stderr
        texts += [p.stdout + p.stderr for p in (read, gone, stats, refused_cli)]
        ps_seen.append(_ps_args([b.proc.pid for b in cluster.bookies if b.proc is not None]))
    logs = [b.log_path.read_text(errors="replace") for b in cluster.bookies]
    assert all("bookie serving" in log for log in logs)
    haystacks = {"ps": "\n".join(ps_seen), "bookie logs": "\n".join(logs), "messages and CLI output": "\n".join(texts),
                 "this process's log records": caplog.text}
    hits = {(where, secret) for where, text in haystacks.items() for secret in SECRETS if secret in text}
    assert hits == set(), hits
    assert "zk_auth=***" in "\n".join(texts)  # the redacted URI was shown, not left out
    assert "Auth(<redacted>)" in caplog.text  # kazoo's DEBUG log of its Auth request was scanned
