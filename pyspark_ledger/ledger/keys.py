"""A ledger's keys for a handle: from its password, or, for an operator, from a bookie.

Clients prove the right to a ledger with its password. Operators (autorecovery, `ledger recover`
run by an administrator) have no ledger passwords: they authenticate to bookies as the operator
(docs/security.md) and ask a bookie that holds a copy for the master key it keeps
(bookie.proto LedgerKey). Copies they write carry that key, so the ledger's own clients can
still fence, read and delete them; "mac" digests are not recomputed but copied as stored
(protocol/digest.py LedgerKeys.for_operator).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from bookie.status import Status
from metadata import LedgerMetadata
from pyspark_ledger.errors import BadPasswordError, BookieRefusedError, LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.protocol.digest import LedgerKeys

log = logging.getLogger(__name__)

KEY_BOOKIES_ASKED_MAX = 8  # bookies asked for a ledger's key before giving up
KEY_RPC_TIMEOUT_S = 5.0

Credentials = bytes | LedgerKeys  # a ledger password, or keys an operator already holds


class OperatorKeyError(LedgerError):
    """No bookie gave the operator a ledger's master key (no operator identity, or no copy left)."""


class OperatorRefusedError(OperatorKeyError):
    """A bookie refused this client as the operator: it presents no or a wrong operator identity."""


def resolve_keys(meta: LedgerMetadata, credentials: Credentials) -> LedgerKeys:
    """The keys for a handle on `meta`: a password is checked against the metadata first."""
    if isinstance(credentials, LedgerKeys):
        return credentials
    if not meta.check_password(credentials):
        raise BadPasswordError(f"wrong password for ledger {meta.ledger_id}")
    return LedgerKeys.from_password(meta.digest_type, credentials)


def operator_keys(context: LedgerContext, meta: LedgerMetadata, avoid: Collection[str] = ()) -> LedgerKeys:
    """The ledger's keys as an operator: the master key from the first bookie of its ensembles
    (those in `avoid`, e.g. a lost bookie, last) that keeps one. Raises OperatorKeyError naming
    every bookie's answer when none does."""
    bookies: list[str] = []
    for seg in meta.segments:
        bookies.extend(b for b in seg.bookies if b not in bookies)
    bookies.sort(key=lambda b: b in avoid)
    key = (meta.ledger_id.scope_id, meta.ledger_id.id)
    answers: list[str] = []
    for bookie_id in bookies[:KEY_BOOKIES_ASKED_MAX]:
        try:
            resp = context.pool.get(bookie_id).ledger_key(key, timeout_s=KEY_RPC_TIMEOUT_S)
        except BookieRefusedError as exc:
            raise OperatorRefusedError(
                f"bookie {bookie_id} refused the operator's request for the key of ledger {meta.ledger_id}: "
                f"{exc} (set the operator secret, LEDGER_OPERATOR_SECRET_FILE, or an operator certificate)"
            ) from None
        except LedgerError as exc:
            answers.append(f"{bookie_id}: {exc}")
            continue
        if resp.status == Status.OK and resp.master_key:
            return LedgerKeys.for_operator(meta.digest_type, bytes(resp.master_key))
        answers.append(f"{bookie_id}: {Status(resp.status).name}")
    raise OperatorKeyError(f"no bookie gave the key of ledger {meta.ledger_id}: {'; '.join(answers) or 'no bookies'}")


class CredentialSource:
    """Per-ledger credentials for operator tools (autorecovery workers, `ledger recover`).

    A non-empty `password` is used for every ledger. Otherwise the tool works as the operator
    (keys from a bookie, operator_keys); if bookies refuse it as the operator (none is configured
    on either side), it falls back to the empty password, the clients' default, and says so once."""

    def __init__(self, context: LedgerContext, password: bytes = b""):
        self._context = context
        self._password = password
        self._refused = False

    def for_ledger(self, meta: LedgerMetadata, avoid: Collection[str] = ()) -> Credentials:
        if self._password or self._refused:
            return self._password
        try:
            return operator_keys(self._context, meta, avoid)
        except OperatorRefusedError as exc:
            self._refused = True
            log.warning("bookies refuse this client as the operator, so only ledgers with the empty password can be "
                        "recovered and re-replicated (configure the operator secret or certificate on bookies and "
                        "here) error=%s", exc)
            return self._password
