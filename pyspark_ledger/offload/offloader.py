"""An offload pass over logs: the queue first, then each log's chosen ledgers, then the queue.

Run by the elected autorecovery leader on a schedule (autorecovery/offload_task.py) and by
`ledger offload run`. A ledger that cannot be offloaded now (a `mac` ledger without its password,
an attempt in progress elsewhere) is reported and left; the next pass tries again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metadata.errors import MetadataError
from metadata.ids import LedgerId
from metadata.log_record import LogLedger, LogRecord
from metadata.logs import NoSuchLogError
from metadata.offload_record import offload_record
from metadata.offload_settings import OffloadSettings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.offload.choice import LedgerView, choose
from pyspark_ledger.offload.errors import OffloadRefusedError
from pyspark_ledger.offload.offload_ledger import ATTEMPT_STALE_MS, LedgerInLog, Step, offload_ledger
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.queue_pass import QueuePassResult, queue_pass

log = logging.getLogger(__name__)

LEDGERS_PER_PASS_MAX = 10_000
KNOWN_OFFLOADED_MAX = 1_000_000  # ledgers a caller's `known` set holds before it starts over


@dataclass
class PassResult:
    offloaded: list[tuple[str, int]] = field(default_factory=list)  # (log, seq)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)  # (log, seq, why)
    bytes_offloaded: int = 0
    queue: list[QueuePassResult] = field(default_factory=list)


def store_uri(client: LedgerClient, override: str | None) -> str:
    uri = override or str(client.cluster_settings.value("offload_store"))
    if not uri:
        raise OffloadRefusedError("no offload store: set the cluster setting offload_store (`ledger cluster set "
                                  "offload_store=file:///dir`) or pass --store")
    return uri


def ledger_views(rec: LogRecord, known_offloaded: set[LedgerId]) -> list[LedgerView]:
    return [LedgerView(lg.seq, lg.sealed, _sealed_ms(lg), lg.size_bytes or 0, lg.ledger_id in known_offloaded)
            for lg in rec.ledgers]


def _sealed_ms(lg: LogLedger) -> int:
    return lg.sealed_ms if lg.sealed_ms is not None else lg.ctime_ms


def offload_pass(client: LedgerClient, *, store: str | None = None, logs: list[str] | None = None,
                 everything: bool = False, password: Callable[[str], bytes] = lambda name: b"",
                 stale_ms: int = ATTEMPT_STALE_MS, step: Step = lambda s: None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 keep_going: Callable[[], bool] = lambda: True, known: set[LedgerId] | None = None) -> PassResult:
    """One pass: the queue, every chosen ledger of `logs` (default: every log), the queue again.
    keep_going() is asked before each ledger (a leader that lost its election stops early).
    `known`: ledgers seen OFFLOADED by earlier passes (kept by the caller; an OFFLOADED record never
    goes back while its ledger exists), so a pass reads the metadata of new candidates only."""
    if known is None or len(known) > KNOWN_OFFLOADED_MAX:
        known = set()
    target = store_for(store_uri(client, store))
    result = PassResult()
    result.queue.append(queue_pass(client, stale_ms))
    budget = LEDGERS_PER_PASS_MAX
    for name in logs if logs is not None else client.list_logs():
        try:
            rec = client.describe_log(name)
        except NoSuchLogError:
            if logs is not None:
                raise
            continue  # deleted since it was listed
        settings = OffloadSettings.of(rec)
        if not everything and not settings.enabled:
            continue
        for seq in choose(ledger_views(rec, known), settings, now_ms(), everything=everything, limit=budget):
            lg = rec.by_seq(seq)
            if lg is None:
                continue
            if not keep_going():
                return result
            budget -= 1
            ledger = LedgerInLog(name, rec.ctime_ms, rec.payload_format, seq, lg.ledger_id, lg.ctime_ms)
            try:
                meta = client.ledgers.read(lg.ledger_id)[0]
                before = offload_record(meta)
                done = offload_ledger(client, target, ledger, password=password(name), stale_ms=stale_ms,
                                      delete_after_ms=settings.delete_after_ms, step=step)
            except (LedgerError, MetadataError) as exc:
                result.skipped.append((name, seq, str(exc)))
                log.info("ledger not offloaded this pass log=%s seq=%d ledger=%s reason=%s", name, seq,
                         lg.ledger_id, exc)
                continue
            known.add(lg.ledger_id)
            if before is None or not before.offloaded:
                result.offloaded.append((name, seq))
                result.bytes_offloaded += done.size_bytes
        if budget <= 0:
            break
    result.queue.append(queue_pass(client, stale_ms))
    return result
