"""LedgerClient: create, open (optionally recovering), delete and list ledgers.

Usable without pyspark or a JVM:

    from pyspark_ledger import LedgerClient
    with LedgerClient("sqlite:///tmp/meta.db") as client:
        with client.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2) as w:
            w.add_entry(b"hello")
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bookie.malloc_tuning import tune_malloc
from metadata import (
    BookieInfo,
    BookieRegistry,
    CreateContext,
    DigestType,
    LedgerId,
    LedgerIdLike,
    LedgerManager,
    LedgerMetadata,
    NodeExistsError,
    QuorumConfig,
    open_store,
)
from metadata.cluster_settings import ClusterSettings, ClusterSettingsWatch
from metadata.key_verifier import KEY as KEY_VERIFIER
from metadata.key_verifier import make_verifier
from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.uri import MetadataSettings, TlsFiles, metadata_settings, parse_zk_auth
from pyspark_ledger.client_metrics import ClientMetrics
from pyspark_ledger.errors import BadPasswordError, BookieRefusedError, LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.ledger.recovery import recover_ledger
from pyspark_ledger.ledger.write_handle import WriteHandle
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.protocol.placement import PlacementPolicy, RackAwarePlacement, RackRules
from pyspark_ledger.transport.bookie_pool import BookiePool
from pyspark_ledger.transport.credentials import operator_secret_from
from pyspark_ledger.transport.tls import TlsSettings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from pyspark_ledger.log import LogReader, LogWriter

log = logging.getLogger(__name__)

CREATE_ID_COLLISIONS_MAX = 10


def _client_settings(uri: str | MetadataSettings, zk_auth: str | None, tls_ca: str | Path | None,
                     tls_cert: str | Path | None, tls_key: str | Path | None) -> MetadataSettings:
    """The URI's settings with the keyword arguments in place of its own values."""
    settings = metadata_settings(uri)
    if zk_auth:
        settings = settings.with_zk_auth(parse_zk_auth(zk_auth, "zk_auth"))
    files = settings.tls
    given = [None if v is None else str(v) for v in (tls_ca, tls_cert, tls_key)]
    return settings.with_tls(TlsFiles(given[0] or files.ca, given[1] or files.cert, given[2] or files.key))


def _password(password: bytes | str) -> bytes:
    return password.encode() if isinstance(password, str) else bytes(password)


