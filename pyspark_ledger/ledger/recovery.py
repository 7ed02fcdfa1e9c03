"""Ledger recovery ("Closing a ledger as a reader", reference/bookkeeper-protocol.md).

1. Mark the ledger IN_RECOVERY by compare-and-set (a stalled recovery may be taken over).
2. Fence every bookie of the last fragment until, in every write set, W-A+1 bookies answered:
   then no write set can still gather A acks for the old writer.
3. Start from the highest LAC they reported (and never before the last fragment's first entry:
   everything earlier was acknowledged when that fragment was made).
4. Read forward with fencing reads. An entry that any bookie returns intact is re-replicated to
   its whole write set (recovery adds, accepted on fenced ledgers). Recovery stops at the first
   entry that W-A+1 bookies of its write set answer NO_SUCH_ENTRY for: an acknowledged entry is
   on A of them, so at least one of any W-A+1 would have it. UNKNOWN_ENTRY_STATE, corrupt copies,
   errors and timeouts never count as absent (BookKeeper bugs 2908 and 2614).
5. Close by compare-and-set at the last entry found. If another recovery closed it first, adopt
   its result: concurrent recoveries agree on the ledger's end.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from bookie.status import Status
from metadata import BadVersionError, LedgerId, LedgerMetadata, LedgerState, write_set
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.errors import DigestMismatchError, EntryFormatError, LedgerError, ReadError
from pyspark_ledger.ledger.context import LedgerContext

log = logging.getLogger(__name__)

FENCE_ROUNDS_MAX = 5
FENCE_TIMEOUT_S = 10.0
READ_WINDOW_ENTRIES = 512
READ_ROUNDS_MAX = 5
REPLICATE_TIMEOUT_S = 30.0
CAS_ATTEMPTS_MAX = 50
ENSEMBLE_CHANGES_MAX = 3


class RecoveryError(LedgerError):
    retriable = True


def recover_ledger(context: LedgerContext, ledger: LedgerId, password: bytes) -> tuple[LedgerMetadata, int]:
    """Recover (fence and close) a ledger; returns its CLOSED metadata and version."""
    meta, version = context.ledgers.read(ledger)
    if meta.is_closed:
        return meta, version
    if not meta.check_password(password):
        from pyspark_ledger.errors import BadPasswordError

        raise BadPasswordError(f"wrong password for ledger {ledger}")
    meta, version = context.ledgers.update(ledger, lambda m: None if m.state is not LedgerState.OPEN else m.start_recovery())
    if meta.is_closed:
        return meta, version
    log.warning("recovering ledger ledger=%s", ledger)
    with ThreadPoolExecutor(max_workers=max(8, meta.ensemble_size * 2), thread_name_prefix="recovery") as pool:
        r = _Recovery(context, meta, password, pool)
        start, length = r.fence()
        last, length = r.read_forward(start, length)
    return _close(context, ledger, last, length)


class _Recovery:
    def __init__(self, context: LedgerContext, meta: LedgerMetadata, password: bytes, pool: ThreadPoolExecutor):
        self.ctx, self.meta, self.pool = context, meta, pool
        self.key = (meta.ledger_id.scope_id, meta.ledger_id.id)
        self.master_key = master_key(password)
        self.digest = Digest.for_ledger(meta.digest_type, password)
        self.seg = meta.segments[-1]
        self.need = meta.write_quorum_size - meta.ack_quorum_size + 1

    def _write_sets_covered(self, answered: set[str]) -> bool:
        e, w = self.meta.ensemble_size, self.meta.write_quorum_size
        return all(
            sum(1 for i in write_set(s, e, w) if self.seg.bookies[i] in answered) >= self.need for s in range(e)
        )

    def fence(self) -> tuple[int, int]:
        """Fence the last fragment; returns (first entry to read, ledger length before it)."""
        answered: dict[str, int] = {}
        for round_ in range(FENCE_ROUNDS_MAX):
            todo = [b for b in self.seg.bookies if b not in answered]
            futures = {b: self.pool.submit(self._fence_one, b) for b in todo}
            for b, f in futures.items():
                lac = f.result()
                if lac is not None:
                    answered[b] = lac
            if self._write_sets_covered(set(answered)):
                break
            log.warning("fencing incomplete, retrying ledger=%s answered=%s round=%d", self.meta.ledger_id, sorted(answered), round_)
            time.sleep(0.2 * (round_ + 1))
        else:
            raise RecoveryError(
                f"ledger {self.meta.ledger_id}: could not fence W-A+1={self.need} bookies in every write set "
                f"of {list(self.seg.bookies)} (answered: {sorted(answered)})"
            )
        max_lac = max(answered.values())
        start = max(max_lac + 1, self.seg.first_entry_id)
        length = self._length_before(start)
        log.info("ledger fenced for recovery ledger=%s lacs=%s start=%d", self.meta.ledger_id, answered, start)
        return start, length

    def _fence_one(self, bookie_id: str) -> int | None:
        if self.ctx.pool.faults.drop("fence", bookie_id):
            return None
        try:
            resp = self.ctx.pool.get(bookie_id).fence(self.key, self.master_key, timeout_s=FENCE_TIMEOUT_S)
        except LedgerError as exc:
            log.info("fence not answered bookie=%s error=%s", bookie_id, exc)
            return None
        if resp.status == Status.OK:
            return int(resp.lac)
        if resp.status == Status.UNAUTHORIZED:
            raise RecoveryError(f"bookie {bookie_id} refused the fence: wrong password for ledger {self.meta.ledger_id}")
        return None

    def _length_before(self, start: int) -> int:
        """The ledger length through entry start-1 (from that entry's header)."""
        if start == 0:
            return 0
        e = start - 1
        entry = self._read_known(e)
        return entry.length

    def _read_known(self, entry_id: int):  # type: ignore[no-untyped-def]
        """Read one entry that is known to be acknowledged (at or below a reported LAC)."""
        meta = self.meta
        ensemble = meta.ensemble_for(entry_id)
        for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size):
            outcome, entry = self._read_copy(ensemble[i], entry_id, entry_id, fence=False).get(entry_id, ("error", None))
            if outcome == "ok":
                return entry
        raise RecoveryError(f"ledger {meta.ledger_id}: acknowledged entry {entry_id} is unreadable on every replica")

    def _read_copy(self, bookie_id: str, first: int, last: int, fence: bool) -> dict[int, tuple[str, object]]:
        """Per entry: ("ok", Entry) | ("absent", None) | ("unknown", reason)."""
        out: dict[int, tuple[str, object]] = {}
        if self.ctx.pool.faults.drop("read", bookie_id):
            return out
        try:
            resp = self.ctx.pool.get(bookie_id).read(
                self.key, first, last, max_entries=last - first + 1, fence=fence, master_key=self.master_key,
                timeout_s=FENCE_TIMEOUT_S,
            )
        except LedgerError as exc:
            return {e: ("unknown", str(exc)) for e in range(first, last + 1)}
        if resp.status == Status.NO_SUCH_LEDGER:
            return {e: ("absent", None) for e in range(first, last + 1)}
        if resp.status != Status.OK:
            return {e: ("unknown", Status(resp.status).name) for e in range(first, last + 1)}
        for eid, st, data in zip(resp.entry_ids, resp.entry_status, resp.entries):
            if st == Status.OK:
                try:
                    out[eid] = ("ok", decode_entry(self.digest, data, self.key[0], self.key[1], eid))
                except (DigestMismatchError, EntryFormatError) as exc:
                    out[eid] = ("unknown", f"corrupt copy: {exc}")  # a bad copy is not an absent one
            elif st == Status.NO_SUCH_ENTRY:
                out[eid] = ("absent", None)
            else:
                out[eid] = ("unknown", Status(st).name)
        return out

    def read_forward(self, start: int, length: int) -> tuple[int, int]:
        """Find every recoverable entry from `start`, then re-replicate them; returns (last entry, length).

        Entries are collected first and replicated at the end, so that an ensemble change needed
        for a dead replica (a new fragment from `start`) never changes where the reads look."""
        meta, ensemble = self.meta, self.seg.bookies
        nxt = start
        found_all: list = []  # type: ignore[type-arg]
        while True:
            window_last = nxt + READ_WINDOW_ENTRIES - 1
            answers: dict[int, dict[str, tuple[str, object]]] = {}
            for round_ in range(READ_ROUNDS_MAX):
                futures: dict[str, Future] = {  # type: ignore[type-arg]
                    b: self.pool.submit(self._read_copy, b, nxt, window_last, True) for b in ensemble
                }
                for b, f in futures.items():
                    for eid, ans in f.result().items():
                        prev = answers.setdefault(eid, {}).get(b)
                        if prev is None or prev[0] == "unknown":
                            answers[eid][b] = ans
                decided, found, end = self._decide(nxt, window_last, answers)
                if decided:
                    break
                time.sleep(0.2 * (round_ + 1))
            else:
                raise RecoveryError(
                    f"ledger {meta.ledger_id}: cannot decide whether entry {end} exists: too few definite answers "
                    "(bookies down or holding corrupt copies); refusing to guess"
                )
            found_all.extend(found)
            if found:
                length = found[-1].length  # type: ignore[attr-defined]
            if end is not None:  # the first absent entry
                self._replicate_all(start, found_all)
                return end - 1, length
            nxt = window_last + 1

    def _replicate_all(self, start: int, entries: list) -> None:  # type: ignore[type-arg]
        """Re-replicate; if a replica is down, move the tail to a new fragment (IN_RECOVERY) and retry."""
        for attempt in range(ENSEMBLE_CHANGES_MAX + 1):
            failed = set()
            for i in range(0, len(entries), READ_WINDOW_ENTRIES):
                failed |= self._replicate(entries[i : i + READ_WINDOW_ENTRIES])
            if not failed:
                return
            if attempt == ENSEMBLE_CHANGES_MAX:
                break
            self._replace_in_last_fragment(start, failed)
        raise RecoveryError(f"ledger {self.meta.ledger_id}: recovered entries could not reach A={self.meta.ack_quorum_size} bookies")

    def _replace_in_last_fragment(self, start: int, failed: set[str]) -> None:
        current = list(self.seg.bookies)
        exclude = set(current) | failed
        for b in failed:
            self.ctx.pool.quarantine(b)
            if b in current:
                repl = self.ctx.placement.replacement(current, self.ctx.pool.writable(exclude=exclude))
                current[current.index(b)] = repl
                exclude.add(repl)

        def change(m: LedgerMetadata) -> LedgerMetadata:
            if m.state is not LedgerState.IN_RECOVERY:
                raise RecoveryError(f"ledger {m.ledger_id} left recovery ({m.state.value}) while this recovery ran")
            return m.with_ensemble_change(max(start, m.segments[-1].first_entry_id), current)

        self.meta, _ = self.ctx.ledgers.update(self.meta.ledger_id, change)
        self.seg = self.meta.segments[-1]
        log.warning("recovery changed the ensemble ledger=%s from_entry=%d ensemble=%s failed=%s",
                    self.meta.ledger_id, self.seg.first_entry_id, list(current), sorted(failed))

    def _decide(self, first: int, last: int, answers: dict[int, dict[str, tuple[str, object]]]):  # type: ignore[no-untyped-def]
        """Walk entries in order: collect the present ones until the first definitely-absent one."""
        meta, ensemble = self.meta, self.seg.bookies
        found = []
        for e in range(first, last + 1):
            per = answers.get(e, {})
            members = [ensemble[i] for i in write_set(e, meta.ensemble_size, meta.write_quorum_size)]
            ok = [per[b][1] for b in members if b in per and per[b][0] == "ok"]
            if ok:
                found.append(ok[0])
                continue
            absent = sum(1 for b in members if b in per and per[b][0] == "absent")
            if absent >= self.need:
                return True, found, e
            return False, found, e  # undecided: ask again
        return True, found, None

    def _replicate(self, entries: list) -> set[str]:  # type: ignore[type-arg]
        """Recovery adds: write each found entry to its whole write set and wait (bounded) for the
        answers. Returns the bookies that failed if some entry reached fewer than A of them."""
        if not entries:
            return set()
        meta, ensemble = self.meta, self.seg.bookies
        failed: set[str] = set()
        per_bookie: dict[str, list[tuple[int, int, bytes]]] = {}
        raw = {}
        for entry in entries:
            data = _reencode(self.digest, self.key, entry)
            raw[entry.entry_id] = data
            for i in write_set(entry.entry_id, meta.ensemble_size, meta.write_quorum_size):
                per_bookie.setdefault(ensemble[i], []).append((entry.entry_id, entry.last_add_confirmed, data))
        acks: dict[int, int] = {e.entry_id: 0 for e in entries}
        cond = threading.Condition()
        outstanding = [len(per_bookie)]

        def cb_for(bookie_id: str, batch: list[tuple[int, int, bytes]]):  # type: ignore[no-untyped-def]
            def cb(status: Status, message: str) -> None:
                with cond:
                    if status == Status.OK:
                        for eid, _, _ in batch:
                            acks[eid] += 1
                    else:
                        failed.add(bookie_id)
                    outstanding[0] -= 1
                    cond.notify_all()
            return cb

        for b, batch in per_bookie.items():
            if self.ctx.pool.faults.drop("add", b):
                with cond:
                    outstanding[0] -= 1
                    failed.add(b)
                continue
            try:
                self.ctx.pool.get(b).add_batch(self.key, self.master_key, batch, cb_for(b, batch), recovery=True,
                                                  timeout_s=REPLICATE_TIMEOUT_S)
            except LedgerError:
                with cond:
                    outstanding[0] -= 1
                    failed.add(b)
        with cond:
            cond.wait_for(lambda: outstanding[0] == 0, timeout=REPLICATE_TIMEOUT_S + 5)
        if all(n >= meta.ack_quorum_size for n in acks.values()):
            return set()
        log.warning("recovered entries short of the ack quorum ledger=%s failed_bookies=%s", meta.ledger_id, sorted(failed))
        return failed or set(ensemble)


def _reencode(digest: Digest, key: tuple[int, int], entry) -> bytes:  # type: ignore[no-untyped-def]
    from pyspark_ledger.protocol.entry_format import encode_entry

    return encode_entry(digest, key[0], key[1], entry.entry_id, entry.last_add_confirmed, entry.length, entry.payload)


def _close(context: LedgerContext, ledger: LedgerId, last: int, length: int) -> tuple[LedgerMetadata, int]:
    for _ in range(CAS_ATTEMPTS_MAX):
        meta, version = context.ledgers.read(ledger)
        if meta.is_closed:
            if meta.last_entry_id != last:
                log.warning("another recovery closed the ledger first; adopting its end ledger=%s ours=%d theirs=%s",
                            ledger, last, meta.last_entry_id)
            return meta, version
        try:
            new = meta.close(last, length)
            version = context.ledgers.compare_and_set(new, version)
            log.warning("ledger recovered and closed ledger=%s last_entry=%d length=%d", ledger, last, length)
            return new, version
        except BadVersionError:
            continue
    raise ReadError(f"ledger {ledger}: closing after recovery kept conflicting")
