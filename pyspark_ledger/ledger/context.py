"""LedgerContext: the part of a LedgerClient that handles, recovery and autorecovery use.

The handles used to hold the whole LedgerClient, which made client -> handles -> client an
import circle and let any handle reach anything. They need only this: the ledger metadata, the
bookie connections, the placement policy, two timing settings and the client's metrics.
LedgerClient builds one and passes it down; a test or the simulator can build one without a client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark_ledger.client_metrics import ClientMetrics

if TYPE_CHECKING:  # annotations only: importing the pool pulls in grpc
    from metadata import LedgerManager
    from pyspark_ledger.protocol.placement import PlacementPolicy
    from pyspark_ledger.transport.bookie_pool import BookiePool


@dataclass(frozen=True, slots=True)
class LedgerContext:
    ledgers: LedgerManager  # ledger metadata: reads and compare-and-sets
    pool: BookiePool  # connections by bookie id, quarantine, the fault seam and the add poller
    placement: PlacementPolicy  # picks replacements in ensemble changes and re-replication
    add_timeout_s: float = 10.0  # an add unanswered this long fails (and changes the ensemble)
    explicit_lac_interval_ms: int = 20  # idle writers send the LAC after this long (0: never)
    metrics: ClientMetrics = field(default_factory=ClientMetrics)  # the client's own; registered nowhere by default
