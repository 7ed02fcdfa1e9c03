"""Committed batch ids of a log's writers, one record per writer/query id (issue 19 item 3).

    /logs/<name>/queries/<hex of the query id>    ASCII decimal: the last committed batch id

The head (metadata.log_segments) carries only the (query id, batch id) of the LAST commit, in the
same CAS as the commit's ledgers: that CAS is the commit point. The per-query records are
written idempotently (raised to the max, never lowered): the previous head's pair before the
next head CAS, the new pair after it. So the truth for a query id is max(its record, the head's
pair), whatever point a writer crashed at, and the number of query ids has no fixed cap."""

from __future__ import annotations

from metadata.errors import BadVersionError, InvalidMetadataError, NodeExistsError
from metadata.paths import log_queries_path
from metadata.store import MetadataStore

RAISE_ATTEMPTS_MAX = 16  # CAS retries of one idempotent raise (concurrent writers of one query)


def query_path(log_name: str, query_id: str) -> str:
    # Hex keeps any writer id inside the path alphabet and collision free.
    encoded = query_id.encode().hex()
    if not encoded or len(encoded) > 255:
        raise InvalidMetadataError(f"bad query id {query_id!r}: 1-127 bytes")
    return f"{log_queries_path(log_name)}/{encoded}"


def read_batch(store: MetadataStore, log_name: str, query_id: str) -> int | None:
    got = store.get(query_path(log_name, query_id))
    return None if got is None else int(got.value.decode())


def raise_batch(store: MetadataStore, log_name: str, query_id: str, batch_id: int) -> None:
    """Make the record say at least `batch_id`; a replay of the same write changes nothing."""
    path = query_path(log_name, query_id)
    value = str(batch_id).encode()
    for _ in range(RAISE_ATTEMPTS_MAX):
        got = store.get(path)
        try:
            if got is None:
                store.create(path, value)
            elif int(got.value.decode()) < batch_id:
                store.compare_and_set(path, value, got.version)
            return
        except (NodeExistsError, BadVersionError):
            continue
    raise InvalidMetadataError(f"log {log_name!r}: query {query_id!r} record kept changing; gave up")
