"""Batch writes, executor side: one task attempt writes its rows to a ledger of its own.

On the first row the attempt creates a ledger and registers it at /staging/<log>/<job id>/<ledger>
*before* writing, then checks the job is still open (a late duplicate attempt of a finished job
deletes its ledger and stops). It writes the rows (raw: one row = one entry; arrow: a bounded
batch of rows = one entry, an Arrow IPC stream), seals the ledger, checks every entry was
acknowledged, and returns a TaskResult naming it. A failing attempt seals its ledger with a BP-44
close context marking it for deletion, deletes it, and unregisters it. The job and the driver's
commit and abort are in job.py.

A routed write (a `log` column, routed.py) does the same per log the attempt meets: one
ledger per (attempt, log), each registered under /staging/<log>/<job id>, the log first listed
under /staging-routes/<job id>, and the job-wide node's state checked instead of the log's.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from metadata import CloseContext, CreateContext, LedgerState, MetadataError, NodeExistsError, NoNodeError
from metadata.context import now_ms
from metadata.paths import staging_ledger_path, staging_log_path, staging_route_path
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import this_host
from pyspark_ledger.datasource.write import encode
from pyspark_ledger.datasource.write.batch_pack import BatchLimits
from pyspark_ledger.datasource.write.columns import RoutingError, check_against_log
from pyspark_ledger.datasource.write.job import (
    JOB_OPEN,
    TaskResult,
    WriteJob,
    _job_state,
    _job_value,
    abnormal_close_context,
    delete_or_mark,
)
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.protocol.arrow_times import TIMED_LEDGER_KEY, TIMED_LEDGER_VALUE
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, ENTRY_FORMAT_KEY

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.ledger.write_handle import WriteHandle
    from pyspark_ledger.transport.add_future import AddFuture

log = logging.getLogger(__name__)

# Adds a task keeps in flight: enough to batch well, few enough that one add's latency (the
# bookies' backlog) stays far below the add timeout on a busy machine.
INFLIGHT_ENTRIES_MAX = 4_096
INFLIGHT_BYTES_MAX = 32 * 2**20
ADD_RUN_ENTRIES = 256  # raw entries added between two looks at the bounds
ADD_RUN_BYTES = 8 * 2**20  # and bytes (Arrow entries are large: a run stays well under the handle's bounds)
ADD_WAIT_TIMEOUT_S = 120.0
# BP-44 hints for a task's ledger: an attempt that is open longer than this is an orphan.
TASK_LEDGER_MAX_OPEN = timedelta(hours=24)
# A routed task keeps one ledger open per log it meets (each with its adds in flight).
ROUTED_LOGS_PER_TASK_MAX = 64


def _ledger_custom(job: WriteJob) -> dict[str, bytes] | None:
    """A batched raw job's ledger is a format-3 ledger: every entry a message batch
    (entry_format.py); an Arrow job's ledger says its entries carry their append times
    (protocol/arrow_times.py)."""
    if job.payload_format == "arrow":
        return {TIMED_LEDGER_KEY: TIMED_LEDGER_VALUE}
    return {ENTRY_FORMAT_KEY: str(BATCH_FORMAT_VERSION).encode()} if job.batched else None


class _TaskLedger:
    """The ledger of one task attempt, registered in staging before anything is written."""

    def __init__(self, client: LedgerClient, job: WriteJob, partition_id: int, attempt_number: int,
                 task_attempt_id: int):
        o = job.opts
        ctx = CreateContext.builder().created_by("", "spark", f"job {job.job_id}", this_host())
        if o.owner is not None:
            p = o.owner
            ctx = ctx.created_on_behalf_of(p.enterprise, p.system, p.service, p.instance)
        ctx = ctx.part_of_data_set(o.data_set or f"log:{job.log_name}").expected_max_open_duration(TASK_LEDGER_MAX_OPEN)
        self.client = client
        self.password = o.password
        self.handle: WriteHandle = client.create_ledger(
            o.ensemble_size, o.write_quorum_size, o.ack_quorum_size, o.digest_type, o.password,
            create_context=ctx.build(),
            custom=_ledger_custom(job),
        )
        self.ledger_id = self.handle.ledger_id
        self.node = staging_ledger_path(job.log_name, job.job_id, self.ledger_id)
        info = {"partition": partition_id, "attempt": attempt_number, "taskAttemptId": task_attempt_id,
                "host": this_host(), "timeMs": now_ms()}
        try:
            client.store.create(self.node, json.dumps(info).encode())
            # Registered first, checked second: either commit/abort sees this node, or this
            # attempt sees the job is no longer open. A linearizable store rules out both missing.
            job_node = client.store.get(job.gate)
            state = None if job_node is None else _job_state(job_node.value)
            if state != JOB_OPEN:
                raise LedgerSourceError(
                    f"write job {job.job_id} on log {job.log_name!r} is {state or 'gone'}: this attempt "
                    f"(partition {partition_id}, attempt {attempt_number}) is a late duplicate and stops"
                )
        except BaseException as exc:
            self.discard(f"{exc}")
            _remove_implicit_parents(client, job)
            raise
        self.entries = 0
        # Added, not yet known acknowledged: (future of a run's last entry, entries, bytes) per run.
        self._inflight: deque[tuple[AddFuture, int, int]] = deque()
        self._inflight_entries = 0
        self._inflight_bytes = 0

    def add(self, payload: bytes) -> None:
        self.add_all([payload])

    def add_all(self, payloads: list[bytes]) -> None:
        """Add entries in order, as runs (WriteHandle.add_entries_async: one submit step and one
        future per run, run-encoded to bookies of wire version 2) of at most ADD_RUN_ENTRIES
        entries and ADD_RUN_BYTES bytes (one entry more than that alone): the bookkeeping and the
        bounds check are per run, not per entry."""
        add_run = self.handle.add_entries_async
        at, count = 0, len(payloads)
        while at < count:
            end, size = at + 1, len(payloads[at])
            while end < count and end - at < ADD_RUN_ENTRIES and size + len(payloads[end]) <= ADD_RUN_BYTES:
                size += len(payloads[end])
                end += 1
            last = add_run(payloads[at:end])
            n, at = end - at, end
            self._inflight.append((last, n, size))
            self.entries += n
            self._inflight_entries += n
            self._inflight_bytes += size
            if self._inflight_entries > INFLIGHT_ENTRIES_MAX or self._inflight_bytes > INFLIGHT_BYTES_MAX:
                self._drain()

    def _drain(self) -> None:
        """Wait until at most half the bounds are in flight, once, on the newest run drained:
        completions are in entry order, so it succeeding means every older one did."""
        inflight, last = self._inflight, None
        while inflight and (self._inflight_entries > INFLIGHT_ENTRIES_MAX // 2 or self._inflight_bytes > INFLIGHT_BYTES_MAX // 2):
            last, n, size = inflight.popleft()
            self._inflight_entries -= n
            self._inflight_bytes -= size
        if last is not None:
            last.result(timeout=ADD_WAIT_TIMEOUT_S)

    def wait_acknowledged(self) -> None:
        """Completions are in entry order: the last add acknowledged means all of them were."""
        if self._inflight:
            self._inflight[-1][0].result(timeout=ADD_WAIT_TIMEOUT_S)
            self._inflight.clear()
            self._inflight_entries = self._inflight_bytes = 0

    def seal(self) -> tuple[int, int]:
        """Close the ledger; check that exactly the entries this attempt added are in it."""
        self.wait_acknowledged()
        self.handle.close(CloseContext.builder().because_no_more_data().build())
        meta = self.handle.metadata
        if meta.state is not LedgerState.CLOSED or meta.last_entry_id != self.entries - 1:
            raise LedgerError(
                f"ledger {self.ledger_id}: sealed at entry {meta.last_entry_id} but {self.entries} entries were written"
            )
        return self.entries, int(meta.length_bytes or 0)

    def discard(self, reason: str) -> None:
        """A failed attempt: seal it marked for deletion, delete it, unregister it. Best effort:
        whatever is left stays registered in staging for commit()/abort() to finish."""
        ctx = abnormal_close_context(reason)
        try:
            self.handle.close(ctx)
        except Exception as exc:  # noqa: BLE001 - the ledger is deleted next anyway
            log.info("could not seal a failed attempt's ledger ledger=%s error=%s", self.ledger_id, exc)
        if delete_or_mark(self.client, self.ledger_id, reason, self.password):
            try:
                self.client.store.delete(self.node)
            except NoNodeError:
                pass
            except MetadataError as exc:
                log.warning("could not unregister a deleted ledger from staging node=%s error=%s", self.node, exc)


def _remove_implicit_parents(client: LedgerClient, job: WriteJob) -> None:
    """After a late attempt unregistered itself: the job is finished, and the driver may have
    failed to delete the job node because this attempt's node was there, or this attempt's
    registration re-created it (create makes missing parents, with empty values). Remove the
    job node and the log's staging node if they are empty and the job is not open (a routed
    job: its log's node and its entry in the job's list of logs, if the job is not open)."""
    gate = client.store.get(job.gate)
    if gate is not None and _job_state(gate.value) == JOB_OPEN:
        return
    paths = [job.staging_path, staging_log_path(job.log_name)]
    if job.gate_path is not None:
        paths += [staging_route_path(job.job_id, job.log_name), job.gate_path]
    for path in paths:
        try:
            got = client.store.get(path)
            if got is None or client.store.children(path) or (path == job.gate and _job_state(got.value) == JOB_OPEN):
                continue
            client.store.delete(path, got.version)
        except MetadataError as exc:
            log.debug("staging node left in place path=%s reason=%s", path, exc)


def _inject_failure(job: WriteJob, partition_id: int, attempt_number: int, ledger: _TaskLedger) -> None:
    """Testing hook (testFailAttempts/testFailMode): fail attempts < N after their first
    batch is acknowledged, so a failed attempt leaves a ledger with data behind."""
    if attempt_number >= job.opts.test_fail_attempts:
        return
    ledger.wait_acknowledged()
    log.warning("injected failure partition=%d attempt=%d ledger=%s mode=%s", partition_id, attempt_number,
                ledger.ledger_id, job.opts.test_fail_mode)
    if job.opts.test_fail_mode == "exit":
        os._exit(17)  # a crashed worker: no cleanup runs, only staging finds the ledger
    raise LedgerSourceError(f"injected failure (testFailAttempts) in partition {partition_id} attempt {attempt_number}")


class _LogOutput:
    """What one task attempt writes to one log: its ledger (made at the first row) and, for
    Arrow, the packer that cuts its rows into entries."""

    def __init__(self, client: LedgerClient, job: WriteJob, ids: tuple[int, int, int]):
        self.client = client
        self.job = job
        self.ids = ids  # partition id, attempt number, task attempt id
        self.ledger: _TaskLedger | None = None
        self.packer: ArrowEntryPacker | None = None
        self.batcher: encode.RawBatcher | None = None  # batched raw writes (job.batched)
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> _TaskLedger:
        job = self.job
        if self.ledger is None:
            self.ledger = _TaskLedger(self.client, job, *self.ids)
        ledger = self.ledger
        self.rows += batch.num_rows
        if job.payload_format == "raw" and job.batched:
            if self.batcher is None:
                limits = BatchLimits(job.opts.batch_max_messages, job.opts.batch_max_bytes)
                self.batcher = encode.RawBatcher(job.key_type is not None, limits, job.opts.event_time_column)
            ledger.add_all(self.batcher.add(batch, now_ms()))
            return ledger
        if job.payload_format == "raw":
            ledger.add_all(encode.raw_entries(batch, job.key_type is not None, job.opts.event_time_column))
            return ledger
        if self.packer is None:
            self.packer = ArrowEntryPacker(batch.schema, job.opts.arrow_batch_rows, job.opts.arrow_compression,
                                           clock_ms=now_ms)  # each entry its append time (_ledger_custom)
        for entry in self.packer.add(batch):
            ledger.add(entry.to_pybytes())  # the one copy the client would make anyway
        return ledger

    def finish(self) -> TaskResult:
        """Flush, seal, and say what was written (no ledger: the task met no row for this log)."""
        partition_id, attempt_number, task_attempt_id = self.ids
        ledger = self.ledger
        if ledger is None:
            return TaskResult(partition_id, attempt_number, task_attempt_id, None, 0, 0, 0, self.job.log_name)
        if self.packer is not None:
            for entry in self.packer.flush():
                ledger.add(entry.to_pybytes())
        if self.batcher is not None:
            ledger.add_all(self.batcher.flush(now_ms()))
        entries, size = ledger.seal()
        log.info("task wrote ledger=%s log=%s partition=%d attempt=%d rows=%d entries=%d bytes=%d", ledger.ledger_id,
                 self.job.log_name, partition_id, attempt_number, self.rows, entries, size)
        # What the entries were stamped with (the driver's commit records it: LogLedger.append_times_ms).
        stamper = self.packer if self.packer is not None else self.batcher
        return TaskResult(partition_id, attempt_number, task_attempt_id, ledger.ledger_id, entries, size, self.rows,
                          self.job.log_name, stamper.stamped_ms if stamper is not None else None)

    def discard(self, reason: str) -> None:
        if self.ledger is not None:
            self.ledger.discard(reason)


def write_task(job: WriteJob, batches: Iterator[pa.RecordBatch], partition_id: int, attempt_number: int,
               task_attempt_id: int) -> TaskResult:
    """Executor side: write this attempt's rows to a new ledger and seal it."""
    with lease_client(job.opts) as client:
        out = _LogOutput(client, job, (partition_id, attempt_number, task_attempt_id))
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                ledger = out.write(batch)
                if job.opts.test_fail_attempts:
                    _inject_failure(job, partition_id, attempt_number, ledger)
            return out.finish()
        except BaseException as exc:
            out.discard(f"spark task attempt failed: {exc!r}")
            raise


