"""Replication workers: claim an under-replication mark, re-replicate the ledger, clear the mark.

A claim is an ephemeral lock node /autorecovery/locks/<qualified name> (metadata.ephemeral_lock):
a worker that dies leaves it to expire with its session (or lease), and another worker takes the
mark. Its value shows who works on the ledger and how far it got (`ledger listunderreplicated`).

For each claimed mark: a ledger that is gone clears its mark; an OPEN ledger is recovered first
(fenced and closed, as `ledger recover --bookie` does) once the mark is older than
open_ledger_grace_s (its writer may still close it itself meanwhile); then every fragment on a
marked bookie is copied to a replacement (rereplication.rereplicate, safe against concurrent
re-replications), and the mark is deleted at the version read: when the auditor added a bookie
meanwhile, the delete fails and the mark is worked on again.

No ledger passwords: workers authenticate to bookies as the cluster operator (the client's
operator secret or certificate, docs/security.md) and take each ledger's master key from a bookie
that holds a copy (ledger/keys.py). Without an operator identity they fall back to the empty
password (the clients' default), and a ledger with another password fails its re-replication
(logged, counted, retried with back-off); `password` fixes one password for every ledger.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from metadata import LedgerId, MetadataError
from metadata.context import now_ms
from metadata.ephemeral_lock import EphemeralLock, try_lock
from metadata.offload_record import is_offloaded
from metadata.paths import replication_lock_path
from metadata.underreplication import REASON_MISPLACED, UnderReplicationManager
from pyspark_ledger.autorecovery.copy_pace import CopyPace
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.autorecovery.swap_record import SwapRecords
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import CredentialSource
from pyspark_ledger.ledger.recovery import recover_ledger

log = logging.getLogger(__name__)

CLAIM_ATTEMPTS_MAX = 32  # marks tried per round before sleeping
BACKOFF_S_INITIAL = 2.0
BACKOFF_S_MAX = 60.0
PROGRESS_UPDATE_S = 1.0  # the lock's progress fields are written at most this often


class ReplicationWorker:
    def __init__(self, context: LedgerContext, holder: str, *, open_ledger_grace_s: float, poll_interval_s: float,
                 password: bytes, metrics: AutorecoveryMetrics, stop: threading.Event, pace: CopyPace | None = None):
        self.context = context
        self.store = context.ledgers.store
        self.marks = UnderReplicationManager(self.store)
        self.holder = holder
        self.open_grace_ms = int(open_ledger_grace_s * 1000)
        self.poll_interval_s = poll_interval_s
        self.credentials = CredentialSource(context, password)
        self.metrics = metrics
        self._stop = stop
        self.pace = pace  # shared with the process's other workers (copy_pace)
        self._backoff: dict[LedgerId, tuple[float, float]] = {}  # ledger -> (retry at, delay)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.work_once()
            except MetadataError as exc:
                log.warning("replication worker: metadata unavailable error=%s", exc)
                worked = False
            if not worked:
                self._stop.wait(self.poll_interval_s * random.uniform(0.5, 1.5))

    def work_once(self) -> bool:
        """Claim one mark and work on it. False when there was nothing to claim."""
        ids = self.marks.ledger_ids()
        self.metrics.underreplicated_ledgers.set(len(ids))
        now = time.monotonic()
        marked = set(ids)
        self._backoff = {lid: b for lid, b in self._backoff.items() if lid in marked}
        candidates = [lid for lid in ids if self._backoff.get(lid, (0.0, 0.0))[0] <= now]
        random.shuffle(candidates)  # workers spread over the marks instead of all trying the first
        for lid in candidates[:CLAIM_ATTEMPTS_MAX]:
            if self._stop.is_set():
                return False
            lock = try_lock(self.store, replication_lock_path(lid), self.holder)
            if lock is None:
                continue
            try:
                self._work_on(lid, lock)
            finally:
                lock.release()
            return True
        return False

    def _work_on(self, lid: LedgerId, lock: EphemeralLock) -> None:
        try:
            if self._replicate(lid, lock):
                self._backoff.pop(lid, None)
                return
        except (LedgerError, MetadataError) as exc:
            self.metrics.rereplication_failures.inc()
            log.warning("re-replication failed; the mark stays ledger=%s error=%s", lid, exc)
        delay = min(BACKOFF_S_MAX, self._backoff.get(lid, (0.0, BACKOFF_S_INITIAL / 2))[1] * 2)
        self._backoff[lid] = (time.monotonic() + delay, delay)

    def _replicate(self, lid: LedgerId, lock: EphemeralLock) -> bool:
        """True when the mark was cleared; False to come back later."""
        got = self.marks.get(lid)
        if got is None:
            return True  # another worker finished it
        mark, version = got
        found = self.context.ledgers.get(lid)
        if found is None:
            self.marks.clear(lid, version)  # the ledger was deleted: nothing to replicate
            return True
        meta = found[0]
        if is_offloaded(meta):
            self.marks.clear(lid, version)  # read from the object store: its bookies' copies may be gone
            return True
        lost = sorted(set(mark.lost_bookies) & meta.bookies())
        if mark.reason == REASON_MISPLACED and not meta.is_closed:
            # Moving a copy of an open ledger would fence its live writer: never (the auditor marks
            # only closed ledgers so; this is a mark from elsewhere). Its next scan judges it again.
            log.warning("not moving copies of a ledger that is not closed ledger=%s state=%s", lid, meta.state.value)
            self.marks.clear(lid, version)
            return True
        if lost and not meta.is_closed:
            if now_ms() - mark.since_ms < self.open_grace_ms:
                return False
            log.info("recovering an open ledger before re-replicating it ledger=%s lost=%s", lid, ",".join(lost))
            meta, _ = recover_ledger(self.context, lid, self.credentials.for_ledger(meta, avoid=lost))
        progress = _Progress(lock, len(lost), self.metrics)
        for bookie in lost:
            rereplicate(self.context, lid, bookie, self.credentials.for_ledger(meta, avoid=lost),
                        on_copied=progress.copied, holder=self.holder,
                        resume_swaps=True, pace=self.pace, on_copies=self.metrics.rereplicated_entries.inc)
            progress.bookie_done()
        # A predecessor that died between its commit and its clean-up left a record (swap_record).
        SwapRecords(self.store).clear_ledger(lid)
        if not self.marks.clear(lid, version):
            return False  # the auditor extended the mark meanwhile: another round
        self.metrics.rereplicated_ledgers.inc()
        log.info("under-replicated ledger repaired ledger=%s bookies=%s", lid, ",".join(lost))
        return True


class _Progress:
    """What `ledger listunderreplicated` shows of a claimed mark: bookies done, bytes copied."""

    def __init__(self, lock: EphemeralLock, bookies: int, metrics: AutorecoveryMetrics):
        self.lock = lock
        self.bookies, self.done, self.bytes = bookies, 0, 0
        self.metrics = metrics
        self._written_at = 0.0

    def copied(self, n: int) -> None:
        self.bytes += n
        self.metrics.rereplicated_bytes.inc(n)
        self._write(force=False)

    def bookie_done(self) -> None:
        self.done += 1
        self._write(force=True)

    def _write(self, force: bool) -> None:
        if not force and time.monotonic() - self._written_at < PROGRESS_UPDATE_S:
            return
        self._written_at = time.monotonic()
        try:
            self.lock.update(bookiesDone=self.done, bookiesTotal=self.bookies, copiedBytes=self.bytes)
        except MetadataError as exc:
            log.debug("progress not written error=%s", exc)
