"""Ledger recovery ("Closing a ledger as a reader", reference/bookkeeper-protocol.md).

The rules live in pyspark_ledger.protocol.recovery_plan; this module drives them with bookie
RPCs and metadata compare-and-sets:
1. Mark the ledger IN_RECOVERY by compare-and-set (a stalled recovery may be taken over).
2. Fence every bookie of the last fragment until, in every write set, W-A+1 bookies answered.
3. Read forward from the highest LAC they reported in windows bounded in entries and bytes; a
   short answer (the bookie's byte limit) moves the next window forward (the loop's decisions
   are protocol.recovery_reader's pure state machine, which the simulator drives too).
4. Re-replicate every entry found to its write set in bounded batches; a dead replica moves
   the tail to a new fragment in this recovery's view only (protocol.ensemble_change.
   recovery_fragments): the metadata names a newcomer only in the close, once it holds the
   entries, so a later recovery never counts a newcomer's "no such entry" as a vote of absence.
5. Close by compare-and-set before the first absent entry, with the recovery's fragments, if the
   fragments are still those read (close_rules.recovery_close_verdict; else read again from
   where they part), or adopt another recovery's close.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from bookie.status import Status
from metadata import BadVersionError, LedgerId, LedgerMetadata, LedgerState, Segment
from pyspark_ledger.errors import DigestMismatchError, EntryFormatError, LedgerError, ReadError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import Credentials, resolve_keys
from pyspark_ledger.protocol.close_rules import RecoveryCloseVerdict, first_changed_entry, recovery_close_verdict
from pyspark_ledger.protocol.digest import LedgerKeys
from pyspark_ledger.protocol.distribution import byte_bounded_chunks, covers_every_write_set, write_set_of
from pyspark_ledger.protocol.ensemble_change import recovery_fragments
from pyspark_ledger.protocol.entry_format import Entry, decode_entry, encode_copy
from pyspark_ledger.protocol.recovery_plan import (
    REPLICATE_BATCH_BYTES_MAX,
    REPLICATE_BATCH_ENTRIES_MAX,
    Answer,
    ReadWindow,
    recovery_start,
)
from pyspark_ledger.protocol.recovery_reader import Fail, Read, ReaderCommand, RecoveryReader, RetryAfter

log = logging.getLogger(__name__)

FENCE_ROUNDS_MAX = 5
FENCE_TIMEOUT_S = 10.0
REPLICATE_TIMEOUT_S = 30.0
CAS_ATTEMPTS_MAX = 50
ENSEMBLE_CHANGES_MAX = 3
REREADS_MAX = 3  # fragments changed under the recovery's copies: read again at most this often
RETRY_DELAY_S = 0.2

# One bookie's answers: a present entry carries its copy, an unknown one why (for debugging).
BookieAnswers = dict[int, tuple[Answer, "Entry | str | None"]]


def _copies(answers: BookieAnswers) -> dict[int, tuple[Answer, Entry | None]]:
    """What the recovery reader decides on: each answer with the copy of a present entry."""
    return {e: (answer, value if isinstance(value, Entry) else None) for e, (answer, value) in answers.items()}


class RecoveryError(LedgerError):
    retriable = True


def recover_ledger(ctx: LedgerContext, ledger: LedgerId, credentials: Credentials) -> tuple[LedgerMetadata, int]:
    """Recover (fence and close) a ledger; returns its CLOSED metadata and version.
    credentials: the ledger's password, or an operator's keys (ledger/keys.py)."""
    meta, version = ctx.ledgers.read(ledger)
    if meta.is_closed:
        return meta, version
    keys = resolve_keys(meta, credentials)
    meta, version = ctx.ledgers.update(ledger, lambda m: None if m.state is not LedgerState.OPEN else m.start_recovery())
    if meta.is_closed:
        return meta, version
    log.info("recovering ledger ledger=%s", ledger)  # normal work: a writer is gone or fenced
    ctx.metrics.recoveries.inc()
    with ThreadPoolExecutor(max_workers=max(8, meta.ensemble_size * 2), thread_name_prefix="recovery") as pool:
        r = _Recovery(ctx, meta, keys, pool)
        start, length = r.fence()
        for _ in range(REREADS_MAX + 1):
            last, length = r.read_forward(start, length)
            closed = _close(ctx, ledger, last, length, r.read_meta, r.meta)
            if closed is not None:
                return closed
            # A concurrent recovery changed the fragments under this one's copies: read again
            # from where they part, on the fragments as they are now (close_rules).
            now, _ = ctx.ledgers.read(ledger)
            changed = first_changed_entry(_fragments(now), _fragments(r.read_meta))
            start = start if changed is None else min(start, changed)
            r.meta, r.read_meta, r.replaced, r.seg = now, now, {}, now.segments[-1]
            length = r._length_before(start)
            log.info("fragments changed under the recovery; reading again ledger=%s from_entry=%d", ledger, start)
    raise RecoveryError(f"ledger {ledger}: its fragments kept changing under the recovery")


def _fragments(meta: LedgerMetadata) -> list[tuple[int, tuple[str, ...]]]:
    return [(seg.first_entry_id, tuple(seg.bookies)) for seg in meta.segments]


class _Recovery:
    def __init__(self, ctx: LedgerContext, meta: LedgerMetadata, keys: LedgerKeys, pool: ThreadPoolExecutor):
        self.ctx, self.meta, self.pool = ctx, meta, pool
        # `meta` is this recovery's view: the metadata read (`read_meta`) plus its own
        # replacements (`replaced`), which are written only with the close.
        self.read_meta = meta
        self.replaced: dict[str, str] = {}
        self.key = (meta.ledger_id.scope_id, meta.ledger_id.id)
        self.master_key = keys.master_key
        self.digest = keys.digest
        self.seg = meta.segments[-1]

    def members_of(self, entry_id: int) -> tuple[str, ...]:
        """The entry's write set in the fragment that holds it (not always the last one: a
        recovery reading again after a concurrent change may start in an earlier fragment)."""
        return write_set_of(entry_id, self.meta.ensemble_for(entry_id), self.meta.write_quorum_size)

    def bookies_from(self, start: int) -> tuple[str, ...]:
        """Every bookie of a fragment that holds entries from `start` on."""
        segs = self.meta.segments
        return tuple(sorted({b for i, seg in enumerate(segs)
                             if i + 1 == len(segs) or segs[i + 1].first_entry_id > start for b in seg.bookies}))

    # ---- 2. fencing ---------------------------------------------------------------------------

    def fence(self) -> tuple[int, int]:
        """Fence the last fragment; returns (first entry to read, ledger length before it)."""
        meta = self.meta
        answered: dict[str, int] = {}
        for round_ in range(FENCE_ROUNDS_MAX):
            todo = [b for b in self.seg.bookies if b not in answered]
            futures = {b: self.pool.submit(self._fence_one, b) for b in todo}
            for b, f in futures.items():
                lac = f.result()
                if lac is not None:
                    answered[b] = lac
            if covers_every_write_set(self.seg.bookies, meta.write_quorum_size, meta.ack_quorum_size, answered):
                break
            log.warning("fencing incomplete, retrying ledger=%s answered=%s round=%d", meta.ledger_id, sorted(answered), round_)
            time.sleep(RETRY_DELAY_S * (round_ + 1))
        else:
            raise RecoveryError(
                f"ledger {meta.ledger_id}: could not fence W-A+1={meta.write_quorum_size - meta.ack_quorum_size + 1} "
                f"bookies in every write set of {list(self.seg.bookies)} (answered: {sorted(answered)})"
            )
        start = recovery_start(answered, self.seg.first_entry_id)
        log.info("ledger fenced for recovery ledger=%s lacs=%s start=%d", meta.ledger_id, answered, start)
        return start, self._length_before(start)

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
        meta = self.meta
        for b in write_set_of(e, meta.ensemble_for(e), meta.write_quorum_size):
            answer, entry = self._read_copy(b, ReadWindow(e, e, 1), fence=False).get(e, (Answer.UNKNOWN, None))
            if answer is Answer.PRESENT and isinstance(entry, Entry):  # a present answer carries its copy
                return entry.length
        raise RecoveryError(f"ledger {meta.ledger_id}: acknowledged entry {e} is unreadable on every replica")

    # ---- 3. reading forward -------------------------------------------------------------------

    def _read_copy(self, bookie_id: str, window: ReadWindow, fence: bool) -> BookieAnswers:
        """One bookie's answers for a window: present (an intact copy), absent, or unknown. Entries
        past the bookie's byte limit are simply not answered (the next window asks again)."""
        first, last = window.first, window.last
        if self.ctx.pool.faults.drop("read", bookie_id):
            return {}
        try:
            resp = self.ctx.pool.get(bookie_id).read(
                self.key, first, last, max_entries=last - first + 1, max_bytes=window.max_bytes, fence=fence,
                master_key=self.master_key, timeout_s=FENCE_TIMEOUT_S,
            )
        except LedgerError as exc:
            return {first: (Answer.UNKNOWN, str(exc))}
        if resp.status == Status.NO_SUCH_LEDGER:
            return {e: (Answer.ABSENT, None) for e in range(first, last + 1)}
        if resp.status != Status.OK:
            return {first: (Answer.UNKNOWN, Status(resp.status).name)}
        out: BookieAnswers = {}
        for eid, st, data in zip(resp.entry_ids, resp.entry_status, resp.entries):
            if st == Status.OK:
                try:
                    out[eid] = (Answer.PRESENT, decode_entry(self.digest, data, self.key[0], self.key[1], eid))
                except (DigestMismatchError, EntryFormatError) as exc:
                    out[eid] = (Answer.UNKNOWN, f"corrupt copy: {exc}")  # a bad copy is not an absent one
            elif st == Status.NO_SUCH_ENTRY:
                out[eid] = (Answer.ABSENT, None)
            else:
                out[eid] = (Answer.UNKNOWN, Status(st).name)
        return out

    def read_forward(self, start: int, length: int) -> tuple[int, int]:
        """Find every recoverable entry from `start`, then re-replicate them; returns (last entry, length).

        The decisions (windows, merging, stalls) are protocol.recovery_reader's; this drives its
        reads. Entries are collected first and replicated at the end, so that an ensemble change
        needed for a dead replica (a new fragment from `start`) never changes where the reads
        look. What is collected is bounded by what a writer may have in flight."""
        meta = self.meta
        reader: RecoveryReader[Entry] = RecoveryReader(
            start, self.members_of, bookies=self.bookies_from(start), write_quorum_size=meta.write_quorum_size,
            ack_quorum_size=meta.ack_quorum_size)
        cmd: ReaderCommand = reader.first_command()
        while isinstance(cmd, (Read, RetryAfter)):
            if isinstance(cmd, RetryAfter):
                time.sleep(RETRY_DELAY_S * cmd.stalled)
            window = cmd.window
            futures = {b: self.pool.submit(self._read_copy, b, window, True) for b in cmd.bookies}
            for b, f in futures.items():
                reader.on_answers(b, _copies(f.result()))
            cmd = reader.end_round()
        if isinstance(cmd, Fail):
            raise RecoveryError(f"ledger {meta.ledger_id}: {cmd.message}")
        found: list[Entry] = cmd.found
        if found:
            length = found[-1].length
        self._replicate_all(start, found)
        return cmd.last_entry, length

    # ---- 4. re-replication --------------------------------------------------------------------

    def _replicate_all(self, start: int, entries: list[Entry]) -> None:
        """Re-replicate; if a replica is down, move the tail to a new fragment (IN_RECOVERY) and retry."""
        for attempt in range(ENSEMBLE_CHANGES_MAX + 1):
            failed = self._replicate(entries)
            if not failed:
                return
            if attempt == ENSEMBLE_CHANGES_MAX:
                break
            self._replace_in_last_fragment(start, failed)
        raise RecoveryError(f"ledger {self.meta.ledger_id}: recovered entries could not reach "
                            f"A={self.meta.ack_quorum_size} bookies")

    def _replace_in_last_fragment(self, start: int, failed: set[str]) -> None:
        """Replace failed bookies of the last fragment from `start` on, in this recovery's view
        only (protocol.ensemble_change.recovery_fragments): the metadata names the newcomers
        only in the close CAS, once they hold the entries. Recorded earlier, a newcomer's "no
        such entry" could make a later recovery truncate an acknowledged entry."""
        current = self.meta.segments[-1].bookies
        exclude = set(current) | failed | set(self.replaced.values())
        for b in sorted(failed):
            self.ctx.pool.quarantine(b)
            if b in current:
                repl = self.ctx.placement.replacement(current, self.ctx.pool.writable(exclude=exclude), failed=b,
                                                      write_quorum_size=self.meta.write_quorum_size)
                self.replaced[b] = repl
                exclude.add(repl)
        fragments = recovery_fragments(_fragments(self.read_meta), self.replaced, start)
        self.meta = dataclasses.replace(self.read_meta, segments=tuple(Segment(f, b) for f, b in fragments))
        self.seg = self.meta.segments[-1]
        log.info("recovery replaces bookies (recorded with the close) ledger=%s from_entry=%d ensemble=%s failed=%s",
                    self.meta.ledger_id, self.seg.first_entry_id, list(self.seg.bookies), sorted(failed))

    def _replicate(self, entries: list[Entry]) -> set[str]:
        """Recovery adds: write each found entry to its whole write set in batches bounded in
        entries and bytes, and wait (bounded) for the answers. Returns the bookies that failed if
        some entry reached fewer than A of them."""
        if not entries:
            return set()
        meta = self.meta
        per_bookie: dict[str, list[tuple[int, int, bytes]]] = {}
        for entry in entries:
            data = encode_copy(self.digest, self.key[0], self.key[1], entry)
            for b in self.members_of(entry.entry_id):
                per_bookie.setdefault(b, []).append((entry.entry_id, entry.last_add_confirmed, data))
        batches = [(b, chunk) for b, items in per_bookie.items()
                   for chunk in byte_bounded_chunks(items, lambda item: len(item[2]),
                                                    REPLICATE_BATCH_ENTRIES_MAX, REPLICATE_BATCH_BYTES_MAX)]
        acks, failed = _send_recovery_adds(self.ctx, self.key, self.master_key, batches)
        if all(acks.get(e.entry_id, 0) >= meta.ack_quorum_size for e in entries):
            return set()
        log.warning("recovered entries short of the ack quorum ledger=%s failed_bookies=%s", meta.ledger_id, sorted(failed))
        return failed or set(self.seg.bookies)


