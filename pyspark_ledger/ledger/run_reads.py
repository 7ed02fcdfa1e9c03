"""Bulk reads of one ledger as verified runs of consecutive entries: how a planner that bounded its
ranges by the LAC or last entry already (the Spark data source) reads them.

Fast path (every bookie of the fragment holds every entry, W == E, the common case): one
run-encoded range read (bookie.proto ReadRequest.entry_runs: one buffer plus lengths per run of
consecutive entries, so no side builds a message or object per entry) of a window from one
replica, verified in bulk by the entry format's run decoder (protocol/entry_runs.py). Callers
number their windows and each window starts at the next replica, so one range keeps several
bookies busy. Any trouble in a window (transport error, bad status, missing, corrupt or
malformed entry) hands the rest of that window to ReadHandle.read_planned, the client's one
failover path (each entry from its write set, speculative reads, read repair, the entry decoder),
and later windows start from the replica after the one that failed. Striped fragments (W < E)
read through read_planned throughout. Reads never go past what the caller asks for.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pyarrow as pa

from bookie.status import Status
from metadata import LedgerMetadata
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import Credentials, resolve_keys
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.protocol.entry_runs import DecodedRun, decode_blob
from pyspark_ledger.transport.run_response import Run, RunResponse

log = logging.getLogger(__name__)

RUN_RPC_TIMEOUT_S = 30.0
WINDOW_RPCS_MAX = 256  # follow-up reads inside one window (a response may stop at its byte cap)


def _status_name(code: int) -> str:
    """A status code from the wire, named (or shown as a number if this client does not know it)."""
    try:
        return Status(code).name
    except ValueError:
        return f"unknown status {code}"


class RunReads:
    """Windows of one ledger's entries, verified, as runs (DecodedRun). `views`: payloads as
    zero-copy buffers (few large entries) instead of one contiguous binary array (many small
    ones). Thread-safe: windows may be read by several threads at once; they share only the
    failover handle (made under a lock) and the preferred replica (an int: a stale read of it
    just sends one window to a replica that had failed, which fails over again)."""

    def __init__(self, context: LedgerContext, metadata: LedgerMetadata, version: int, credentials: Credentials, *,
                 views: bool, first_replica: int = 0, max_bytes: int = 16 * 2**20):
        assert max_bytes > 0, "a window's answer needs a byte bound"
        keys = resolve_keys(metadata, credentials)
        self._ctx = context
        self._metadata = metadata
        self._version = version
        self._credentials = credentials
        self._digest = keys.digest
        self._master_key = keys.master_key  # reads carry it (bookies with --require-read-auth)
        self._key = (metadata.ledger_id.scope_id, metadata.ledger_id.id)
        self._views = views
        self._max_bytes = max_bytes
        self._fast = metadata.write_quorum_size == metadata.ensemble_size
        self.replica = first_replica
        self._handle: ReadHandle | None = None
        self._handle_lock = threading.Lock()

    def read(self, window_no: int, first: int, last: int) -> list[DecodedRun]:
        """Entries first..last (one fragment's), verified, in order."""
        if first < 0 or last < first:
            raise LedgerError(f"bad entry range {first}..{last}")
        if not self._fast:
            return self._slow(first, last)
        ensemble = self._metadata.ensemble_for(first)
        runs: list[DecodedRun] = []
        nxt = first
        for _ in range(WINDOW_RPCS_MAX):
            if nxt > last:
                return runs
            replica = (self.replica + window_no) % len(ensemble)
            bookie = ensemble[replica]
            got, problem = self._read_runs(bookie, nxt, last)
            runs.extend(got)
            nxt += sum(r.count for r in got)
            if problem is None:
                continue
            # Something is wrong with this replica for entry `nxt`: read the rest of the window
            # with per-entry failover, and start later windows at the next replica.
            log.warning("fast read failed over ledger=%s bookie=%s entries=%d..%d problem=%s",
                        self._metadata.ledger_id, bookie, nxt, last, problem)
            self.replica = (replica + 1 - window_no) % len(ensemble)
            runs.extend(self._slow(nxt, last))
            return runs
        raise LedgerError(f"ledger {self._metadata.ledger_id}: window {first}..{last} needed more than "
                          f"{WINDOW_RPCS_MAX} reads")

    def _slow(self, first: int, last: int) -> list[DecodedRun]:
        """first..last through the handle's failover reads (each entry from its write set)."""
        with self._handle_lock:
            if self._handle is None:
                self._handle = ReadHandle(self._ctx, self._metadata, self._version, self._credentials)
            handle = self._handle
        payloads = [e.payload for e in handle.read_planned(first, last)]
        if self._views:
            return [DecodedRun(first, [pa.py_buffer(p) for p in payloads])]
        return [DecodedRun(first, pa.array(payloads, pa.binary()))]

    def _read_runs(self, bookie: str, first: int, last: int) -> tuple[list[DecodedRun], str | None]:
        """One run-encoded range read of first..last from `bookie`: the verified runs from `first`
        on, and what stopped them (None when the answer just ended early, at the bookie's count or
        byte bound)."""
        pool = self._ctx.pool
        try:
            if pool.faults.drop("read", bookie):  # the client's test seam
                raise LedgerError(f"read to {bookie} dropped")
            resp = pool.get(bookie).read_runs(
                self._key, first, last, max_entries=last - first + 1, max_bytes=self._max_bytes,
                timeout_s=RUN_RPC_TIMEOUT_S, master_key=self._master_key,
            )
        except LedgerError as exc:
            return [], str(exc)
        if resp.status != Status.OK:
            return [], f"status {_status_name(resp.status)}"
        return self._decode_answer(resp, first, last)

    def _decode_answer(self, resp: RunResponse, first: int, last: int) -> tuple[list[DecodedRun], str | None]:
        """Verify a run answer's runs in id order from `first`; stop at the first entry that is
        not OK, fails verification, or that the answer skips (a malformed answer)."""
        others = dict(zip(resp.entry_ids, resp.entry_status))  # the entries that are not OK
        out: list[DecodedRun] = []
        nxt = first
        for run in resp.runs:
            if run.first_entry_id != nxt:
                break
            decoded = self._decode(run, last - nxt + 1)
            if decoded.count:
                out.append(decoded)
                nxt += decoded.count
            if decoded.error is not None:
                return out, decoded.error
        if nxt in others:
            return out, f"entry {nxt}: status {_status_name(others[nxt])}"
        answered_to = max([r.first_entry_id + len(r.lengths) - 1 for r in resp.runs] + list(others), default=-1)
        if nxt <= answered_to or nxt == first:
            return out, f"malformed answer: entry {nxt} is missing from it"
        return out, None

    def _decode(self, run: Run, room: int) -> DecodedRun:
        """Verify one EntryRun (at most `room` entries: what was asked for)."""
        lengths = np.array(run.lengths, dtype=np.int64)
        if len(lengths) > room:
            return DecodedRun(run.first_entry_id, [], f"malformed answer: a run of {len(lengths)} entries, {room} asked for")
        return decode_blob(self._digest, self._key[0], self._key[1], run.first_entry_id, run.data, lengths,
                           views=self._views)

    def close(self) -> None:
        with self._handle_lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()
