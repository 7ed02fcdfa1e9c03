"""Where things live in the metadata store. One layout for both stores.

    /ledgers/<s0>/<s1>/<s2>/<s3>/<l0>/<l1>/<l2>/<l3>   ledger metadata (LedgerMetadata, serde envelope)
    /idgen/<counter>                                   id allocation counters (scope 0 ledger ids)
    /bookies/available/<bookie id>                     ephemeral bookie registrations (JSON BookieInfo)
    /bookies/cookies/<bookie id>                       bookie cookies (identity; persistent)
    /logs/<log name>                                   named logs (metadata.logs: a head, /segments, /queries)
    /logs/<log name>/subscriptions/<name>              a log's durable named subscriptions (metadata.subscriptions)
    /orphans/<qualified name>                          orphaned ledgers found by the auditor (BP-44)
    /staging/<log>/<job id>/<qualified name>           a Spark write's task ledgers before its commit
    /staging-routes/<job id>/<log>                     the logs a Spark write routed rows to (its `log` column)
    /underreplicated/<qualified name>                  under-replication marks (metadata.underreplication)
    /autorecovery/auditor                              ephemeral: the elected autorecovery auditor
    /autorecovery/locks/<qualified name>               ephemeral: a replication worker's claim on a mark
    /autorecovery/bookies/<bookie id>                  the auditor's view of a bookie (state, since when)
    /autorecovery/scan                                 the auditor's scan cursor (a new auditor resumes it)
    /autorecovery/swaps/<qualified name>/<fragment>_<bookie>  a prepared replica swap (two-phase change)
    /cluster/settings                                  settings every client and bookie shares (JSON, metadata.cluster_settings)

Ledger ids: the 128-bit id (scope id, then ledger id) is written as 32 hex digits and cut into
eight levels of 4 hex digits. No parent ever holds more than 65,536 children, however many
ledgers exist, in scope 0 (the allocator fills the last levels in order) or in UUID scopes (the
first levels spread randomly). Scope 0 ledgers all live under /ledgers/0000/0000/0000/0000. The
path of a ledger is a pure function of its id, so no index is needed to find it, and a scan of
one scope walks only that scope's subtree.
"""

from __future__ import annotations

import re

from metadata.errors import InvalidMetadataError
from metadata.ids import LedgerId

LEDGERS = "/ledgers"
IDGEN = "/idgen"
BOOKIES_AVAILABLE = "/bookies/available"
BOOKIE_COOKIES = "/bookies/cookies"
LOGS = "/logs"
ORPHANS = "/orphans"
UNDERREPLICATED = "/underreplicated"
AUTORECOVERY = "/autorecovery"
AUDITOR_ELECTION = "/autorecovery/auditor"
REPLICATION_LOCKS = "/autorecovery/locks"
AUDITED_BOOKIES = "/autorecovery/bookies"
AUDITOR_SCAN = "/autorecovery/scan"
REPLICA_SWAPS = "/autorecovery/swaps"
LEDGER_RESHAPES = "/autorecovery/reshapes"  # expand / contract records (pyspark_ledger/autorecovery/reshape.py)
STAGING = "/staging"  # Spark writes (pyspark_ledger/datasource/write/job.py, streaming.py)
STAGING_ROUTES = "/staging-routes"  # Spark writes with a `log` column (pyspark_ledger/datasource/write/routed.py)
SINK_EPOCHS = "/sink-epochs"  # the writer epoch each streaming query's run holds (datasource/stream/sink_epoch.py)
CLUSTER_SETTINGS = "/cluster/settings"  # metadata/cluster_settings.py: one JSON object, unknown keys kept
SINK_PROGRESS = "/sink-progress"  # what each streaming query appended (datasource/stream/sink_progress.py)

LEDGER_PATH_LEVELS = 8
SCOPE_PATH_LEVELS = 4
_LEVEL_RE = re.compile(r"[0-9a-f]{4}")
_NAME_RE = re.compile(r"[A-Za-z0-9._:\-]{1,255}")


def ledger_path(lid: LedgerId) -> str:
    q = lid.qualified_name
    return LEDGERS + "".join("/" + q[i : i + 4] for i in range(0, 32, 4))


def scope_path(scope_id: int) -> str:
    q = f"{scope_id:016x}"
    return LEDGERS + "".join("/" + q[i : i + 4] for i in range(0, 16, 4))


