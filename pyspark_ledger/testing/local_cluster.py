"""Real `bookie` processes on loopback, for the quickstart, tests and benchmarks.

`LocalBookie` runs one bookie process and stops (or kills) exactly that process.
`LocalCluster` runs N bookies against one metadata service (by default an embedded SQLite
store in its own directory) and cleans everything up at exit.
`LocalCluster.embedded()` is the quickstart's cluster: the embedded default store (the one
`format("ledger")` uses when no metadataServiceUri is given) and bookies with stable ids and
data dirs under the same home, so what one run writes the next can read.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from metadata.errors import InvalidUriError
from metadata.uri import ZK_AUTH_ENV, parse_metadata_uri
from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.testing.spark_executor_env import executor_env_key
from pyspark_ledger.testing.zookeeper_server import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pyspark_ledger.testing.certs import CertificateSet

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class BookieStartError(PySparkLedgerError, RuntimeError):
    pass


@dataclass(frozen=True)
class BookieLauncher:
    """How a LocalBookie's process starts: the program before the bookie's flags, its environment
    (None: this process's) and working directory. The default runs the code this process imports;
    OldRelease.launcher() runs a previous release (pyspark_ledger.testing.old_release)."""

    program: tuple[str, ...] = (sys.executable, "-m", "bookie.server")
    env: dict[str, str] | None = None
    cwd: str | None = None


def _without_zk_auth(uri: str) -> tuple[str, str | None]:
    """The URI for a bookie's command line, and its zk_auth for the environment (None: it has none).
    A URI that does not parse goes as it is: the bookie's own refusal of it is what a test sees."""
    try:
        settings = parse_metadata_uri(uri)
    except InvalidUriError:
        return uri, None
    return str(settings.without_secrets()), None if settings.zk_auth is None else settings.zk_auth.reveal()


class LocalBookie:
    def __init__(
        self,
        metadata_uri: str,
        data_dir: str | Path,
        *,
        port: int | None = None,
        bookie_id: str | None = None,
        extra_args: list[str] | None = None,
        log_path: str | Path | None = None,
        client_tls: dict[str, str] | None = None,
        launcher: BookieLauncher | None = None,
    ):
        """client_tls: tls_ca/tls_cert/tls_key to reach a TLS bookie (the readiness check).
        launcher: how the process starts (a test may swap it between stop and start: an upgrade)."""
        self.client_tls = client_tls or {}
        self.launcher = launcher or BookieLauncher()
        self.metadata_uri = metadata_uri
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.bookie_id = bookie_id or f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"bookie-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The bookie's command line: the metadata URI without its zk_auth (environment())."""
        return [
            *self.launcher.program,
            "--metadata-uri", _without_zk_auth(self.metadata_uri)[0], "--data-dir", str(self.data_dir),
            "--host", "127.0.0.1", "--port", str(self.port), "--bookie-id", self.bookie_id,
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        """The bookie's environment: ours, plus the URI's ZooKeeper credentials as LEDGER_ZK_AUTH,
        which the bookie reads when its URI carries none (never on a command line, where every
        local user can read them)."""
        base = self.launcher.env if self.launcher.env is not None else os.environ
        auth = _without_zk_auth(self.metadata_uri)[1]
        return {**base, ZK_AUTH_ENV: auth} if auth is not None else dict(base)

    def start(self, wait: bool = True) -> LocalBookie:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.environment(), cwd=self.launcher.cwd)
        logf.close()
        if wait:
            self.wait_serving()
        return self

    def wait_serving(self, timeout_s: float = START_TIMEOUT_S) -> None:
        from pyspark_ledger.errors import BookieUnavailableError
        from pyspark_ledger.transport.bookie_client import BookieClient
        from pyspark_ledger.transport.tls import TlsSettings

        deadline = time.monotonic() + timeout_s
        client = BookieClient(self.bookie_id, self.address, rpc_timeout_s=1.0,
                              tls=TlsSettings.from_values(*(self.client_tls.get(k) for k in ("tls_ca", "tls_cert", "tls_key"))))
        try:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise BookieStartError(f"bookie {self.bookie_id} exited with {code}:\n{self.tail_log()}")
                try:
                    client.info(timeout_s=1.0)
                    return
                except BookieUnavailableError:
                    if time.monotonic() > deadline:
                        raise BookieStartError(
                            f"bookie {self.bookie_id} not serving after {timeout_s:g} s:\n{self.tail_log()}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def run_to_exit(self, timeout_s: float = START_TIMEOUT_S) -> tuple[int, str]:
        """Start and wait for the process to exit by itself (for refused starts). Returns (code, log)."""
        self.start(wait=False)
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.proc = None
        return code, self.log_path.read_text(errors="replace")

    def tail_log(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """Graceful stop (SIGTERM: deregister, drain, checkpoint)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("bookie did not stop in time, killing bookie=%s", self.bookie_id)
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        code = self.proc.returncode
        self.proc = None
        return code

    def terminate(self) -> None:
        """Send SIGTERM and return: stop() then waits (a cluster stops its bookies in parallel)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """kill -9: no deregistration, no checkpoint, no flush."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def restart(self) -> LocalBookie:
        self.stop()
        return self.start()



def wait_registered(metadata_uri: str, bookie_ids: list[str], timeout_s: float = START_TIMEOUT_S) -> None:
    """A bookie serves first and registers just after (bookie/server.py): wait, bounded, until
    each of `bookie_ids` is in the registry. A test's first create must find every bookie (on a
    loaded machine one found 2 of 3), and a test that stops ZooKeeper must not catch a bookie
    still registering."""
    from metadata.registry import BookieRegistry
    from metadata.uri import open_store

    wanted = set(bookie_ids)
    store = open_store(metadata_uri)
    try:
        registry = BookieRegistry(store)
        deadline = time.monotonic() + timeout_s
        while missing := wanted - {info.bookie_id for info in registry.list()}:
            if time.monotonic() > deadline:
                raise BookieStartError(f"bookies serving but not registered within {timeout_s:g} s: "
                                       f"{', '.join(sorted(missing))}")
            time.sleep(0.05)
    finally:
        store.close()

class LocalCluster:
    """N local bookies and a metadata service; `with LocalCluster(3) as c: c.metadata_uri`."""

    def __init__(
        self,
        num_bookies: int = 3,
        *,
        metadata_uri: str | None = None,
        work_dir: str | Path | None = None,
        bookie_args: list[str] | None = None,
        bookie_id_prefix: str | None = None,
        tls: bool = False,
        tls_client_auth: bool = False,
    ):
        """bookie_id_prefix: name bookies <prefix><i> (stable across restarts, addresses come from
        the registry) instead of by their random loopback address. tls: TLS bookies with test
        certificates made under work_dir/tls (self.certs); tls_client_auth: mutual TLS. Clients
        then connect with `LedgerClient(c.metadata_uri, **c.client_tls)`."""
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="ledger-cluster-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.metadata_uri = metadata_uri or f"sqlite://{self.work_dir / 'metadata.db'}"
        self.bookie_args = bookie_args or []
        self.certs: CertificateSet | None = None
        self.client_tls: dict[str, str] = {}
        if tls or tls_client_auth:
            self._enable_tls(tls_client_auth)
        self.bookies: list[LocalBookie] = []
        self.bookie_id_prefix = bookie_id_prefix
        self._num = num_bookies
        self._atexit_registered = False

    @classmethod
    def embedded(cls, num_bookies: int = 3, *, home: str | Path | None = None,
                 bookie_args: list[str] | None = None) -> LocalCluster:
        """Bookies on the embedded default store: metadata at <home>/metadata.db (home: the
        PYSPARK_LEDGER_HOME environment variable, else ~/.pyspark-ledger), bookie data under
        <home>/bookies. Processes stop at exit (call start(), or use `with`); the data stays, so
        delete the home directory to start from nothing."""
        from metadata.embedded_store import embedded_path_from_env_default

        db = Path(home) / "metadata.db" if home is not None else embedded_path_from_env_default()
        db.parent.mkdir(parents=True, exist_ok=True)
        return cls(num_bookies, metadata_uri=f"sqlite://{db}", work_dir=db.parent / "bookies",
                   bookie_args=bookie_args, bookie_id_prefix="bookie-")

    def _enable_tls(self, client_auth: bool) -> None:
        from pyspark_ledger.testing.certs import make_test_certificates

        certs = self.certs = make_test_certificates(self.work_dir / "tls")
        self.bookie_args = [*self.bookie_args, "--tls-cert", str(certs.bookie.cert), "--tls-key", str(certs.bookie.key),
                            "--tls-ca", str(certs.ca), *(["--tls-client-auth"] if client_auth else [])]
        self.client_tls = {"tls_ca": str(certs.ca), "tls_cert": str(certs.client.cert), "tls_key": str(certs.client.key)}

    def add_bookie(self, start: bool = True, extra_args: list[str] | None = None) -> LocalBookie:
        i = len(self.bookies)
        b = LocalBookie(
            self.metadata_uri, self.work_dir / f"bookie-{i}", extra_args=self.bookie_args + (extra_args or []),
            log_path=self.work_dir / f"bookie-{i}.log",
            bookie_id=None if self.bookie_id_prefix is None else f"{self.bookie_id_prefix}{i}",
            client_tls=self.client_tls,
        )
        self.bookies.append(b)
        if start:
            b.start()
        return b

    def start(self) -> LocalCluster:
        if not self._atexit_registered:
            atexit.register(self.close)
            self._atexit_registered = True
        # Start processes in parallel (each takes ~1 s to import), then wait for all.
        new = [self.add_bookie(start=False) for _ in range(self._num - len(self.bookies))]
        for b in new:
            b.start(wait=False)
        try:
            for b in new:
                b.wait_serving()
            wait_registered(self.metadata_uri, [b.bookie_id for b in new])
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        # All bookies drain at once: the whole cluster stops within one bookie's STOP_TIMEOUT_S.
        for b in self.bookies:
            b.terminate()
        for b in self.bookies:
            try:
                b.stop()
            except Exception:  # keep stopping the others
                log.exception("stopping bookie failed")
        if self._own_dir and os.environ.get("LEDGER_KEEP_CLUSTER") != "1":
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# glibc gives every thread that allocates an arena of its own, and hands an arena's freed
# heaps back to the kernel. A Python worker reading ledgers receives 8-16 MiB responses on
# short-lived fetch threads and gRPC's threads, so each task touched its buffers' pages anew:
# 8-30k page faults and 0.1-0.4 s of system CPU per 1M-row task. With one arena the main heap
# keeps them (30-50 faults per task). Only the environment at a process's start sets this, so
# it is an executor setting (README, "Spark": "Executor setting for reads").
READER_EXECUTOR_ENV = {"spark.executorEnv.MALLOC_ARENA_MAX": "1"}


# Spark's session setting without which no Python data source may take filters (PySpark 4.1+);
# a data source cannot read it, so a read that asks for pushdown (pushFilters=true) needs both.
SPARK_PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


def local_spark_session(app_name: str, *, master: str = "local[2]", log_level: str = "WARN",
                        conf: dict[str, str] | None = None,
                        executor_env: Mapping[str, str] | None = None) -> SparkSession:
    """A local SparkSession on loopback only (by default Spark binds to the host's first
    non-loopback address), without the web UI, with small shuffles, with the executor settings
    recommended for reading ledgers (READER_EXECUTOR_ENV, unless the environment already sets
    MALLOC_ARENA_MAX), with Python data sources' filter pushdown on (SPARK_PUSHDOWN_SETTING: the
    `ledger` source's option pushFilters=true needs it), plus `conf` (which wins), and with the `ledger` source registered by
    hand (works for every kind of install; see README "Spark"). `executor_env` goes to the
    executors' Python workers as `spark.executorEnv.*` settings (an `s3://` offload store's
    LEDGER_S3_ENDPOINT and AWS variables: a worker's environment is its JVM's, fixed when that
    started, plus these; docs/tiered-storage.md "Spark on S3"); `conf` wins over it too. Imports
    pyspark here, so the rest of this module stays usable without it."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
    )
    # A variable already in the environment reaches the workers as it is: the operator's choice.
    settings = {key: value for key, value in READER_EXECUTOR_ENV.items()
                if key.removeprefix("spark.executorEnv.") not in os.environ}
    settings[SPARK_PUSHDOWN_SETTING] = "true"
    settings.update({executor_env_key(k): v for k, v in (executor_env or {}).items()})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register_ledger_source(spark)
    return spark


def register_ledger_source(spark: SparkSession) -> bool:
    """Register the `ledger` source by hand unless Spark already found it by itself (it imports
    every top-level `pyspark_*` module on its Python workers' path and takes DefaultSource):
    registering over that static source works too, but Spark then logs "The data source ledger
    replaced a statically registered data source" at WARN on every start. Returns whether it
    registered. The check asks the session's DataSourceManager over py4j (Spark 4.0+, classic
    sessions); where that is not reachable, it registers."""
    from pyspark_ledger.datasource.source import LedgerDataSource

    try:
        found = bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("ledger"))
    except Exception as exc:  # noqa: BLE001 - any failure of the probe means "register to be sure"
        log.debug("could not ask Spark whether it found the ledger source error=%r", exc)
        found = False
    if not found:
        spark.dataSource.register(LedgerDataSource)
    return not found