def _send_recovery_adds(ctx: LedgerContext, key: tuple[int, int], mk: bytes,
                        batches: Sequence[tuple[str, list[tuple[int, int, bytes]]]]) -> tuple[dict[int, int], set[str]]:
    """Send every batch (recovery adds are accepted on fenced ledgers); returns acks per entry and
    the bookies that failed a batch. A bookie counts for an entry only if its batch succeeded."""
    acks: dict[int, int] = {}
    failed: set[str] = set()
    cond = threading.Condition()
    outstanding = [len(batches)]

    def cb_for(bookie_id: str, batch: list[tuple[int, int, bytes]]) -> Callable[[Status, str], None]:
        def cb(status: Status, message: str) -> None:
            with cond:
                if status == Status.OK:
                    for eid, _, _ in batch:
                        acks[eid] = acks.get(eid, 0) + 1
                else:
                    failed.add(bookie_id)
                outstanding[0] -= 1
                cond.notify_all()
        return cb

    for b, batch in batches:
        if b in failed or ctx.pool.faults.drop("add", b):
            with cond:
                outstanding[0] -= 1
                failed.add(b)
            continue
        try:
            ctx.pool.get(b).add_batch(key, mk, batch, cb_for(b, batch), recovery=True, timeout_s=REPLICATE_TIMEOUT_S)
        except LedgerError:
            with cond:
                outstanding[0] -= 1
                failed.add(b)
    with cond:
        cond.wait_for(lambda: outstanding[0] == 0, timeout=REPLICATE_TIMEOUT_S + 5)
    return acks, failed


