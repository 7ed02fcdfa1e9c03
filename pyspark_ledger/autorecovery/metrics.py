"""The autorecovery service's Prometheus metrics, in a registry of its own (so that two services
in one test process, or a bookie's own metrics, never collide), served on 127.0.0.1 only."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class AutorecoveryMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.underreplicated_ledgers = Gauge(
            "autorecovery_underreplicated_ledgers", "ledgers marked under-replicated (as the last listing saw)",
            registry=r)
        self.rereplicated_bytes = Counter(
            "autorecovery_rereplicated_bytes",
            "bytes of entries copied to replacement bookies (as stored: header, digest, payload)", registry=r)
        self.rereplicated_entries = Counter(
            "autorecovery_rereplicated_entries", "entry copies written to replacement bookies", registry=r)
        self.rereplicated_ledgers = Counter(
            "autorecovery_rereplicated_ledgers", "ledgers whose under-replication mark a worker cleared", registry=r)
        self.rereplication_failures = Counter(
            "autorecovery_rereplication_failures", "re-replication attempts that failed (the mark stays)", registry=r)
        self.auditor_leader = Gauge(
            "autorecovery_auditor_leader", "1 while this process is the elected auditor", registry=r)
        self.lost_bookies = Gauge("autorecovery_lost_bookies", "bookies the auditor counts as lost", registry=r)
        self.scanned_ledgers = Counter("autorecovery_audit_scanned_ledgers", "ledgers read by audit scans", registry=r)
        self.metadata_requests = Counter(
            "autorecovery_audit_metadata_requests", "metadata store requests sent by audit scans", registry=r)
        self.marked_ledgers = Counter(
            "autorecovery_marked_ledgers", "under-replication marks the auditor created or extended", registry=r)
        self.retention_passes = Counter("autorecovery_retention_passes", "retention passes run by the leader",
                                        registry=r)
        self.retention_trimmed_ledgers = Counter(
            "autorecovery_retention_trimmed_ledgers", "ledgers trimmed off logs by retention", registry=r)
        self.retention_trimmed_bytes = Counter(
            "autorecovery_retention_trimmed_bytes", "bytes of the ledgers retention trimmed", registry=r)
        self.retention_lost_subscriptions = Counter(
            "autorecovery_retention_lost_subscriptions",
            "subscriptions marked as having lost data by retention (backlog policy trim)", registry=r)
        self.retention_failures = Counter(
            "autorecovery_retention_failures", "log visits of a retention pass that failed (retried next pass)",
            registry=r)
        self._server: Any = None

    def serve(self, port: int) -> int:
        """Serve /metrics on 127.0.0.1:port (0: a free port); returns the port."""
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
