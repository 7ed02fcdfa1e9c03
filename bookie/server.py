"""The `bookie` command: a storage server on gRPC that registers itself in metadata.

Start-up order matters: verify the cookie (identity) before opening storage, open storage
(replaying the journal) before serving, serve before registering (so nobody is sent to a bookie
that cannot answer). Shutdown on SIGTERM/SIGINT is the reverse: deregister, stop serving with a
grace period, close storage (checkpoint).
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from bookie.grpc_runtime import apply_grpc_tuning

apply_grpc_tuning()  # before gRPC is imported and initialised (see bookie/grpc_runtime.py)

import grpc

from bookie import config as limits
from bookie.add_listener import AddListener
from bookie.admin import install_storage_metrics
from bookie.auth import auth_policy
from bookie.autorecovery_child import start_autorecovery_child, stop_autorecovery_child
from bookie.config import BookieConfig, ConfigError, build_parser, config_from_args, installed_version
from bookie.cookie import CookieMismatchError, delete_cookie, verify_or_create_cookie
from bookie.disk_monitor import DiskMonitor
from bookie.format_follower import FormatFollower
from bookie.gc_service import start_gc
from bookie.ledger_owner import LedgerOwners
from bookie.long_polls import LongPolls
from bookie.malloc_tuning import tune_malloc
from bookie.metrics import Metrics, serve_metrics
from bookie.proto.versions import WIRE_VERSION_MAX, WIRE_VERSION_MIN
from bookie.run_answer import register_bookie_service
from bookie.scrub_service import start_scrubber
from bookie.scrubber import Scrubber
from bookie.service import BookieService
from bookie.storage import BookieStorage, StorageConfig
from bookie.storage.gc import GarbageCollector
from bookie.tls import TlsSetupError, grpc_server_credentials, server_ssl_context
from bookie.writable_again import WritableAgain
from metadata import BookieInfo, BookieRegistry, LedgerId, MetadataError, MetadataStore, open_store
from metadata.registry import BookieRegistration
from metadata.underreplication import REASON_LOST_DIRECTORY, UnderReplicationManager
from metadata.uri import parse_metadata_uri

log = logging.getLogger("bookie")

# A stop waits at most this long to remove the bookie's registration (issue 23: stop within 5 s
# whatever ZooKeeper's state).
DEREGISTER_WAIT_S = 1.5



class BookieServer:
    """A running bookie (also usable in-process by tests and LocalCluster)."""

    def __init__(self, cfg: BookieConfig):
        self.cfg = cfg
        # Parsed once: the store, the autorecovery child and every message take these settings.
        self.metadata = parse_metadata_uri(cfg.metadata_uri)
        self.store = open_store(self.metadata)
        self.metrics = Metrics()
        self.storage: BookieStorage | None = None
        self.grpc_server: grpc.Server | None = None
        self.add_listener: AddListener | None = None
        self.registration: Any = None
        self.disk_monitor: DiskMonitor | None = None
        self.writable_again: WritableAgain | None = None
        self.gc: GarbageCollector | None = None  # bookie/gc_service.py
        self.scrubber: Scrubber | None = None  # bookie/scrub_service.py
        self.metrics_server: Any = None
        self.autorecovery: Any = None  # `ledger autorecovery` as a child process (--autorecovery)
        self.format_follower: FormatFollower | None = None  # storage_format_version (docs/upgrading.md)
        self.port = cfg.port
        self.bookie_id = cfg.bookie_id or f"{cfg.host}:{cfg.port}"
        self._stopped = threading.Event()
        self._publish_lock = threading.Lock()  # the disk monitor and the journal both publish
        self.ledger_dir_monitors: dict[Path, DiskMonitor] = {}
        self._journal_dir_full = False

    def start(self) -> BookieServer:
        cfg = self.cfg
        try:
            auth = auth_policy(cfg)  # first: a bad secret file refuses the start before anything is made
            cfg.journal_directory.mkdir(parents=True, exist_ok=True)
            for d in cfg.ledger_directories:
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except OSError as exc:  # a failed disk: left out, its entries reported lost
                    log.error("ledger directory unusable dir=%s error=%r", d, exc)
            server = grpc.server(
                ThreadPoolExecutor(max_workers=cfg.grpc_workers, thread_name_prefix="grpc"),
                options=[
                    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                    ("grpc.so_reuseport", 0),
                ],
                maximum_concurrent_rpcs=cfg.grpc_max_concurrent_rpcs,
            )
            # Bind first: with --port 0 the bookie id (host:port) depends on the port we get.
            tls = (cfg.tls_cert, cfg.tls_key, cfg.tls_ca, cfg.tls_client_auth) if cfg.tls_cert and cfg.tls_key else None
            # Loaded first: it names a bad file or a key that does not match (gRPC only fails to bind).
            add_tls_context = server_ssl_context(*tls) if tls else None
            self.port = (server.add_secure_port(f"{cfg.host}:{cfg.port}", grpc_server_credentials(*tls)) if tls
                         else server.add_insecure_port(f"{cfg.host}:{cfg.port}"))
            if self.port == 0:
                raise OSError(f"cannot listen on {cfg.host}:{cfg.port}")
            self.bookie_id = cfg.bookie_id or f"{cfg.host}:{self.port}"
            cookie = verify_or_create_cookie(self.store, self.bookie_id, cfg.journal_directory, cfg.ledger_directories)
            self.storage = BookieStorage.open(_storage_config(cfg))
            mark_lost_ledgers(self.store, self.bookie_id, self.storage.lost_ledgers())
            # Before any add: the cluster setting says which on-disk format to write.
            self.format_follower = FormatFollower(self.store, self.storage.set_write_format)
            service = BookieService(self.storage, self.bookie_id, installed_version(), cookie.instance_id, self.metrics,
                                    data_dir=cfg.journal_directory, auth=auth,
                                    long_polls=LongPolls(cfg.max_long_polls, cfg.max_long_polls_per_client, self.metrics),
                                    owners=LedgerOwners(self.store) if cfg.verify_ledger_keys else None,
                                    entry_bytes_max=cfg.max_entry_size_bytes)
            register_bookie_service(service, server)  # Read's run answers are bytes already (run_answer.py)
            server.start()
            self.grpc_server = server
            if cfg.add_port >= 0:
                self.add_listener = AddListener(service.adds, cfg.host, cfg.add_port,
                                                connections_max=cfg.grpc_max_concurrent_rpcs,
                                                per_peer_max=cfg.max_connections_per_peer,
                                                idle_timeout_s=cfg.idle_connection_timeout_s,
                                                ssl_context=add_tls_context,
                                                allow_plaintext=cfg.allow_plaintext,
                                                reads=service.socket_read).start()
            self._install_gauges()
            if cfg.metrics_port is not None:
                self.metrics_server = serve_metrics(self.metrics, cfg.metrics_host, cfg.metrics_port)
            self.registration = BookieRegistry(self.store).register(self._registration_info(cookie.instance_id))
            self.writable_again = WritableAgain(self.storage, cfg.journal_directory / "journal")
            service.journal_reopens = lambda: self.writable_again.reopened if self.writable_again else 0
            self.disk_monitor = DiskMonitor(
                self.storage.disk_usage, self._set_read_only,
                cfg.disk_usage_threshold, cfg.disk_usage_lwm_threshold, cfg.disk_check_interval_s,
            )
            self._start_ledger_dir_monitors()
            # A failed journal takes no more adds: stop advertising this bookie as writable at
            # once, so that no new ensemble picks it (it keeps serving reads), until the disk
            # monitor finds room again and the journal is reopened (bookie/writable_again.py).
            self.storage.on_journal_failure(self._on_journal_failure)
            self.disk_monitor.start()
            self.gc = start_gc(self.storage, self.store, cfg, self.bookie_id)
            if cfg.autorecovery:
                self.autorecovery = start_autorecovery_child(
                    cfg.metadata_uri, cfg.lost_bookie_grace_s, cfg.operator_secret_file,
                    rereplication_rate_mb_s=cfg.rereplication_rate_mb_s)
            self.scrubber = start_scrubber(self.storage, self.store, cfg, self.bookie_id, self.metrics)
        except BaseException:
            self.stop()
            raise
        log.info("bookie serving bookie=%s address=%s:%d add_port=%s journal_dir=%s ledger_dirs=%s tls=%s",
                 self.bookie_id, cfg.host, self.port, self.add_listener.port if self.add_listener else "none",
                 cfg.journal_directory, ",".join(map(str, cfg.ledger_directories)),
                 ("mutual" if cfg.tls_client_auth else "on") if cfg.tls_cert else "off")
        return self

    def _registration_info(self, instance_id: str) -> BookieInfo:
        cfg = self.cfg
        assert self.storage is not None
        return BookieInfo(
            bookie_id=self.bookie_id,
            address=cfg.advertised_address or f"{cfg.host}:{self.port}",
            add_address=(cfg.advertised_add_address or f"{cfg.host}:{self.add_listener.port}")
            if self.add_listener else "",
            read_only=self.storage.read_only,
            version=installed_version(),
            metrics_address=f"{cfg.metrics_host}:{cfg.metrics_port}" if cfg.metrics_port else "",
            # The storage lock proves no other process serves this data dir, so a stale
            # registration with our instance id is our own previous (killed) process.
            instance_id=instance_id,
            rack=cfg.rack or "",
            wire_version_min=WIRE_VERSION_MIN,
            wire_version_max=WIRE_VERSION_MAX,
        )

    def _install_gauges(self) -> None:
        storage = self.storage
        assert storage is not None
        self.metrics.gauge("bookie_read_only", "1 when the bookie refuses adds", lambda: float(storage.read_only))
        self.metrics.gauge("bookie_uncertain", "1 when answering UNKNOWN for missing entries", lambda: float(storage.uncertain))
        self.metrics.gauge("bookie_disk_used_bytes", "used bytes on the data dir's filesystem", lambda: storage.disk_usage()[0])

        self.metrics.family("bookie_journal_fsyncs_total", "counter", "journal fsyncs (one per group commit)",
                            lambda: [({}, float(storage.stats().get("fsyncs", 0)))])
        self.metrics.storage_histogram("bookie_journal_fsync_latency_seconds",
                                       "fdatasync of one journal group commit",
                                       lambda: storage.stats().get("fsync_latency"))
        self.metrics.storage_histogram("bookie_checkpoint_latency_seconds", "one checkpoint (index snapshots, manifest)",
                                       lambda: storage.stats().get("checkpoint_latency"))
        install_storage_metrics(self.metrics, storage, self.cfg.journal_directory,
                                lambda: self.writable_again.reopened if self.writable_again else 0,
                                storage.ledger_dirs)

    @staticmethod
    def _deregister(registration: BookieRegistration) -> None:
        """Best effort, bounded: with ZooKeeper unreachable the registration goes away with the
        session anyway, so a stop never waits the whole metadata deadline for it."""

        def close() -> None:
            try:
                registration.close()
            except MetadataError as exc:
                log.warning("deregistration failed error=%s", exc)

        worker = threading.Thread(target=close, name="bookie-deregister", daemon=True)
        worker.start()
        worker.join(DEREGISTER_WAIT_S)
        if worker.is_alive():
            log.warning("deregistration still waiting for the metadata store after %.1f s: stopping anyway "
                        "(the registration ends with the session)", DEREGISTER_WAIT_S)

    def _start_ledger_dir_monitors(self) -> None:
        """One disk monitor per ledger directory of its own (one on the journal's directory is
        the journal's monitor): a full one takes no new entry log (the storage moves to another),
        and the bookie turns read-only only when all are full, or the journal's is."""
        storage, cfg = self.storage, self.cfg
        assert storage is not None and self.disk_monitor is not None
        journal = cfg.journal_directory.resolve()
        self.ledger_dir_monitors = {
            d: DiskMonitor(partial(_disk_usage, d), partial(self._set_ledger_dir_full, d), cfg.disk_usage_threshold,
                           cfg.disk_usage_lwm_threshold, cfg.disk_check_interval_s)
            for d in storage.ledger_dirs if d.resolve() != journal
        }
        monitors = self.ledger_dir_monitors
        journal_monitor = self.disk_monitor
        # ENOSPC in an entry log: full until its monitor sees the low-water mark (mark_full never blocks).
        storage.on_ledger_dir_full(lambda d: monitors.get(d, journal_monitor).mark_full())
        for monitor in monitors.values():
            monitor.start()

    def _set_ledger_dir_full(self, ledger_dir: Path, full: bool) -> bool:
        """A ledger directory's monitor verdict."""
        if self.storage is not None:
            self.storage.set_ledger_dir_full(ledger_dir, full)
            self._apply_read_only()
        return full

    def _set_read_only(self, disk_full: bool) -> bool:
        """The journal directory's monitor verdict; returns whether that directory counts as full.
        It takes adds again only once a failed journal is reopened (bookie/writable_again.py)."""
        if self.storage is None:
            return disk_full
        if not disk_full and self.writable_again is not None and not self.writable_again.attempt():
            disk_full = True
        self._journal_dir_full = disk_full
        journal = self.cfg.journal_directory.resolve()
        for d in self.storage.ledger_dirs:
            if d.resolve() == journal:  # one directory for both: its monitor is the journal's
                self.storage.set_ledger_dir_full(d, disk_full)
        self._apply_read_only()
        return disk_full

    def _apply_read_only(self) -> None:
        """Read-only while the journal's directory is full (or the journal failed), or every
        ledger directory is."""
        if self.storage is None:
            return
        self.storage.set_read_only(self._journal_dir_full or self.storage.ledger_dirs_all_full())
        self._publish_read_only()

    def _on_journal_failure(self, error: BaseException) -> None:
        """On the journal thread: read-only now, and for the disk monitor a full disk (writable
        again below the low-water mark, with the journal reopened)."""
        if self.storage is not None:
            self.storage.set_read_only(True)
        if self.disk_monitor is not None:
            self.disk_monitor.mark_full()
        self._publish_read_only()

    def _publish_read_only(self) -> None:
        """Advertise what the storage takes: read-only while the disk is full or once the journal
        failed (whichever way the disk monitor goes)."""
        if self.storage is None or self.registration is None:
            return
        with self._publish_lock:
            try:
                self.registration.set_read_only(self.storage.read_only)
            except MetadataError as exc:
                log.warning("could not publish read-only state error=%s", exc)

    def wait(self) -> None:
        # A bounded wait in a loop keeps the main thread responsive to signals.
        while not self._stopped.wait(1.0):
            pass

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        log.info("bookie stopping bookie=%s", self.bookie_id)
        if self.autorecovery is not None:
            stop_autorecovery_child(self.autorecovery)
        if self.disk_monitor is not None:
            self.disk_monitor.stop()
        for monitor in self.ledger_dir_monitors.values():
            monitor.stop()
        if self.gc is not None:
            self.gc.stop()
        if self.scrubber is not None:
            self.scrubber.stop()
        if self.registration is not None:
            self._deregister(self.registration)
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=self.cfg.shutdown_grace_s).wait(self.cfg.shutdown_grace_s + 1)
        if self.add_listener is not None:
            self.add_listener.close(timeout_s=self.cfg.shutdown_grace_s)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        if self.format_follower is not None:
            self.format_follower.close()
        if self.storage is not None:
            self.storage.close()
        self.store.close()
        self._stopped.set()