def _close(ctx: LedgerContext, ledger: LedgerId, last: int, length: int, read: LedgerMetadata,
           view: LedgerMetadata) -> tuple[LedgerMetadata, int] | None:
    """Close at `last` with the recovery's fragments (`view`: those `read`, plus its own
    replacement), or adopt the end another recovery closed the ledger at. None if the fragments
    are no longer those the recovery read (recovery_close_verdict)."""
    for _ in range(CAS_ATTEMPTS_MAX):
        meta, version = ctx.ledgers.read(ledger)
        verdict = recovery_close_verdict(meta.state.value, _fragments(meta), _fragments(read))
        if verdict is RecoveryCloseVerdict.ADOPT:
            if meta.last_entry_id != last:
                log.info("another recovery closed the ledger first; adopting its end ledger=%s ours=%d theirs=%s",
                            ledger, last, meta.last_entry_id)
            return meta, version
        if verdict is RecoveryCloseVerdict.REPLICATE_AGAIN:
            return None
        try:
            new = dataclasses.replace(meta, segments=view.segments).close(last, length)
            version = ctx.ledgers.compare_and_set(new, version)
            log.info("ledger recovered and closed ledger=%s last_entry=%d length=%d", ledger, last, length)
            return new, version
        except BadVersionError:
            continue
    raise ReadError(f"ledger {ledger}: closing after recovery kept conflicting")
