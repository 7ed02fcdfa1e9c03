"""ZooKeeper exactly as docs/deployment.md (step 2) runs it: the doc's one `java ...
QuorumPeerMain` command, read from the doc itself, on the configuration files it ships in
examples/zookeeper/. Only the values under a `# change:` comment of those files are replaced (data
directories, the hosts' addresses, ports); every other line is the shipped one."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from pyspark_ledger.testing.zookeeper_server import four_letter, free_port

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "deployment.md"
EXAMPLES = REPO / "examples" / "zookeeper"
DOC_CONFIG_PATH = "/etc/zookeeper/zoo.cfg"  # where the doc copies the file its command starts
DOC_PORTS = {"quorum": "2888", "election": "3888", "client": "2181"}
START_WAIT_S = 90.0
STOP_WAIT_S = 15.0


def doc_start_command(doc: Path = DOC) -> list[str]:
    """The doc's start command (backslash continuations joined); the doc gives one for both shapes."""
    text = doc.read_text().replace("\\\n", " ")
    commands = {line.strip() for line in text.splitlines() if line.strip().startswith("java ") and "QuorumPeerMain" in line}
    assert len(commands) == 1, f"{doc.name}: expected one ZooKeeper start command, found {sorted(commands)}"
    argv = shlex.split(commands.pop())
    assert argv[-1] == DOC_CONFIG_PATH, argv
    for shape in ("zoo-single.cfg", "zoo-ensemble.cfg"):
        assert f"cp examples/zookeeper/{shape} {DOC_CONFIG_PATH}" in text, f"{doc.name} does not install {shape}"
    return argv


def _marked_keys(text: str) -> set[str]:
    """Keys of the lines under a `# change:` comment (which may go on over more comment lines), up
    to the next comment or blank line."""
    marked, under_mark, in_comment = set(), False, False
    for line in text.splitlines():
        if line.startswith("#"):
            under_mark = line.startswith("# change:") or (under_mark and in_comment)
            in_comment = True
            continue
        in_comment = False
        if not line.strip():
            under_mark = False
        elif under_mark:
            marked.add(line.split("=", 1)[0])
    return marked


def substitute(source: Path, values: dict[str, str]) -> str:
    """The file with the given keys' values replaced; each must be one the file marks to change."""
    text = source.read_text()
    unmarked = set(values) - _marked_keys(text)
    assert not unmarked, f"{source.name}: {sorted(unmarked)} are not marked '# change:'"
    lines, replaced = [], set()
    for line in text.splitlines():
        key = line.split("=", 1)[0]
        if not line.startswith("#") and "=" in line and key in values:
            replaced.add(key)
            line = f"{key}={values[key]}"
        lines.append(line)
    assert replaced == set(values), f"{source.name} has no {sorted(set(values) - replaced)}"
    return "\n".join(lines) + "\n"


def single_config(work_dir: Path) -> Path:
    """examples/zookeeper/zoo-single.cfg with its own data directory and a free client port."""
    data = work_dir / "data"
    data.mkdir(parents=True)
    cfg = work_dir / "zoo.cfg"
    cfg.write_text(substitute(EXAMPLES / "zoo-single.cfg", {"dataDir": str(data), "clientPort": str(free_port())}))
    return cfg


def ensemble_config(work_dir: Path, hosts: tuple[str, ...]) -> dict[str, Path]:
    """examples/zookeeper/zoo-ensemble.cfg for each host (zk1, zk2, zk3 become `hosts`, the doc's
    ports free ones, the same on every host as in the doc), with the doc's myid file. host -> path."""
    ports = {role: str(free_port()) for role in DOC_PORTS}
    source_text = (EXAMPLES / "zoo-ensemble.cfg").read_text()
    servers = {}
    for number, host in enumerate(hosts, start=1):
        line = re.search(rf"^server\.{number}=(.*)$", source_text, re.MULTILINE)
        assert line is not None, f"zoo-ensemble.cfg has no server.{number}"
        value = line.group(1).replace(f"zk{number}:", f"{host}:")
        for role, doc_port in DOC_PORTS.items():
            value = value.replace(f":{doc_port}", f":{ports[role]}")
        assert value == f"{host}:{ports['quorum']}:{ports['election']};{host}:{ports['client']}", value
        servers[f"server.{number}"] = value
    configs = {}
    for number, host in enumerate(hosts, start=1):
        data = work_dir / f"zk{number}"
        data.mkdir(parents=True)
        (data / "myid").write_text(f"{number}\n")  # `echo 1 | sudo tee /var/lib/zookeeper/myid`
        cfg = work_dir / f"zoo{number}.cfg"
        cfg.write_text(substitute(EXAMPLES / "zoo-ensemble.cfg", {"dataDir": str(data), **servers}))
        configs[host] = cfg
    return configs


def _own_client_address(cfg: Path) -> tuple[str, int]:
    """Where this server takes clients: its own server.<myid> line, or clientPortAddress:clientPort."""
    settings = dict(line.split("=", 1) for line in cfg.read_text().splitlines() if "=" in line and not line.startswith("#"))
    myid = Path(settings["dataDir"], "myid")
    if myid.exists():
        host, port = settings[f"server.{myid.read_text().strip()}"].split(";", 1)[1].rsplit(":", 1)
    else:
        host, port = settings["clientPortAddress"], settings["clientPort"]
    return host, int(port)


class DocZooKeeper:
    """One server started with the doc's command on `cfg`; stopped by its PID only."""

    def __init__(self, cfg: Path, log_path: Path):
        self.argv = [*doc_start_command()[:-1], str(cfg)]
        self.host, self.client_port = _own_client_address(cfg)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self) -> DocZooKeeper:
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def mode(self) -> str:
        """'standalone', 'leader', 'follower', or '' while it does not serve."""
        try:
            reply = four_letter(self.client_port, "srvr", timeout_s=1.0, host=self.host)
        except OSError:
            return ""
        return next((line.split(":", 1)[1].strip() for line in reply.splitlines() if line.startswith("Mode:")), "")

    @staticmethod
    def wait_ensemble(servers: list[DocZooKeeper], timeout_s: float = START_WAIT_S) -> dict[str, str]:
        """Wait until every server serves (an ensemble: with one leader); address -> mode."""
        deadline = time.monotonic() + timeout_s
        while True:
            for zk in servers:
                assert zk.proc is not None and zk.proc.poll() is None, \
                    f"ZooKeeper {zk.address} exited:\n{zk.log_path.read_text(errors='replace')[-3000:]}"
            modes = {zk.address: zk.mode() for zk in servers}
            if all(modes.values()) and (len(servers) == 1 or list(modes.values()).count("leader") == 1):
                return modes
            assert time.monotonic() < deadline, f"ZooKeeper not serving after {timeout_s:g} s: {modes}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_WAIT_S)
        self.proc = None
