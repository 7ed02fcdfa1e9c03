"""Copy one fragment's entries to a replacement bookie as their stored bytes (bulk re-replication).

Entries are read from surviving replicas as run-encoded range reads (bookie.proto
ReadRequest.entry_runs: one buffer per run, no per-entry message work), each entry's header and
digest checked once (entry_format.decode_entry on a view of the answer), and the very bytes read
are forwarded in batched recovery adds: no decode into payloads and re-encode. Sends are
asynchronous, bounded by IN_FLIGHT_BYTES_MAX and IN_FLIGHT_BATCHES_MAX, so the next window is read
while the previous one is written; each batch first takes its bytes from the shared CopyPace.

Which replica: entry e's survivors are the bookies of its write set other than the lost one, in
write-set order. Round r asks every missing entry's r-th survivor (one range read per bookie and
window, continued when the answer stops at the bookie's byte bound); an entry a survivor lacks or
holds a damaged copy of goes to the next round. An entry no survivor gives back fails the copy
(LedgerError): the swap stays PREPARED and a retry copies again (recovery adds overwrite).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookie.status import Status
from metadata import LedgerMetadata, write_set
from pyspark_ledger.autorecovery.copy_pace import CopyPace
from pyspark_ledger.errors import LedgerError, PySparkLedgerError
from pyspark_ledger.protocol.digest import LedgerKeys
from pyspark_ledger.protocol.distribution import byte_bounded_chunks
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.protocol.invariants import ensure
from pyspark_ledger.protocol.recovery_plan import REPLICATE_BATCH_ENTRIES_MAX

if TYPE_CHECKING:
    from pyspark_ledger.ledger.context import LedgerContext
    from pyspark_ledger.transport.bookie_client import BookieClient

log = logging.getLogger(__name__)

COPY_TIMEOUT_S = 60.0
# Bytes and batches one copy has sent and not yet had acknowledged. A replacement's journal writes
# its adds in arrival order, so a writer's small add waits behind every copy byte queued there:
# with 16 MiB per copy and 4 copies a running writer fell to 0.14 of its rate (1 GB bench), with
# 4 MiB in batches of 1 MiB it kept about half (issue 30's report). The bookie now journals recovery
# adds as bulk items (bookie/storage/journal_queue.py): at most BULK_GROUP_BYTES_MAX (512 KiB) of
# them ride in one group commit, so a batch is at most that too (a batch is one journal item),
# and 4 of them, 2 MiB, still cover a round trip at the default 50 MB/s many times over.
IN_FLIGHT_BYTES_MAX = 4 * 2**20
IN_FLIGHT_BATCHES_MAX = 4
COPY_BATCH_BYTES_MAX = 512 * 2**10  # also below a bookie's pending-add limit (64 MiB by default)
READ_ANSWER_BYTES_MAX = 8 * 2**20  # per range read; the bookie caps it too (READ_RESPONSE_BYTES_MAX)
READS_PER_SOURCE_MAX = 4096  # continued range reads of one bookie in one window (each returns >= 1 entry)

# (entries, bytes) of each batch the replacement acknowledged
Copied = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class FragmentCopy:
    """What to copy: entries `needed` (ascending) of `meta`'s fragment `index`, off `lost`."""

    meta: LedgerMetadata
    index: int
    lost: str
    needed: Sequence[int]

    def survivors(self, entry_id: int) -> list[str]:
        ensemble = self.meta.segments[self.index].bookies
        return [ensemble[i] for i in write_set(entry_id, self.meta.ensemble_size, self.meta.write_quorum_size)
                if ensemble[i] != self.lost]