def _met_log(client: LedgerClient, job: WriteJob) -> None:
    """A routed task's first row for a log: list the log in the job (before any ledger of it is
    registered, so the commit finds it), make the log's staging node, and check the log can take
    these rows (the commit checks again, in its compare-and-set)."""
    for path, value in ((staging_route_path(job.job_id, job.log_name), b""), (job.staging_path, _job_value(JOB_OPEN, job))):
        try:
            client.store.create(path, value)
        except NodeExistsError:
            pass
    existing = client.logs.get_tail(job.log_name)
    if existing is not None and not job.overwrite:
        check_against_log(existing[0], job.layout)


def write_routed_task(base: WriteJob, batches: Iterator[pa.RecordBatch], partition_id: int, attempt_number: int,
                      task_attempt_id: int) -> list[TaskResult]:
    """Executor side of a routed write (a `log` column): one ledger per log this attempt meets,
    each sealed at the end; at most ROUTED_LOGS_PER_TASK_MAX logs."""
    with lease_client(base.opts) as client:
        outs: dict[str, _LogOutput] = {}
        ids = (partition_id, attempt_number, task_attempt_id)
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                for name, rows in encode.split_by_log(batch):
                    out = outs.get(name)
                    if out is None:
                        if len(outs) >= ROUTED_LOGS_PER_TASK_MAX:
                            raise RoutingError(
                                f"a task met more than {ROUTED_LOGS_PER_TASK_MAX} logs in column `log` (each gets a ledger "
                                "open until the task ends): write fewer logs per job, or repartition by log")
                        job = replace(base, log_name=name)
                        _met_log(client, job)
                        out = outs[name] = _LogOutput(client, job, ids)
                    ledger = out.write(rows)
                    if base.opts.test_fail_attempts:
                        _inject_failure(out.job, partition_id, attempt_number, ledger)
            return [out.finish() for out in outs.values()]
        except BaseException as exc:
            for out in outs.values():
                out.discard(f"spark task attempt failed: {exc!r}")
            raise
