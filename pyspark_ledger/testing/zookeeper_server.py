"""Run Debian's ZooKeeper as a standalone server on 127.0.0.1, for tests, benchmarks and demos.

It binds only to loopback, keeps its data in a temporary directory, turns the AdminServer off,
waits until the server really serves (`srvr` reports a mode, not just `ruok`), and stops exactly the
process it started. Every wait is bounded.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError

log = logging.getLogger(__name__)

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar",)
OPTIONAL_JARS = ("/usr/share/java/slf4j-simple.jar",)
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# zoo.cfg line that makes the server accept SASL logins and check `sasl:<user>` ACLs (the JAAS file
# named by -Djava.security.auth.login.config says who may log in).
SASL_AUTH_PROVIDER_LINE = "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


class ZooKeeperNotInstalled(PySparkLedgerError, RuntimeError):
    pass


# Ports handed out by free_port come from [PORT_FLOOR, the kernel's ephemeral range).
PORT_FLOOR = 10_000
_PORT_PICKS_MAX = 200
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A loopback port for a server this process is about to start. Picked below the kernel's
    ephemeral range (ip_local_port_range), where the kernel never assigns a port by itself: a
    port taken from bind(0) would be free again at once, and another bind(0) (a bookie's add
    listener, say) or an outgoing connection could take it before our server binds it. Never
    the same port twice in one process. Where the range is unknown, the kernel's choice."""
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 0
    if ephemeral_low > PORT_FLOOR + 1_000:
        low, high = _worker_slice(PORT_FLOOR, ephemeral_low)
        for _ in range(_PORT_PICKS_MAX):
            port = random.randrange(low, high)
            with _handed_out_lock:
                if port in _handed_out or not _bindable(port):
                    continue
                _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of [low, high): workers never hand out the same port, so a
    server one worker stops and restarts on its port (a bookie, ZooKeeper) cannot lose it to a
    server of another worker in between. Outside xdist: the whole range."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return low, high
    index, width = int(worker[2:]), (high - low) // int(count)
    return low + index * width, low + (index + 1) * width


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: a port with lingering connections is skipped
        except OSError:
            return False
    return True


