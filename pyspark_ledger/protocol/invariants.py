"""`ensure`: an assertion that survives `python -O` (after TigerBeetle's assertions).

A broken invariant is a bug in this code, not an input to handle: it raises InvariantError, which
no caller catches, and the simulator reports it as a violation with the seed that found it.
"""

from __future__ import annotations

from pyspark_ledger.errors import PySparkLedgerError


class InvariantError(PySparkLedgerError, AssertionError):
    """A protocol invariant does not hold: a bug, never a user or network error."""


def ensure(condition: bool, what: str) -> None:
    if not condition:
        raise InvariantError(what)
