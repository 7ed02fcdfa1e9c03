"""One line instead of a per-bookie list when no bookie is running.

A command that needs bookies and finds none registered fails with a message naming every
bookie of every write set it tried ("bookie bookie-0 unavailable: not registered and no known
address; ..."), often twice. When the registry lists no bookie at all, that list says nothing
the user can act on: the shell says so once, and how to start some.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from metadata import MetadataError
from pyspark_ledger.errors import BookieUnavailableError, LedgerError, NotEnoughBookiesError, ReadError

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

NO_BOOKIE_RUNNING = "no bookie is running (start one with `ledger standalone`)"


class NoBookieRunningError(LedgerError):
    """The registry lists no bookie (raised by commands that need one, e.g. bookieinfo)."""

    def __init__(self) -> None:
        super().__init__(NO_BOOKIE_RUNNING)


def none_registered(client: LedgerClient) -> bool:
    """True only when the registry was read and lists no bookie (an unreadable one says nothing)."""
    try:
        return not client.bookies()
    except MetadataError as exc:
        log.debug("bookie registry unreadable error=%s", exc)
        return False


# The failures that mean "the bookies this needs did not answer"; others (no such ledger, a bad
# password) keep their own message whatever the registry holds.
BOOKIE_FAILURES = (BookieUnavailableError, NotEnoughBookiesError, ReadError, NoBookieRunningError)


def explain(client: LedgerClient | None, exc: BaseException) -> str:
    """The message to print for a failed command: NO_BOOKIE_RUNNING when a bookie failure met an
    empty registry, else exc's own."""
    if client is not None and isinstance(exc, BOOKIE_FAILURES) and none_registered(client):
        return NO_BOOKIE_RUNNING
    return str(exc)
