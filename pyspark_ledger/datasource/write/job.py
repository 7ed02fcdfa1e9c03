"""Batch writes: one ledger per task attempt, one compare-and-set per job.

Driver, when Spark creates the writer (prepare_job): decide the payload format, check the
DataFrame against the log (format, Arrow schema), create the log if it is missing, and create
the job's staging node /staging/<log>/<job id> in state "open". The job id is made here and
travels to the executors inside the pickled writer.

Executor, per task attempt (task.py): on the first row, create a ledger and register it at
/staging/<log>/<job id>/<ledger> *before* writing, then check the job is still open (a late
duplicate attempt of a finished job deletes its ledger and stops). Write the rows (raw: one row
= one entry; arrow: a bounded batch of rows = one entry, an Arrow IPC stream), seal the ledger,
check every entry was acknowledged, and return a TaskResult naming it. A failing attempt seals
its ledger with a BP-44 close context marking it for deletion, deletes it, and unregisters it.

Driver, commit: job state "open" -> "committing" (late attempts now stop themselves), then ONE
compare-and-set of the log record appends the committed ledgers in partition order and records
the schema (overwrite: the same change also moves every old ledger to pending deletions, which
trim_log then deletes). Only then is anything deleted: every staged ledger that is not in the
commit (failed attempts, duplicate attempts, attempts Spark reported as None) is deleted, or
marked for deletion if it cannot be. abort: the same cleanup, and the log is never touched.

Spark passes commit() only one message per partition and abort() None for failed tasks that
wrote data; the staging nodes are how the driver finds every ledger regardless.

A DataFrame with a `log` column (columns.py) is a routed write: routed.py runs one
such job per log its tasks met, committed log by log.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from metadata import (
    BadVersionError,
    CloseContext,
    LedgerId,
    MetadataError,
    NoNodeError,
    NoSuchLedgerError,
    OutcomeUnknownError,
)
from metadata.context import now_ms
from metadata.log_record import MESSAGE_FORMAT_BATCHED, LogRecord
from metadata.logs import NoSuchLogError
from metadata.paths import staging_job_path, staging_ledger_path, staging_log_path
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import (
    LedgerSourceOptions,
    this_host,
)
from pyspark_ledger.datasource.write.columns import WriteLayout, check_against_log
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.errors import StaleEpochError
from pyspark_ledger.log.takeover import check_epoch, take_over

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

DELETE_ATTEMPTS_MAX = 3
ABNORMAL_MESSAGE_CHARS_MAX = 200
JOB_OPEN, JOB_COMMITTING, JOB_COMMITTED, JOB_ABORTING = "open", "committing", "committed", "aborting"


@dataclass(frozen=True)
class WriteJob:
    """Made on the driver, pickled to every task and back to commit()/abort()."""

    opts: LedgerSourceOptions
    log_name: str
    job_id: str
    payload_format: str  # "raw" | "arrow"
    schema_json: str | None  # the Spark schema recorded in the log (Arrow logs)
    overwrite: bool
    # The log's writer epoch this job took when it started (a takeover); its commit appends only
    # while the epoch is still its own. None: the job holds no epoch (the streaming sink's base
    # job: the query takes its epoch on its first commit, see stream/sink.py).
    epoch: int | None = None
    # Raw writes with a `key` column: its type ("binary" | "string"); each entry frames the key
    # (keyed_entries.py). None: entries are the payload alone.
    key_type: str | None = None
    # A routed write (a `log` column): the job-wide node whose state tasks check, instead of
    # this log's staging node (routed.py). None: an ordinary one-log job.
    gate_path: str | None = None
    # Raw rows packed into message batches (entry format 3; batches_allowed): its ledgers are
    # created as format-3 ledgers and its commit marks the log "batched".
    batched: bool = False

    @property
    def staging_path(self) -> str:
        return staging_job_path(self.log_name, self.job_id)

    @property
    def gate(self) -> str:
        """The node whose state says whether the job still takes task output ("open")."""
        return self.gate_path or self.staging_path

    @property
    def layout(self) -> WriteLayout:
        return WriteLayout(self.payload_format, self.gate_path is not None, self.key_type, self.schema_json)


@dataclass(frozen=True)
class TaskResult:
    """One attempt's output: its sealed ledger (None if the partition was empty)."""

    partition_id: int
    attempt_number: int
    task_attempt_id: int
    ledger_id: LedgerId | None
    entry_count: int
    size_bytes: int
    rows: int
    log_name: str = ""  # the log it is for (routed writes; "" in a one-log job)
    # The earliest and latest append time its entries carry (Arrow entries, message batches), for
    # the log record (LogLedger.append_times_ms); None: its entries carry none.
    append_times_ms: tuple[int, int] | None = None