def _disk_usage(directory: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(directory)
    return usage.used, usage.total


def mark_lost_ledgers(store: MetadataStore, bookie_id: str, lost: dict[tuple[int, int], int]) -> None:
    """Ledgers with entries in a lost ledger directory: marked under-replicated for this bookie
    (metadata/underreplication.py), so that autorecovery moves their copies to another bookie, as
    for a decommissioned one. At every start while the index still points into the lost entry
    logs (a mark that no longer applies is cleared by the worker); a metadata error fails the
    start, and the next start marks them again."""
    if not lost:
        return
    marks = UnderReplicationManager(store)
    for (scope, ledger_id), entries in sorted(lost.items()):
        lid = LedgerId(scope, ledger_id)
        if marks.mark(lid, {bookie_id}, REASON_LOST_DIRECTORY, bookie_id):
            log.warning("ledger marked under-replicated: entries lost with a ledger directory ledger=%s entries=%d",
                        lid, entries)
    log.warning("lost ledger directory: %d ledgers marked under-replicated bookie=%s", len(lost), bookie_id)


def _storage_config(cfg: BookieConfig) -> StorageConfig:
    return StorageConfig(
        data_dir=cfg.journal_directory,
        ledger_dirs=cfg.ledger_directories,
        fsync=cfg.fsync,
        journal_max_group_bytes=cfg.journal_max_group_bytes,
        journal_max_group_wait_ms=cfg.journal_max_group_wait_ms,
        checkpoint_interval_s=cfg.checkpoint_interval_s,
        max_entry_size_bytes=cfg.max_entry_size_bytes,
        max_pending_add_bytes=cfg.max_pending_add_bytes,
        repair_journal=cfg.repair_journal,
        entry_log_max_bytes=cfg.entry_log_size_mb * 2**20,
        entry_log_cache_window_bytes=cfg.entry_log_cache_mb * 2**20,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        # One line, as argparse says a bad flag, without the usage text (the flags were fine).
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    tune_malloc()  # read responses are MiB-sized buffers (bookie/malloc_tuning.py)
    if args.delete_cookie:
        if not cfg.bookie_id:
            parser.error("--delete-cookie needs --bookie-id")
        with open_store(cfg.metadata_uri) as store:
            found = delete_cookie(store, cfg.bookie_id)
        print(f"cookie of bookie {cfg.bookie_id} {'deleted' if found else 'not found'}")
        return 0
    try:
        server = BookieServer(cfg).start()
    except CookieMismatchError as exc:
        log.error("refusing to start: %s", exc)
        return 1
    except (MetadataError, OSError, TlsSetupError) as exc:
        log.error("cannot start bookie: %s", exc)
        return 1
    except Exception as exc:  # noqa: BLE001 - e.g. JournalCorruptionError: one clear line, not a traceback
        log.error("cannot start bookie: %s: %s", type(exc).__name__, exc)
        return 1

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %s received", signal.Signals(signum).name)
        threading.Thread(target=server.stop, name="shutdown").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