def ledger_id_from_path(path: str) -> LedgerId:
    if not path.startswith(LEDGERS + "/"):
        raise InvalidMetadataError(f"not a ledger path: {path}")
    parts = path[len(LEDGERS) + 1 :].split("/")
    if len(parts) != LEDGER_PATH_LEVELS or not all(_LEVEL_RE.fullmatch(p) for p in parts):
        raise InvalidMetadataError(f"not a ledger path: {path}")
    return LedgerId.from_qualified_name("".join(parts))


def check_name(kind: str, name: str) -> str:
    """Bookie ids, log names and counters become one path component: keep them to a safe alphabet."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in (".", ".."):
        raise InvalidMetadataError(
            f"bad {kind} name {name!r}: use 1-255 characters from letters, digits, '.', '_', ':', '-'"
        )
    return name


def bookie_path(bookie_id: str) -> str:
    return f"{BOOKIES_AVAILABLE}/{check_name('bookie id', bookie_id)}"


def cookie_path(bookie_id: str) -> str:
    return f"{BOOKIE_COOKIES}/{check_name('bookie id', bookie_id)}"


def log_path(name: str) -> str:
    return f"{LOGS}/{check_name('log', name)}"


def counter_path(counter: str) -> str:
    return f"{IDGEN}/{check_name('counter', counter)}"


def orphan_path(lid: LedgerId) -> str:
    return f"{ORPHANS}/{lid.qualified_name}"


def log_segments_path(name: str) -> str:
    """Parent of a log's immutable segment records (metadata.log_segments)."""
    return f"{log_path(name)}/segments"


def log_segment_path(name: str, index: int) -> str:
    # Fixed width so children() sorts segments in log order.
    return f"{log_segments_path(name)}/{index:012d}"


def log_queries_path(name: str) -> str:
    """Parent of a log's per-query committed batch records."""
    return f"{log_path(name)}/queries"


def log_subscriptions_path(name: str) -> str:
    """Parent of a log's durable subscriptions (metadata.subscriptions): deleted with the log."""
    return f"{log_path(name)}/subscriptions"


def subscription_path(log: str, name: str) -> str:
    return f"{log_subscriptions_path(log)}/{check_name('subscription', name)}"


def underreplicated_path(lid: LedgerId) -> str:
    return f"{UNDERREPLICATED}/{lid.qualified_name}"


def replication_lock_path(lid: LedgerId) -> str:
    return f"{REPLICATION_LOCKS}/{lid.qualified_name}"


def audited_bookie_path(bookie_id: str) -> str:
    return f"{AUDITED_BOOKIES}/{check_name('bookie id', bookie_id)}"


def ledger_swaps_path(lid: LedgerId) -> str:
    return f"{REPLICA_SWAPS}/{lid.qualified_name}"


def ledger_reshape_path(lid: LedgerId) -> str:
    return f"{LEDGER_RESHAPES}/{lid.qualified_name}"


def replica_swap_path(lid: LedgerId, fragment: int, bookie_id: str) -> str:
    return f"{ledger_swaps_path(lid)}/{fragment:06d}_{check_name('bookie id', bookie_id)}"


def staging_log_path(log: str) -> str:
    """Parent of every Spark write job staging ledgers for `log`."""
    return f"{STAGING}/{check_name('log', log)}"


def staging_job_path(log: str, job_id: str) -> str:
    """One write job's (or micro-batch's) staging node for `log`: its state, and its task ledgers as children."""
    return f"{staging_log_path(log)}/{check_name('write job id', job_id)}"


def staging_ledger_path(log: str, job_id: str, lid: LedgerId) -> str:
    """A task attempt's ledger, registered before anything is written to it."""
    return f"{staging_job_path(log, job_id)}/{lid.qualified_name}"


def staging_routes_path(job_id: str) -> str:
    """A write job with a `log` column: its state, and the logs its tasks met as children."""
    return f"{STAGING_ROUTES}/{check_name('write job id', job_id)}"


def staging_route_path(job_id: str, log: str) -> str:
    return f"{staging_routes_path(job_id)}/{check_name('log', log)}"


def sink_epochs_path(log: str) -> str:
    """Parent of the writer epochs the streaming queries writing `log` hold (deleted with the log)."""
    return f"{SINK_EPOCHS}/{check_name('log', log)}"


def sink_epoch_path(log: str, query_id: str) -> str:
    return f"{sink_epochs_path(log)}/{check_name('streaming query id', query_id)}"


def sink_progress_log_path(log: str) -> str:
    """Parent of the rows/bytes records of the streaming queries writing `log` (deleted with the log)."""
    return f"{SINK_PROGRESS}/{check_name('log', log)}"


def sink_progress_path(log: str, query_id: str) -> str:
    return f"{sink_progress_log_path(log)}/{check_name('streaming query id', query_id)}"