# ---- driver: preparing a job --------------------------------------------------------------------------


def _check_compatible(rec: LogRecord, job: WriteJob) -> None:
    """Appending to a log with data: same payload format and recorded schema (columns.py)."""
    if not job.overwrite:
        check_against_log(rec, job.layout)


def _check_overwritable(rec: LogRecord) -> None:
    open_ledgers = [str(lg.ledger_id) for lg in rec.ledgers if not lg.sealed]
    if open_ledgers:
        raise LedgerSourceError(
            f"cannot overwrite log {rec.name!r}: ledgers {open_ledgers} are still open (a producer is writing, or "
            "crashed before closing them: recover them first)"
        )


def _job_value(state: str, job: WriteJob) -> bytes:
    return json.dumps({"state": state, "mode": "overwrite" if job.overwrite else "append",
                       "format": job.payload_format, "host": this_host(), "timeMs": now_ms()}).encode()


def _job_state(value: bytes) -> str | None:
    try:
        return str(json.loads(value)["state"])
    except (ValueError, KeyError, TypeError):
        return None


def batches_allowed(client: LedgerClient, opts: LedgerSourceOptions, payload_format: str) -> bool:
    """Whether a raw write packs rows into message batches: option batching (default true), and
    the cluster setting message_batches on (clients of release 0.1.0 cannot read batches:
    docs/upgrading.md), as for a LogWriter. Arrow entries hold many rows already."""
    return payload_format == "raw" and opts.batching and client.cluster_settings.message_batches


def with_batches(rec: LogRecord, job: WriteJob) -> LogRecord:
    """The log record once the job's ledgers are in it: "batched" when they hold batches."""
    return rec.with_message_format(MESSAGE_FORMAT_BATCHED) if job.batched else rec


def prepare_job(opts: LedgerSourceOptions, job_id: str, layout_of: Callable[[str], WriteLayout],
                overwrite: bool) -> WriteJob:
    """Driver side, when Spark creates the writer: validate, create the log and the job node.
    layout_of(payload format) checks the DataFrame's columns for that format (columns.py)."""
    name = opts.require_log("writing")
    with lease_client(opts) as client:
        existing = client.logs.get_tail(name)  # the head view: format, schema, the open tail
        rec = existing[0] if existing is not None else None
        fmt = opts.payload_format or (rec.payload_format if rec is not None and rec.ledgers else "raw")
        layout = layout_of(fmt)
        job = WriteJob(opts, name, job_id, fmt, layout.schema_json, overwrite, key_type=layout.key_type,
                       batched=batches_allowed(client, opts, fmt))
        if rec is not None:
            _check_compatible(rec, job)
            if overwrite:
                _check_overwritable(rec)
        # The job becomes the log's one writer: a live LogWriter, streaming query or earlier job
        # is fenced (its next commit fails) and every unsealed ledger of the log is closed.
        taken = take_over(client, name, opts.password, create=rec is None, writer=f"spark job {job_id}")
        job = replace(job, epoch=taken.epoch)
        client.store.create(job.staging_path, _job_value(JOB_OPEN, job))
    log.info("write job prepared log=%s job=%s format=%s overwrite=%s epoch=%d", name, job_id, fmt, overwrite,
             taken.epoch)
    return job


def abnormal_close_context(reason: str) -> CloseContext:
    return (CloseContext.builder().closing_abnormally(reason[:ABNORMAL_MESSAGE_CHARS_MAX])
            .expect_delete_after(now_ms()).build())


# ---- driver: commit and abort ---------------------------------------------------------------------------