class Sender:
    """Batched recovery adds to one bookie, several in flight (bounded), answers counted."""

    def __init__(self, target: BookieClient, key: tuple[int, int], master_key: bytes, pace: CopyPace | None,
                 on_copied: Copied):
        self.target, self.key, self.master_key, self.pace = target, key, master_key, pace
        self.on_copied = on_copied
        self._cond = threading.Condition()
        self._batches = self._bytes = 0
        self._acked: list[tuple[int, int]] = []  # reported from the sending thread, never a callback's
        self._error: str | None = None

    def send(self, batch: list[tuple[int, int, bytes]]) -> None:
        n = sum(len(item[2]) for item in batch)
        if self.pace is not None:
            self.pace.acquire(n)
        with self._cond:
            room = self._cond.wait_for(lambda: self._error is not None or self._batches == 0 or (
                self._batches < IN_FLIGHT_BATCHES_MAX and self._bytes + n <= IN_FLIGHT_BYTES_MAX),
                timeout=COPY_TIMEOUT_S + 5)
            self._check(room, batch)
            self._batches, self._bytes = self._batches + 1, self._bytes + n
        first, last = batch[0][0], batch[-1][0]

        def answered(status: Status, message: str) -> None:
            with self._cond:
                self._batches, self._bytes = self._batches - 1, self._bytes - n
                if status == Status.OK:
                    self._acked.append((len(batch), n))
                elif self._error is None:
                    self._error = f"entries {first}..{last}: {status.name} {message}".strip()
                self._cond.notify_all()

        self.target.add_batch(self.key, self.master_key, batch, answered, recovery=True, timeout_s=COPY_TIMEOUT_S)
        self._report()

    def drain(self) -> None:
        """Wait for every answer; LedgerError if any batch failed."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._batches == 0, timeout=COPY_TIMEOUT_S + 5)
            self._check(done, None)
        self._report()

    def _check(self, waited: bool, batch: list[tuple[int, int, bytes]] | None) -> None:
        where = f"copying to bookie {self.target.bookie_id}"
        if self._error is not None:
            raise LedgerError(f"{where} failed: {self._error}")
        if not waited:
            what = "room to send" if batch is not None else "the last answers"
            raise LedgerError(f"{where}: no {what} after {COPY_TIMEOUT_S + 5:g} s")

    def _report(self) -> None:
        with self._cond:
            acked, self._acked = self._acked, []
        for entries, n in acked:
            self.on_copied(entries, n)


def copy_fragment_raw(context: LedgerContext, plan: FragmentCopy, new: str, keys: LedgerKeys,
                      windows: Iterator[tuple[int, int]], pace: CopyPace | None, on_copied: Copied) -> None:
    """Copy plan.needed to bookie `new`, window by window (first..last ranges covering them)."""
    meta = plan.meta
    key = (meta.ledger_id.scope_id, meta.ledger_id.id)
    sender = Sender(context.pool.get(new), key, keys.master_key, pace, on_copied)
    wanted = set(plan.needed)
    copied = 0
    for first, last in windows:
        todo = [e for e in range(first, last + 1) if e in wanted]
        if not todo:
            continue
        got = _read_window(context, plan, key, keys, todo)
        items = [(e, lac, data) for e, (lac, data) in sorted(got.items())]
        for batch in byte_bounded_chunks(iter(items), lambda item: len(item[2]),
                                         REPLICATE_BATCH_ENTRIES_MAX, COPY_BATCH_BYTES_MAX):
            sender.send(batch)
        copied += len(items)
    sender.drain()
    ensure(copied == len(plan.needed), f"ledger {meta.ledger_id} fragment {plan.index}: copied {copied} of "
                                       f"{len(plan.needed)} entries")


def _read_window(context: LedgerContext, plan: FragmentCopy, key: tuple[int, int], keys: LedgerKeys,
                 todo: list[int]) -> dict[int, tuple[int, bytes]]:
    """entry -> (its LAC, its stored bytes, checked) for every entry of `todo`, or LedgerError."""
    got: dict[int, tuple[int, bytes]] = {}
    sources = {e: plan.survivors(e) for e in todo}
    problems: dict[int, list[str]] = {}
    rounds = max((len(s) for s in sources.values()), default=0)
    for r in range(rounds):
        by_bookie: dict[str, list[int]] = {}
        for e in todo:
            if e not in got and r < len(sources[e]):
                by_bookie.setdefault(sources[e][r], []).append(e)
        for bookie_id, entries in by_bookie.items():
            _read_from(context, bookie_id, key, keys, entries, got, problems)
    missing = [e for e in todo if e not in got]
    if missing:
        detail = "; ".join(f"{e}: {', '.join(problems.get(e, ['not answered']))}" for e in missing[:5])
        raise LedgerError(f"ledger {plan.meta.ledger_id} fragment {plan.index}: {len(missing)} entries no "
                          f"surviving replica gave back ({detail})")
    return got


def _read_from(context: LedgerContext, bookie_id: str, key: tuple[int, int], keys: LedgerKeys, entries: list[int],
               got: dict[int, tuple[int, bytes]], problems: dict[int, list[str]]) -> None:
    """Range-read min(entries)..max(entries) of one bookie in runs; keep the wanted entries whose
    header and digest check out, as the bytes read (copied once out of the answer)."""
    wanted = set(entries)
    nxt, last = entries[0], entries[-1]
    for _ in range(READS_PER_SOURCE_MAX):
        if nxt > last:
            return
        try:
            if context.pool.faults.drop("read", bookie_id):  # the client's test seam
                raise LedgerError(f"read to {bookie_id} dropped")
            status, items = _answer(context.pool.get(bookie_id), key, nxt, last, keys.master_key)
        except PySparkLedgerError as exc:
            _note(problems, wanted, nxt, last, f"{bookie_id}: {exc}")
            return
        if status != Status.OK:
            _note(problems, wanted, nxt, last, f"{bookie_id}: status {Status(status).name}")
            return
        answered_to = nxt - 1
        for e, entry_status, data in items:
            answered_to = max(answered_to, e)
            if e not in wanted or e in got:
                continue
            if entry_status == Status.OK and data is not None:
                _keep(keys, key, bookie_id, e, data, got, problems)
            else:
                problems.setdefault(e, []).append(f"{bookie_id}: {Status(entry_status).name}")
        if answered_to < nxt:
            _note(problems, wanted, nxt, last, f"{bookie_id}: an empty answer")
            return
        nxt = answered_to + 1
    raise LedgerError(f"reading {entries[0]}..{entries[-1]} from {bookie_id} took over {READS_PER_SOURCE_MAX} reads")


AnswerItem = tuple[int, int, "bytes | memoryview | None"]  # entry id, status, stored bytes when OK


def _answer(bookie: BookieClient, key: tuple[int, int], first: int, last: int,
            master_key: bytes) -> tuple[int, list[AnswerItem]]:
    """One range read, in runs. A bookie that predates run answers (ReadRequest.entry_runs is a
    field it does not know) answers entry by entry, its OK entries then listed by id without
    their bytes: those are read again the old way (one bytes field per entry)."""
    resp = bookie.read_runs(key, first, last, max_entries=min(last - first + 1, 65_536),
                            max_bytes=READ_ANSWER_BYTES_MAX, timeout_s=COPY_TIMEOUT_S, master_key=master_key)
    items: list[AnswerItem] = []
    for run in resp.runs:
        offset = 0
        for i, length in enumerate(run.lengths):
            items.append((run.first_entry_id + i, int(Status.OK), run.data[offset:offset + length]))
            offset += length
    others = list(zip(resp.entry_ids, resp.entry_status))
    if resp.status != Status.OK or not any(st == Status.OK for _e, st in others):
        return resp.status, items + [(e, st, None) for e, st in others]
    old = bookie.read(key, first, last, max_entries=min(last - first + 1, 65_536), max_bytes=READ_ANSWER_BYTES_MAX,
                      master_key=master_key, timeout_s=COPY_TIMEOUT_S)
    return old.status, [(e, st, data if st == Status.OK else None)
                        for e, st, data in zip(old.entry_ids, old.entry_status, old.entries)]


def _keep(keys: LedgerKeys, key: tuple[int, int], bookie_id: str, entry_id: int, data: bytes | memoryview,
          got: dict[int, tuple[int, bytes]], problems: dict[int, list[str]]) -> None:
    raw = bytes(data)  # the one copy out of the answer: what the add request carries
    try:
        entry = decode_entry(keys.digest, raw, key[0], key[1], entry_id)  # the one check: header and digest
    except PySparkLedgerError as exc:
        log.warning("a replica's copy failed its check; trying another bookie=%s entry=%d error=%s",
                    bookie_id, entry_id, exc)
        problems.setdefault(entry_id, []).append(f"{bookie_id}: {exc}")
        return
    got[entry_id] = (entry.last_add_confirmed, raw)


def _note(problems: dict[int, list[str]], wanted: set[int], first: int, last: int, why: str) -> None:
    for e in wanted:
        if first <= e <= last:
            problems.setdefault(e, []).append(why)