def four_letter(port: int, cmd: str, timeout_s: float = 2.0, host: str = "127.0.0.1") -> str:
    """Send a four-letter command; a command sent during start-up can hang, so always time out."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(cmd.encode())
        chunks = []
        while True:
            try:
                data = s.recv(4096)
            except TimeoutError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode(errors="replace")


class LocalZooKeeper:
    """A standalone ZooKeeper server this process owns."""

    def __init__(
        self,
        work_dir: str | Path | None = None,
        *,
        port: int | None = None,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 20000,
        quorum: list[tuple[int, int, int]] | None = None,
        my_id: int = 0,
        sasl_users: dict[str, str] | None = None,
    ):
        """sasl_users: {user: secret} of a JAAS `Server` section (DigestLoginModule): the server then
        accepts SASL DIGEST-MD5 logins of these users and enforces `sasl:<user>` ACLs. None: no SASL
        (the default, which the rest of the test suite runs on)."""
        for jar in ZOOKEEPER_JARS:
            if not os.path.exists(jar):
                raise ZooKeeperNotInstalled(
                    f"{jar} not found: install Debian's zookeeper package (apt-get install -y zookeeper)"
                )
        if shutil.which("java") is None:
            raise ZooKeeperNotInstalled("java not found: install a JRE (apt-get install -y openjdk-17-jre-headless)")
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="zk-"))
        self.port = port or free_port()
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        # Ensemble member: (client, quorum, election) ports of every server, and this one's id (1-based).
        self.quorum = quorum
        self.my_id = my_id
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.work_dir / "zookeeper.log"
        self.sasl_users = dict(sasl_users) if sasl_users else None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, root: str = "/ledgers") -> str:
        return f"zk://{self.hosts}{root}"

    def _write_config(self) -> Path:
        data = self.work_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,stat",
                    "maxClientCnxns=0",
                    f"minSessionTimeout={self.min_session_timeout_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    # Fsync every transaction as production does.
                    "forceSync=yes",
                    *self._quorum_lines(data),
                    *([SASL_AUTH_PROVIDER_LINE] if self.sasl_users else []),
                    "",
                ]
            )
        )
        return cfg

    def _quorum_lines(self, data: Path) -> list[str]:
        if not self.quorum:
            return []
        (data / "myid").write_text(f"{self.my_id}\n")
        lines = ["initLimit=10", "syncLimit=5", "quorumListenOnAllIPs=false"]
        for i, (_, quorum_port, election_port) in enumerate(self.quorum, start=1):
            lines.append(f"server.{i}=127.0.0.1:{quorum_port}:{election_port}")
        return lines

    def _write_jaas(self) -> Path:
        """The server's JAAS login configuration: one `Server` section with DigestLoginModule users.
        Owner-only, as it holds the secrets."""
        assert self.sasl_users
        entries = []
        for user, secret in self.sasl_users.items():
            # What Java's JAAS file parser takes as an option name and a quoted value.
            if not re.fullmatch(r"[A-Za-z0-9_.]+", user) or any(c in secret for c in '"\\\n'):
                raise ValueError("SASL user names are letters, digits, _ and .; secrets have no quotes, backslashes or newlines")
            entries.append(f'    user_{user}="{secret}"')
        jaas = self.work_dir / "jaas.conf"
        jaas.touch(mode=0o600)
        jaas.write_text("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                        + "\n".join(entries) + ";\n};\n")
        return jaas

    def mode(self) -> str:
        """'standalone', 'leader', 'follower', or '' when it does not serve (yet)."""
        try:
            for line in four_letter(self.port, "srvr", timeout_s=1.0).splitlines():
                if line.startswith("Mode:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return ""

    def kill(self) -> None:
        """kill -9 the one process this object started (a crash, not a clean stop)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def start(self) -> LocalZooKeeper:
        # A second start would orphan the first process (this object stops only the one it holds).
        assert self.proc is None or self.proc.poll() is not None, f"ZooKeeper {self.hosts} is already started"
        cfg = self._write_config()
        classpath = ":".join(list(ZOOKEEPER_JARS) + [j for j in OPTIONAL_JARS if os.path.exists(j)])
        cmd = [
            "java", "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            *([f"-Djava.security.auth.login.config={self._write_jaas()}"] if self.sasl_users else []),
            "-cp", classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.quorum
            else "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(cfg),
        ]
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        logf.close()
        if self.quorum:
            return self  # an ensemble member serves only once a quorum is up: the ensemble waits
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode} during start:\n{self.tail_log()}")
            try:
                if "Mode: standalone" in four_letter(self.port, "srvr", timeout_s=1.0):
                    log.info("ZooKeeper serving port=%d pid=%d", self.port, self.proc.pid)
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve on {self.hosts} within {START_TIMEOUT_S:g} s:\n{self.tail_log()}")

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the one process this object started (never anything else)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalZooKeeperEnsemble:
    """Three (or `size`) ZooKeeper servers on 127.0.0.1, each with its own client, quorum and
    election ports and its own data directory; clients connect with all of them in the string."""

    def __init__(self, work_dir: str | Path, size: int = 3, *, sasl_users: dict[str, str] | None = None, **kwargs: int):
        ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
        self.members = [
            LocalZooKeeper(Path(work_dir) / f"zk{i}", port=ports[i - 1][0], quorum=ports, my_id=i,
                           sasl_users=sasl_users, **kwargs)
            for i in range(1, size + 1)
        ]

    @property
    def hosts(self) -> str:
        return ",".join(m.hosts for m in self.members)

    def uri(self, root: str = "/ledgers") -> str:
        return f"zk://{self.hosts}{root}"

    def start(self) -> LocalZooKeeperEnsemble:
        for m in self.members:
            m.work_dir.mkdir(parents=True, exist_ok=True)
            m.start()
        self.wait_serving(len(self.members))
        return self

    def wait_serving(self, count: int, timeout_s: float = START_TIMEOUT_S) -> LocalZooKeeper:
        """Wait until `count` members serve with one leader among them; return the leader."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            modes = {m: m.mode() for m in self.members if m.proc is not None}
            leaders = [m for m, mode in modes.items() if mode == "leader"]
            if len(leaders) == 1 and sum(1 for mode in modes.values() if mode in ("leader", "follower")) >= count:
                return leaders[0]
            time.sleep(0.1)
        tails = "\n".join(m.tail_log(15) for m in self.members)
        raise RuntimeError(f"ZooKeeper ensemble {self.hosts}: no leader with {count} serving in {timeout_s:g} s:\n{tails}")

    def leader(self) -> LocalZooKeeper:
        return self.wait_serving(1)

    def close(self) -> None:
        for m in self.members:
            m.close()

    def __enter__(self) -> LocalZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def expire_session(hosts: str, client_id: tuple[int, bytes], timeout_s: float = 10.0) -> None:
    """Expire a ZooKeeper session from outside: a second client joins it with the same id and
    password, then closes it, which ends the session for the original client too."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=hosts, client_id=client_id, timeout=timeout_s)
    other.start(timeout=timeout_s)
    other.stop()
    other.close()