def delete_or_mark(client: LedgerClient, lid: LedgerId, reason: str, password: bytes = b"") -> bool:
    """Delete a ledger that must not survive. If that is impossible, make sure it carries a close
    context marking it for deletion now, for the orphan auditor. True if it is gone."""
    problem: Exception | None = None
    for _ in range(DELETE_ATTEMPTS_MAX):
        try:
            client.delete_ledger(lid)
            return True
        except NoSuchLedgerError:
            return True
        except BadVersionError as exc:  # its writer changed it meanwhile (ensemble change, close): retry
            problem = exc
        except (MetadataError, LedgerError) as exc:
            problem = exc
            break
    try:
        ctx = abnormal_close_context(reason)
        meta, _ = client.ledgers.read(lid)
        if not meta.is_closed:
            client.open_ledger(lid, recovery=True, password=password).close()  # fence and seal it first
        client.ledgers.update(lid, lambda m: replace(m, close_context=ctx))
        log.warning("ledger could not be deleted, marked for deletion ledger=%s error=%s", lid, problem)
    except Exception as exc:  # noqa: BLE001 - the staging node still names it
        log.warning("ledger could not be deleted nor marked; it stays registered in staging ledger=%s "
                    "delete_error=%s mark_error=%s", lid, problem, exc)
    return False


def _set_job_state(client: LedgerClient, job: WriteJob, expected: tuple[str, ...], state: str) -> None:
    got = client.store.get(job.staging_path)
    if got is None:
        raise LedgerSourceError(f"write job {job.job_id} on log {job.log_name!r}: its staging node {job.staging_path} is gone")
    current = _job_state(got.value)
    if current not in expected:
        raise LedgerSourceError(f"write job {job.job_id} on log {job.log_name!r} is {current}, expected {'/'.join(expected)}")
    client.store.compare_and_set(job.staging_path, _job_value(state, job), got.version)


def _clean_staging(client: LedgerClient, job: WriteJob, keep: Container[LedgerId], reason: str) -> list[LedgerId]:
    """Delete every staged ledger not in `keep`, then the staging nodes. Returns what was deleted."""
    deleted: list[LedgerId] = []
    leftovers = 0
    for qname in client.store.children(job.staging_path):
        try:
            lid = LedgerId.from_qualified_name(qname)
        except MetadataError:
            log.warning("unexpected node in staging, leaving it path=%s/%s", job.staging_path, qname)
            leftovers += 1
            continue
        node = staging_ledger_path(job.log_name, job.job_id, lid)
        if lid not in keep:
            if not delete_or_mark(client, lid, reason, job.opts.password):
                leftovers += 1
                continue  # keep its node: staging still names it
            deleted.append(lid)
        try:
            client.store.delete(node)
        except NoNodeError:
            pass
    if leftovers == 0:
        for path in (job.staging_path, staging_log_path(job.log_name)):
            try:
                client.store.delete(path)
            except NoNodeError:
                pass
            except MetadataError:
                break  # another job of this log is staging (not empty): leave the parent
    return deleted


def _append_change(job: WriteJob, ids: list[LedgerId], sizes: list[tuple[int, int]],
                   times: list[tuple[int, int] | None]) -> Any:
    def change(rec: LogRecord) -> LogRecord:
        if job.epoch is not None:
            check_epoch(rec, job.epoch, f"spark job {job.job_id}")  # stale: nothing is appended
        if job.overwrite:
            _check_overwritable(rec)
            rec = rec.without_ledgers({lg.ledger_id for lg in rec.ledgers})
        else:
            _check_compatible(rec, job)
        return with_batches(rec.with_ledgers_appended(ids, sizes, times).with_schema(job.schema_json, job.payload_format),
                            job)

    return change


