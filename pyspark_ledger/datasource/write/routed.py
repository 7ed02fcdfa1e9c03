"""Routed batch writes: a DataFrame with a `log` column sends each row to the log it names (as
Kafka's sink does with a `topic` column). Each log gets one exactly-once commit, like a one-log
job (job.py); the job as a whole is atomic per log, not across logs.

Driver, when Spark creates the writer (prepare_routed_job): check the columns (columns.py)
and create the job-wide node /staging-routes/<job id> in state "open". Which logs the rows name
is not known yet: the tasks find out.

Executor (write_task.write_routed_task): for each log an attempt meets, list the log under
/staging-routes/<job id>/<log>, create /staging/<log>/<job id>, and write one ledger per
(attempt, log), registered there before anything is written, as a one-log task does. Tasks
check the job-wide node's state, so an attempt that outlives the job stops.

Driver, commit: the job-wide node "open" -> "committing" (late attempts now stop; every log an
attempt registered in is listed by now), then log by log, in name order: take the log over
(bump its writer epoch, fence and close its unsealed ledgers; create it if missing) and commit it
as a one-log job does (writer.commit_job: ONE compare-and-set appends that log's ledgers in
partition order). A failure at log k leaves the logs before k committed (whole) and every other
log untouched: their staged ledgers are deleted, and the error is raised. Spark's abort() then
cleans what is left; a ledger that a commit published is never deleted.

abort: every listed log's staged ledgers are deleted (or marked), no log is touched.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from metadata import MetadataError, NoNodeError
from metadata.paths import staging_route_path, staging_routes_path
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.write.columns import WriteLayout
from pyspark_ledger.datasource.write.job import (
    JOB_ABORTING,
    JOB_COMMITTED,
    JOB_COMMITTING,
    JOB_OPEN,
    TaskResult,
    WriteJob,
    _check_overwritable,
    _job_state,
    _job_value,
    abort_job,
    commit_job,
)
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.takeover import take_over

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)


def prepare_routed_job(opts: LedgerSourceOptions, job_id: str, layout_of: Callable[[str], WriteLayout],
                       overwrite: bool) -> WriteJob:
    """Driver side: the job every task derives its per-log jobs from (log_name is filled per log)."""
    layout = layout_of(opts.payload_format or "raw")
    base = WriteJob(opts, "", job_id, layout.payload_format, layout.schema_json, overwrite, key_type=layout.key_type,
                    gate_path=staging_routes_path(job_id))
    with lease_client(opts) as client:
        client.store.create(staging_routes_path(job_id), _job_value(JOB_OPEN, base))
    log.info("routed write job prepared job=%s format=%s overwrite=%s", job_id, layout.payload_format, overwrite)
    return base


def _set_gate(base: WriteJob, client: LedgerClient, expected: tuple[str, ...], state: str) -> None:
    store = client.store
    path = staging_routes_path(base.job_id)
    got = store.get(path)
    current = None if got is None else _job_state(got.value)
    if got is None or current not in expected:
        raise LedgerSourceError(f"routed write job {base.job_id} is {current or 'gone'}, expected {'/'.join(expected)}")
    store.compare_and_set(path, _job_value(state, base), got.version)


def _listed_logs(client: LedgerClient, base: WriteJob) -> list[str]:
    try:
        return sorted(client.store.children(staging_routes_path(base.job_id)))
    except NoNodeError:
        return []


def _commit_log(base: WriteJob, name: str, results: list[TaskResult | None]) -> None:
    """Take the log over (creating it if missing), then commit its ledgers in one compare-and-set."""
    job = replace(base, log_name=name)
    with lease_client(base.opts) as client:
        existing = client.logs.get_tail(name)
        if existing is not None and base.overwrite:
            _check_overwritable(existing[0])
        taken = take_over(client, name, base.opts.password, create=existing is None, writer=f"spark job {base.job_id}")
    commit_job(replace(job, epoch=taken.epoch), results)


def _abort_logs(base: WriteJob, names: Iterable[str]) -> None:
    for name in names:
        try:
            abort_job(replace(base, log_name=name))
        except (MetadataError, LedgerError) as exc:
            log.warning("abort of a routed log incomplete log=%s job=%s error=%s", name, base.job_id, exc)


def _drop_gate(client: LedgerClient, base: WriteJob, names: Iterable[str]) -> None:
    store = client.store
    for path in [*(staging_route_path(base.job_id, n) for n in names), staging_routes_path(base.job_id)]:
        try:
            store.delete(path)
        except NoNodeError:
            pass
        except MetadataError as exc:  # a late attempt listed a log meanwhile: it removes the node itself
            log.info("routed job node left for a late attempt path=%s error=%s", path, exc)


def commit_routed_job(base: WriteJob, results: list[TaskResult | None]) -> None:
    """Driver: commit every log the tasks wrote to, one compare-and-set per log (see the module)."""
    by_log: dict[str, list[TaskResult | None]] = defaultdict(list)
    for r in results:
        if r is not None and r.ledger_id is not None:
            by_log[r.log_name].append(r)
    with lease_client(base.opts) as client:
        _set_gate(base, client, (JOB_OPEN,), JOB_COMMITTING)
        listed = sorted(set(_listed_logs(client, base)) | set(by_log))
    done: list[str] = []
    for name in listed:
        if name not in by_log:
            _abort_logs(base, [name])  # only failed attempts wrote to it: nothing to commit
            continue
        try:
            _commit_log(base, name, by_log[name])
        except BaseException:
            log.warning("routed write stopped at log=%s job=%s: committed %s, not committing %s", name, base.job_id,
                        done, [n for n in listed if n not in done])
            _abort_logs(base, [n for n in listed if n not in done])
            raise
        done.append(name)
    with lease_client(base.opts) as client:
        try:
            _set_gate(base, client, (JOB_COMMITTING,), JOB_COMMITTED)
        except (MetadataError, LedgerSourceError) as exc:
            log.warning("could not record the routed job as committed (its logs are) job=%s error=%s", base.job_id, exc)
        _drop_gate(client, base, listed)
    log.info("routed write job committed job=%s logs=%s", base.job_id, json.dumps(done))


def abort_routed_job(base: WriteJob) -> None:
    """Driver: the job failed. No log is touched; every listed log's staged ledgers are deleted."""
    with lease_client(base.opts) as client:
        try:
            _set_gate(base, client, (JOB_OPEN, JOB_COMMITTING, JOB_ABORTING), JOB_ABORTING)
        except (LedgerSourceError, MetadataError) as exc:
            log.warning("abort: %s", exc)
        listed = _listed_logs(client, base)
    _abort_logs(base, listed)
    with lease_client(base.opts) as client:
        _drop_gate(client, base, listed)
    log.info("routed write job aborted job=%s logs=%s", base.job_id, json.dumps(listed))
