"""Read repair: when a read finds a damaged copy (the bookie answered "unknown entry state" for
an entry it holds but cannot verify, or its bytes failed the digest) or, on a CLOSED ledger, a
missing copy on a bookie of the entry's write set, and another replica gave a verified copy,
that copy is written back to the bookie as a recovery add (TigerBeetle repairs a replica from
its peers the same way; BookKeeper leaves it to the auditor). The write is asynchronous and
bounded (entries and bytes in flight per handle); what is over the bound is left to the
bookie's scrubber. A repair never changes what a read returns."""

from __future__ import annotations

import logging
import threading

from bookie.status import Status
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.protocol.digest import LedgerKeys
from pyspark_ledger.protocol.entry_format import Entry, encode_copy

log = logging.getLogger(__name__)

REPAIR_IN_FLIGHT_ENTRIES_MAX = 64
REPAIR_IN_FLIGHT_BYTES_MAX = 16 * 2**20
REPAIR_TIMEOUT_S = 30.0
# Entry-level answers that say "this bookie should have it but cannot serve it".
REPAIRABLE_STATUSES = frozenset({Status.UNKNOWN_ENTRY_STATE})
MISSING_STATUSES = frozenset({Status.NO_SUCH_ENTRY})


class ReadRepair:
    def __init__(self, context: LedgerContext, ledger_key: tuple[int, int], keys: LedgerKeys):
        self._ctx = context
        self._key = ledger_key
        self._digest = keys.digest
        self._master_key = keys.master_key
        self._lock = threading.Lock()
        self._bad: dict[int, set[str]] = {}  # entry id -> bookies with a bad or missing copy
        self._in_flight_entries = 0
        self._in_flight_bytes = 0
        self.sent = self.repaired = self.failed = self.skipped = 0

    def note(self, bookie_id: str, entry_id: int, status: Status | None, closed: bool) -> None:
        """A replica's answer for an entry it should hold: status None = a digest or format error."""
        if status is None or status in REPAIRABLE_STATUSES or (closed and status in MISSING_STATUSES):
            with self._lock:
                self._bad.setdefault(entry_id, set()).add(bookie_id)

    def repair(self, good: dict[int, Entry], first: int, last: int) -> None:
        """Write the verified copies in `good` back to the bookies noted for them; notes for the
        rest of first..last (no good copy was found) are dropped."""
        with self._lock:
            todo = [(eid, b) for eid in sorted(self._bad.keys() & good.keys()) for b in sorted(self._bad[eid])]
            for eid in [e for e in self._bad if first <= e <= last]:
                del self._bad[eid]
        for entry_id, bookie_id in todo:
            entry = good[entry_id]
            data = encode_copy(self._digest, self._key[0], self._key[1], entry)
            with self._lock:
                if (self._in_flight_entries >= REPAIR_IN_FLIGHT_ENTRIES_MAX
                        or self._in_flight_bytes + len(data) > REPAIR_IN_FLIGHT_BYTES_MAX):
                    self.skipped += 1
                    continue
                self._in_flight_entries += 1
                self._in_flight_bytes += len(data)
                self.sent += 1
            self._send(bookie_id, entry_id, entry.last_add_confirmed, data)

    def _send(self, bookie_id: str, entry_id: int, lac: int, data: bytes) -> None:
        def done(status: int, message: str) -> None:
            with self._lock:
                self._in_flight_entries -= 1
                self._in_flight_bytes -= len(data)
                if status == Status.OK:
                    self.repaired += 1
                else:
                    self.failed += 1
            if status == Status.OK:
                log.info("read repair: wrote a good copy ledger=%s entry=%d bookie=%s", self._key, entry_id, bookie_id)
            else:
                log.warning("read repair failed ledger=%s entry=%d bookie=%s status=%s %s", self._key, entry_id,
                            bookie_id, Status(status).name, message)

        try:
            self._ctx.pool.get(bookie_id).add_batch(self._key, self._master_key, [(entry_id, lac, data)], done,
                                                    recovery=True, timeout_s=REPAIR_TIMEOUT_S)
        except LedgerError as exc:
            done(Status.INTERNAL_ERROR, str(exc))

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight_entries