def commit_job(job: WriteJob, results: list[TaskResult | None]) -> None:
    """Driver: publish the job's ledgers in one compare-and-set, then clean up staging."""
    chosen: dict[int, TaskResult] = {}
    for r in results:
        if r is not None:
            chosen[r.partition_id] = r
    committed = [chosen[p] for p in sorted(chosen) if chosen[p].ledger_id is not None]
    ids = [r.ledger_id for r in committed if r.ledger_id is not None]
    with lease_client(job.opts) as client:
        _set_job_state(client, job, (JOB_OPEN,), JOB_COMMITTING)
        sizes: list[tuple[int, int]] = []
        for r in committed:
            meta, _ = client.ledgers.read(r.ledger_id)  # type: ignore[arg-type]  # committed: has a ledger
            if not meta.is_closed or meta.last_entry_id != r.entry_count - 1:
                raise LedgerSourceError(f"ledger {r.ledger_id} of partition {r.partition_id} is not sealed as reported")
            sizes.append((r.entry_count, int(meta.length_bytes or 0)))
        try:
            client.logs.update_head(job.log_name, _append_change(job, ids, sizes, [r.append_times_ms for r in committed]))
        except StaleEpochError as exc:
            # Another writer took the log over since this job started: nothing was appended, and
            # the job's ledgers go now (Spark's abort repeats this harmlessly).
            log.warning("write job fenced, nothing committed log=%s job=%s error=%s", job.log_name, job.job_id, exc)
            _abort_staged(client, job)
            raise
        except NoSuchLogError:
            raise LedgerSourceError(f"log {job.log_name!r} was deleted while the job ran; nothing was committed") from None
        except OutcomeUnknownError:
            # The store lost the reply of the compare-and-set: decide from what it holds now.
            if ids and client.logs.lookup(job.log_name).known(ids[0]) is False:
                raise
        try:
            _set_job_state(client, job, (JOB_COMMITTING,), JOB_COMMITTED)
        except (MetadataError, LedgerSourceError) as exc:
            log.warning("could not record the job as committed (the log is committed) job=%s error=%s", job.job_id, exc)
        rows = sum(r.rows for r in committed)
        log.info("write job committed log=%s job=%s ledgers=%d rows=%d overwrite=%s", job.log_name, job.job_id,
                 len(ids), rows, job.overwrite)
        try:
            dropped = _clean_staging(client, job, set(ids), f"not committed by spark job {job.job_id}")
            if dropped:
                log.info("deleted ledgers of failed or duplicate attempts job=%s ledgers=%s", job.job_id,
                         [str(x) for x in dropped])
        except (MetadataError, LedgerError) as exc:
            log.warning("staging cleanup incomplete (the commit stands) job=%s error=%s", job.job_id, exc)
        if job.overwrite:
            from pyspark_ledger.log import trim_log

            try:
                trim_log(client, job.log_name)  # deletes the replaced ledgers (pending deletions)
            except (MetadataError, LedgerError) as exc:
                log.warning("replaced ledgers not deleted yet; the next trim finishes log=%s error=%s", job.log_name, exc)


def _staged(client: LedgerClient, job: WriteJob) -> set[LedgerId]:
    out = set()
    for qname in client.store.children(job.staging_path):
        try:
            out.add(LedgerId.from_qualified_name(qname))
        except MetadataError:
            continue
    return out


def _published(client: LedgerClient, log_name: str, ids: set[LedgerId]) -> set[LedgerId]:
    return client.logs.lookup(log_name).found(ids) if ids else set()


def abort_job(job: WriteJob) -> None:
    """Driver: the job failed. The log is untouched; every staged ledger is deleted (or marked)."""
    with lease_client(job.opts) as client:
        _abort_staged(client, job)


def _abort_staged(client: LedgerClient, job: WriteJob) -> None:
    """The job's staged ledgers that are not in the log are deleted (or marked); the log is untouched."""
    try:
        _set_job_state(client, job, (JOB_OPEN, JOB_COMMITTING, JOB_ABORTING), JOB_ABORTING)
    except LedgerSourceError as exc:
        log.warning("abort: %s", exc)
    except BadVersionError:
        pass  # only this driver changes the job node; a conflict means an earlier abort ran
    # Never delete what is in the log: if a commit got as far as its compare-and-set before
    # failing, its ledgers are published and must stay.
    staged = _staged(client, job)
    published = _published(client, job.log_name, staged)
    if published:
        log.warning("abort after the job's ledgers were published; keeping them job=%s ledgers=%d",
                    job.job_id, len(published))
    dropped = _clean_staging(client, job, published, f"spark job {job.job_id} aborted")
    log.info("write job aborted log=%s job=%s deleted_ledgers=%d", job.log_name, job.job_id, len(dropped))


def new_job_id() -> str:
    return f"{int(time.time()):x}-{os.urandom(6).hex()}"