class LedgerClient:
    def __init__(
        self,
        metadata_uri: str | MetadataSettings,
        *,
        placement: PlacementPolicy | None = None,
        add_timeout_s: float = 10.0,
        rpc_timeout_s: float = 10.0,
        explicit_lac_interval_ms: int = 20,
        metadata_timeout_s: float | None = None,
        tls_ca: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        operator_secret: bytes | str | None = None,
        zk_auth: str | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ):
        """metadata_uri: the metadata service URI, or its MetadataSettings (metadata/uri_settings.py).
        tls_ca / tls_cert / tls_key: TLS to the bookies (docs/security.md); each defaults to
        the metadata URI's query parameter of the same name. operator_secret: the cluster's
        operator identity (deletes without the ledger password, admin calls), default
        LEDGER_OPERATOR_SECRET / LEDGER_OPERATOR_SECRET_FILE. zk_auth: ZooKeeper credentials
        ("digest:user:secret" or "sasl:user:secret"), default the URI's zk_auth or LEDGER_ZK_AUTH. metrics_registry: a
        prometheus_client registry to expose this client's metrics in (`self.metrics`, see
        pyspark_ledger/client_metrics.py); default none: registered nowhere."""
        _tune_malloc_once()
        self.metadata = _client_settings(metadata_uri, zk_auth, tls_ca, tls_cert, tls_key)
        self.metadata_uri = str(self.metadata)  # for messages: zk_auth's secret shows as ***
        files = self.metadata.tls
        tls = TlsSettings.from_values(files.ca, files.cert, files.key)
        # The deadline of every metadata call (None: the URI's op_timeout_ms, else its session timeout).
        self.store = open_store(self.metadata, timeout_s=metadata_timeout_s)
        self.ledgers = LedgerManager(self.store)
        self.logs = LogManager(self.store)
        self.registry = BookieRegistry(self.store)
        self.pool = BookiePool(self.registry, add_timeout_s=add_timeout_s, rpc_timeout_s=rpc_timeout_s, tls=tls,
                               operator_secret=operator_secret_from(operator_secret))
        # Rack-aware unless the caller brings its own: racks come with the registry listing the
        # pool reads for every placement anyway; the rule from the cluster settings (below).
        self.placement: PlacementPolicy = placement or RackAwarePlacement(lambda: self.pool.racks)
        self.add_timeout_s = add_timeout_s
        self.explicit_lac_interval_ms = explicit_lac_interval_ms
        # What the handles, recovery and autorecovery see of this client (never the client itself).
        self.metrics = ClientMetrics()
        if metrics_registry is not None:
            self.metrics.register(metrics_registry)
        self.context = LedgerContext(self.ledgers, self.pool, self.placement, add_timeout_s=add_timeout_s,
                                     explicit_lac_interval_ms=explicit_lac_interval_ms, metrics=self.metrics)
        self._handles: list[ReadHandle] = []
        # Read now and on every change (a store watch): the settings every client shares.
        self._settings_watch = ClusterSettingsWatch(self.store, self._settings_changed)

    @property
    def cluster_settings(self) -> ClusterSettings:
        """The cluster settings as last seen (metadata/cluster_settings.py): fresh within a watch's delay."""
        return self._settings_watch.current

    def _settings_changed(self, settings: ClusterSettings) -> None:
        log.debug("cluster settings seen settings=%s", dict(settings.values))
        if isinstance(self.placement, RackAwarePlacement):
            self.placement.rules = RackRules(settings.min_racks_per_write_quorum, settings.enforce_min_racks)

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 3,
        ack_quorum_size: int = 2,
        digest_type: str | DigestType = "crc32c",
        password: bytes | str = b"",
        scope_id: int | None = 0,
        *,
        create_context: CreateContext | None = None,
        custom: Mapping[str, bytes] | None = None,
        ensemble: list[str] | None = None,
    ) -> WriteHandle:
        """Create a ledger on E writable bookies and return its writer. scope_id 0: the id comes
        from the metadata store; another scope: a random id in it; None: a random UUID id.
        `ensemble` pins the bookies (admin checks such as `ledger bookiesanity`)."""
        quorum = QuorumConfig(ensemble_size, write_quorum_size, ack_quorum_size)
        pw = _password(password)
        if ensemble is None:
            ensemble = self.placement.new_ensemble(ensemble_size, self.pool.writable(),
                                                   write_quorum_size=write_quorum_size)
        elif len(ensemble) != ensemble_size or len(set(ensemble)) != ensemble_size:
            raise LedgerError(f"an explicit ensemble needs {ensemble_size} distinct bookies, got {ensemble}")
        settings = self.cluster_settings
        if settings.ledger_key_verifiers:  # bookies then take only this key for it (metadata/key_verifier.py)
            custom = {**(custom or {}), KEY_VERIFIER: make_verifier(master_key(pw),
                                                                    salted=settings.salted_password_digests)}
        for _ in range(CREATE_ID_COLLISIONS_MAX):
            lid = self.ledgers.allocate_ledger_id(scope_id)
            meta = LedgerMetadata.new(lid, quorum, ensemble, digest_type=digest_type, password=pw,
                                      create_context=create_context, custom=custom,
                                      salted_digest=settings.salted_password_digests)
            try:
                version = self.ledgers.create(meta)
                break
            except NodeExistsError:
                if scope_id == 0:
                    raise
                continue  # a random id collided: draw another
        else:
            raise LedgerError("could not find a free ledger id")
        log.info("ledger created ledger=%s ensemble=%s E=%d W=%d A=%d", lid, ensemble, ensemble_size, write_quorum_size,
                 ack_quorum_size)
        handle = WriteHandle(self.context, meta, version, pw)
        self._handles.append(handle)
        return handle

    def open_ledger(self, ledger_id: LedgerIdLike, recovery: bool = False, password: bytes | str = b"") -> ReadHandle:
        """Open for reading. recovery=True fences the ledger and closes it (as a new writer would)."""
        lid = LedgerId.parse(ledger_id)
        pw = _password(password)
        if recovery:
            meta, version = recover_ledger(self.context, lid, pw)
        else:
            meta, version = self.ledgers.read(lid)
        handle = ReadHandle(self.context, meta, version, pw)
        self._handles.append(handle)
        return handle

    def delete_ledger(self, ledger_id: LedgerIdLike, password: bytes | str | None = None) -> None:
        """Delete the metadata (the point of no return), then the data on every bookie (best effort:
        a bookie that is down keeps its copy until garbage collection). Bookies delete only for
        the ledger's master key (`password`, checked against metadata first) or this client's
        operator identity; a bookie that refuses keeps its copy until its garbage collection sees
        the metadata gone (docs/security.md)."""
        lid = LedgerId.parse(ledger_id)
        meta, version = self.ledgers.read(lid)
        key = b""
        if password is not None:
            if not meta.check_password(_password(password)):
                raise BadPasswordError(f"wrong password for ledger {lid}")
            key = master_key(_password(password))
        self.ledgers.delete(lid, version)
        for b in sorted(meta.bookies()):
            try:
                self.pool.get(b).delete_ledger((lid.scope_id, lid.id), timeout_s=5.0, master_key=key)
            except BookieRefusedError as exc:
                log.info("bookie refused the delete (no password, no operator identity): its garbage collection "
                         "removes the copy ledger=%s bookie=%s error=%s", lid, b, exc)
            except LedgerError as exc:
                log.warning("bookie kept data of a deleted ledger (garbage collection will remove it) "
                            "ledger=%s bookie=%s error=%s", lid, b, exc)
        log.info("ledger deleted ledger=%s", lid)

    def list_ledgers(self, scope_id: int | None = None) -> Iterator[LedgerId]:
        return self.ledgers.scan(scope_id)

    def ledger_metadata(self, ledger_id: LedgerIdLike) -> LedgerMetadata:
        return self.ledgers.read(ledger_id)[0]

    # ---- logs ---------------------------------------------------------------------------------

    def open_log_writer(self, name: str, create: bool = True, *, ensemble_size: int = 3, write_quorum_size: int = 3,
                        ack_quorum_size: int = 2, digest_type: str = "crc32c", password: bytes | str = b"",
                        rollover_entries: int | None = None, rollover_bytes: int | None = None,
                        rollover_age_s: float | None = None, crash_hook: Any = None, batching: bool = True,
                        batch_max_messages: int = 1000, batch_max_bytes: int = 131072,
                        batch_max_delay_ms: float = 1) -> LogWriter:
        """Become the log's single writer (fencing any previous one); see pyspark_ledger.log.
        batching: many messages per entry (entry format 3, read by this release on) once the
        cluster setting message_batches is on (docs/upgrading.md: clients of release 0.1.0 cannot
        read batches); until then, and with False, one message per entry (format 2, read by every
        release and by the Spark source). `LogWriter.batching` says which it does."""
        from pyspark_ledger.log import BatchSettings, LedgerOptions, LogWriter

        opts = LedgerOptions(ensemble_size, write_quorum_size, ack_quorum_size, str(digest_type), _password(password))
        batch = BatchSettings(batch_max_messages, batch_max_bytes, batch_max_delay_ms)
        return LogWriter(self, name, create=create, options=opts, rollover_entries=rollover_entries,
                         rollover_bytes=rollover_bytes, rollover_age_s=rollover_age_s, crash_hook=crash_hook,
                         batching=batching and self.cluster_settings.message_batches, batch=batch)

    def open_log_reader(self, name: str, password: bytes | str = b"", *, subscription: str | None = None,
                        initial_position: str = "latest") -> LogReader:
        """A reader of log `name`. With `subscription`, read()/tail() resume after the named
        durable subscription's position and reader.commit(position) moves it; a subscription
        that does not exist yet is made at `initial_position` ("latest", the default, as Kafka's
        auto.offset.reset and Pulsar's; "earliest"; or "none" to refuse). docs/subscriptions.md."""
        from pyspark_ledger.log import LogReader

        return LogReader(self, name, _password(password), subscription=subscription, initial_position=initial_position)

    def list_logs(self) -> list[str]:
        return self.logs.names()

    def describe_log(self, name: str) -> LogRecord:
        """The whole record, every ledger (reads every segment: for tools and tests; the log's
        hot paths read the head only, see log_summary)."""
        return self.logs.read(name)[0]

    def log_summary(self, name: str) -> LogRecord:
        """The head view: the log's fields and its tail's ledgers, one read however long the log."""
        return self.logs.read_tail(name)[0]

    def trim_log(self, name: str, **criteria: Any) -> list[LedgerId]:
        from pyspark_ledger.log import trim_log

        return trim_log(self, name, **criteria)

    def delete_log(self, name: str) -> None:
        """Delete a log and every ledger in it (ledgers first, so a crash leaves nothing unreferenced)."""
        from pyspark_ledger.log.retention import delete_trimmed

        # One head CAS trims everything (sealed segments join the deletion queue), then the queue
        # is drained: bounded by the ledgers the log ever had.
        rec, _ = self.logs.update_head(name, lambda r: r.trimmed_to(r.next_seq))
        delete_trimmed(self, name, rec.next_seq + len(rec.pending_deletions) + 1)
        self.logs.delete(name)

    def bookies(self, *, writable: bool = True, read_only: bool = True) -> list[BookieInfo]:
        return self.registry.list(writable=writable, read_only=read_only)

    def close(self) -> None:
        self.close_handles()
        self._settings_watch.close()
        self.pool.close()
        self.store.close()

    def close_handles(self) -> None:
        """Close and forget every handle this client opened (the client stays open): a client that
        outlives its users (the Spark data source's per-worker cache) does this after each use."""
        for h in self._handles:
            try:
                if isinstance(h, WriteHandle):
                    h._close_quietly()
                else:
                    h.close()
            except Exception:
                log.debug("handle close failed", exc_info=True)
        self._handles.clear()

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _tune_malloc_once() -> bool:
    # A writer's entries are ~128 KiB buffers (a batch of messages, its encoded entry): above
    # glibc's default mmap threshold each is a fresh mapping, touched page by page and unmapped
    # again (about a tenth of a 1 KiB-message producer's CPU in page faults and zeroing, profiled
    # 2026-11-28). Once per process; see bookie/malloc_tuning.py (and its opt-out).
    return tune_malloc()
