"""Connections to bookies by id, resolved through the registry, plus a fault seam for tests.

A bookie id is resolved to its address through its registration; a bookie that is not registered
(dead, or being recovered) is still reachable by the last address seen, or by its id when the id
is itself host:port (the default). The address of its add listener is looked up again whenever
an add stream opens, since a restarted bookie may listen on a new port, and with it the wire
versions it speaks (a bookie upgraded or downgraded in place advertises another range). Bookies that failed
recently are quarantined for a while so placement does not pick them again at once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from bookie.proto.versions import OLDEST_PEER_RANGE, WireRange, peer_range
from metadata import BookieInfo, BookieRegistry, MetadataError
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.transport.add_poller import AddPoller
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsSettings

log = logging.getLogger(__name__)

_HOSTPORT = re.compile(r"[A-Za-z0-9.\-]+:[0-9]{1,5}")
QUARANTINE_S = 30.0


class Faults:
    """Test seam: drop chosen requests before they reach a bookie (a lost message).

    `drop(kind, bookie_id)` is consulted for kind in {"fence", "read", "add", "read_lac", "write_lac"};
    return True to drop. Production code never sets it."""

    def __init__(self) -> None:
        self.rules: list[Callable[[str, str], bool]] = []

    def drop(self, kind: str, bookie_id: str) -> bool:
        return bool(self.rules) and any(rule(kind, bookie_id) for rule in self.rules)


class BookiePool:
    def __init__(self, registry: BookieRegistry, *, add_timeout_s: float = 10.0, rpc_timeout_s: float = 10.0,
                 tls: TlsSettings | None = None, operator_secret: bytes | None = None):
        self.registry = registry
        self.tls = tls  # every bookie connection's TLS settings (None: plaintext)
        self._operator_secret = operator_secret  # sent on every gRPC call (transport/credentials.py)
        self.add_timeout_s = add_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.faults = Faults()
        self._clients: dict[str, BookieClient] = {}
        self._addresses: dict[str, str] = {}
        self._add_addresses: dict[str, str] = {}
        # The rack of every bookie seen registered (placement reads it; replaced, never mutated,
        # so a reader on another thread sees one whole map).
        self.racks: dict[str, str] = {}
        self._wire_ranges: dict[str, WireRange] = {}
        self._quarantine: dict[str, float] = {}
        self._lock = threading.Lock()
        # Reads the add answers of every bookie connection of this pool (pyspark_ledger.transport.add_poller).
        self.poller = AddPoller()

    def _remember(self, info: BookieInfo) -> None:
        self._addresses[info.bookie_id] = info.address
        self._add_addresses[info.bookie_id] = info.add_address
        if self.racks.get(info.bookie_id) != info.rack:
            self.racks = {**self.racks, info.bookie_id: info.rack}
        self._wire_ranges[info.bookie_id] = peer_range(info.wire_version_min, info.wire_version_max)

    def _address(self, bookie_id: str) -> str:
        """The bookie's address as registered now; when the registry cannot be read (the metadata
        store is briefly unreachable), the address last seen; else BookieUnavailableError, a
        LedgerError: callers treat it as this bookie failing (an add retried on another, an
        explicit LAC skipped), never as the writer failing (a sender thread once died of it and
        left its ledger OPEN)."""
        try:
            info = self.registry.get(bookie_id)
        except MetadataError as exc:
            if bookie_id in self._addresses:
                return self._addresses[bookie_id]
            raise BookieUnavailableError(bookie_id, f"its registration could not be read: {exc}") from exc
        if info is not None:
            self._remember(info)
            return info.address
        if bookie_id in self._addresses:
            return self._addresses[bookie_id]
        if _HOSTPORT.fullmatch(bookie_id):
            return bookie_id
        raise BookieUnavailableError(bookie_id, "not registered and no known address")

    def get(self, bookie_id: str) -> BookieClient:
        client = self._clients.get(bookie_id)  # every add asks: no lock for a known bookie
        if client is not None:
            return client
        address = self._address(bookie_id)
        with self._lock:
            client = self._clients.get(bookie_id)
            if client is None:
                client = BookieClient(bookie_id, address, add_address=lambda: self._add_address(bookie_id),
                                      add_timeout_s=self.add_timeout_s, rpc_timeout_s=self.rpc_timeout_s,
                                      poller=self.poller, tls=self.tls, operator_secret=self._operator_secret,
                                      wire_range=lambda: self._wire_ranges.get(bookie_id, OLDEST_PEER_RANGE))
                self._clients[bookie_id] = client
            return client

    def _add_address(self, bookie_id: str) -> str:
        """The bookie's add listener as registered now ("" = none: gRPC adds), or as last seen
        when the registration cannot be read (the bookie is down: the connect then fails fast)."""
        try:
            info = self.registry.get(bookie_id)
        except MetadataError as exc:
            log.info("bookie registration unreadable, using the last add address bookie=%s error=%s", bookie_id, exc)
            info = None
        if info is not None:
            self._remember(info)
        return self._add_addresses.get(bookie_id, "")

    def writable(self, exclude: set[str] | frozenset[str] = frozenset()) -> list[str]:
        now = time.monotonic()
        infos: list[BookieInfo] = self.registry.list(read_only=False)
        for info in infos:
            self._remember(info)
        return [
            i.bookie_id for i in infos
            if i.bookie_id not in exclude and self._quarantine.get(i.bookie_id, 0) <= now
        ]

    def is_quarantined(self, bookie_id: str) -> bool:
        return self._quarantine.get(bookie_id, 0) > time.monotonic()

    def quarantine(self, bookie_id: str, seconds: float = QUARANTINE_S) -> None:
        self._quarantine[bookie_id] = time.monotonic() + seconds

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
        self.poller.close()
