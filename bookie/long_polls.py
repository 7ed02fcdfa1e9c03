"""Bounded LAC long polls (issue 31 item 3).

A long poll (`Read` or `ReadLac` with `long_poll_min_lac`) holds one of the gRPC server's worker
threads for up to LONG_POLL_TIMEOUT_MS_MAX. Unbounded, a few dozen of them took every worker, and
`Info`, fences, reads and gRPC adds all starved. Here a long poll first takes a slot: at most
`--max-long-polls` at once on this bookie (config validation keeps that at most half of
`--grpc-workers`, so the other half always serves everything else, `Info` included) and at most
`--max-long-polls-per-client` per client identity (its certificate's identities under mutual TLS,
else its address). Beyond either bound the call is refused at once with RESOURCE_EXHAUSTED, so a
refusal costs a worker microseconds; clients then read the LAC without waiting
(pyspark_ledger/ledger/read_handle.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from bookie.metrics import Metrics
from bookie.slots import KeyedSlots
from bookie.tls import display_identities, grpc_peer_identities

log = logging.getLogger(__name__)

MAX_LONG_POLLS_DEFAULT = 16
MAX_LONG_POLLS_PER_CLIENT_DEFAULT = 4


def client_key(context: grpc.ServicerContext) -> str:
    """Who a call counts against: its certificate identities, else the peer's address without its
    port (one host's connections are one client)."""
    identities = grpc_peer_identities(context)
    if identities:
        return "cert " + display_identities(identities)
    peer = context.peer() or ""  # "ipv4:127.0.0.1:54321", "ipv6:[::1]:54321", "unix:..."
    host, sep, port = peer.rpartition(":")
    return "addr " + (host if sep and port.isdigit() else peer)


class LongPolls:
    def __init__(self, total_max: int = MAX_LONG_POLLS_DEFAULT,
                 per_client_max: int = MAX_LONG_POLLS_PER_CLIENT_DEFAULT, metrics: Metrics | None = None):
        self.slots = KeyedSlots(total_max, per_client_max, "long polls")
        self.refused = 0  # read by the metrics page; a lost increment under a race only skews a count
        if metrics is not None:
            metrics.gauge("bookie_long_polls", "LAC long polls waiting now", lambda: float(self.slots.total()))
            metrics.family("bookie_long_poll_refusals_total", "counter",
                           "LAC long polls refused RESOURCE_EXHAUSTED (over --max-long-polls or the per-client bound)",
                           lambda: [({}, float(self.refused))])

    @contextmanager
    def slot(self, context: grpc.ServicerContext, op: str) -> Iterator[None]:
        """Hold a long-poll slot for the block, or abort the call with RESOURCE_EXHAUSTED."""
        key = client_key(context)
        refusal = self.slots.try_take(key)
        if refusal is not None:
            self.refused += 1
            log.debug("long poll refused op=%s client=%s reason=%s", op, key, refusal)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{op} long poll refused: {refusal}; read the LAC without long_poll_min_lac, "
                          "or long-poll again later")
            raise AssertionError("unreachable: context.abort raises")
        try:
            yield
        finally:
            self.slots.release(key)
