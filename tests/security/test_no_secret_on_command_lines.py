"""Issue 31, item 4: no secret on any command line. A real bookie whose config file holds a
metadata URI with the ZooKeeper secret (zk_auth=digest:...) and `autorecovery = true` starts its
`ledger autorecovery` child; once the child works (it was elected auditor on the ACL-protected
ZooKeeper, so it had the secret), no process's /proc/PID/cmdline holds the secret, while the
child's environment (readable only by its owner) does. The same for LocalCluster's bookies given
such a URI (the helper docs/spark.md and README.md tell users to use)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bookie.autorecovery_child import METADATA_URI_ENV, OPERATOR_SECRET_FILE_ENV
from metadata.uri import ZK_AUTH_ENV, parse_metadata_uri
from pyspark_ledger.cli.app import ENV_URI
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper, free_port
from pyspark_ledger.transport.credentials import SECRET_FILE_ENV
from tests.security.uri_helpers import uri_with_zk_auth as with_zk_auth

ZK_SECRET = "zk-cmdline-secret-5c2e9a71"
WAIT_S = 180.0  # a shared 2-core machine: the child imports the client, then joins ZooKeeper
STOP_TIMEOUT_S = 30.0


def all_command_lines() -> dict[int, bytes]:
    """Every process's /proc/PID/cmdline (processes that exit meanwhile are left out)."""
    found: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:  # exited between listdir and open, or not ours to read
                continue
    return found


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4, after the (comm)
                out.append(int(entry))
    return out


def wait_for_line(log_path: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        content = log_path.read_text(errors="replace") if log_path.exists() else ""
        if text in content:
            return
        assert proc.poll() is None, f"bookie exited with {proc.returncode}:\n{content[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {log_path} after {WAIT_S:g} s:\n{content[-3000:]}")


def assert_no_command_line_holds(secret: str, must_cover: list[int]) -> None:
    lines = all_command_lines()
    assert set(must_cover) <= set(lines), (must_cover, "not all processes were read")
    hits = {pid: line.replace(b"\0", b" ")[:300] for pid, line in lines.items() if secret.encode() in line}
    assert hits == {}, hits


def test_the_variable_names_the_bookie_sets_are_the_ones_the_client_reads() -> None:
    assert (METADATA_URI_ENV, OPERATOR_SECRET_FILE_ENV) == (ENV_URI, SECRET_FILE_ENV)


def test_the_settings_without_secrets_keep_everything_but_the_credentials() -> None:
    uri = f"zk://127.0.0.1:2181/ledgers?session_timeout_ms=5000&zk_auth=digest:u:{ZK_SECRET}&tls_ca=/x/ca.pem"
    settings = parse_metadata_uri(uri)
    assert settings.zk_auth is not None and settings.zk_auth.reveal() == f"digest:u:{ZK_SECRET}"
    assert str(settings.without_secrets()) == "zk://127.0.0.1:2181/ledgers?session_timeout_ms=5000&tls_ca=/x/ca.pem"
    assert parse_metadata_uri(str(settings.without_secrets())) == settings.without_secrets()
    assert parse_metadata_uri("zk://127.0.0.1:2181/ledgers").zk_auth is None


def test_a_bookie_with_the_secret_in_its_config_file_starts_autorecovery_without_it_on_a_command_line(
        zk_server: LocalZooKeeper, zk_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ZK_AUTH_ENV, raising=False)  # the secret is in the config file only
    monkeypatch.delenv(ENV_URI, raising=False)
    uri = with_zk_auth(zk_uri, f"digest:ledger:{ZK_SECRET}")
    port = free_port()
    config = tmp_path / "bookie.toml"
    config.touch(mode=0o600)
    config.write_text(f'metadata_uri = "{uri}"\ndata_dir = "{tmp_path / "data"}"\nhost = "127.0.0.1"\n'
                      f'port = {port}\nbookie_id = "127.0.0.1:{port}"\nautorecovery = true\n'
                      "lost_bookie_grace_s = 5.0\n")
    log_path = tmp_path / "bookie.log"
    with open(log_path, "ab") as logf:
        bookie = subprocess.Popen([sys.executable, "-m", "bookie.server", "--config", str(config)],
                                  stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_line(log_path, "autorecovery started next to the bookie", bookie)
        # The child only gets this far with the secret: the bookie's nodes carry a digest ACL.
        wait_for_line(log_path, "elected autorecovery auditor", bookie)
        children = [pid for pid in children_of(bookie.pid)
                    if b"autorecovery" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(children) == 1, children
        assert_no_command_line_holds(ZK_SECRET, [bookie.pid, *children])
        # Where it went instead: the child's environment, which only its owner (and root) reads.
        assert ZK_SECRET.encode() in Path(f"/proc/{children[0]}/environ").read_bytes()
    finally:
        bookie.terminate()
        bookie.wait(timeout=STOP_TIMEOUT_S)
    log = log_path.read_text(errors="replace")
    assert ZK_SECRET not in log and "bookie serving" in log


def test_local_cluster_bookies_keep_the_uris_secret_off_their_command_lines(
        zk_server: LocalZooKeeper, zk_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ZK_AUTH_ENV, raising=False)
    uri = with_zk_auth(zk_uri, f"digest:ledger:{ZK_SECRET}")
    with LocalCluster(1, metadata_uri=uri, work_dir=tmp_path / "cluster", bookie_args=["--autorecovery"]) as cluster:
        bookie = cluster.bookies[0]
        assert bookie.proc is not None
        wait_for_line(bookie.log_path, "elected autorecovery auditor", bookie.proc)
        assert_no_command_line_holds(ZK_SECRET, [bookie.proc.pid, *children_of(bookie.proc.pid)])
