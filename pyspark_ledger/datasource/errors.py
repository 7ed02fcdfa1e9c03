"""The data source's user-facing errors, and how they reach a PySpark user as one line.

Spark runs every method of a Python data source in a Python worker and wraps what it raises:
the user catches an AnalysisException (schema, planning) or a PythonException (tasks) whose text
is Spark's prefix followed by the worker's formatted exception. By default that is the whole
Python traceback, so the first line ends in "Traceback (most recent call last):" and the
explanation comes 5 to 20 lines later. A worker formats an exception without its traceback when
SPARK_HIDE_TRACEBACK is set (pyspark.util.handle_worker_exception reads it when it handles the
exception). A user mistake needs no traceback, so the pyspark-facing methods (source.py) are
wrapped in `user_errors`, which sets it when a LedgerUserError leaves the data source. Then the
first line a user sees is

    [PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: <class>: <our first line>

Setting it touches nothing else: every worker entry point of pyspark exits right after it has
reported an error (sys.exit after handle_worker_exception), so no later failure in that process
loses its traceback. Bugs (any other exception) keep theirs.

No pyspark import here.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import ParamSpec, TypeVar

from pyspark_ledger.errors import LedgerError, PySparkLedgerError

# pyspark.util.handle_worker_exception's switch (any non-empty value).
HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class LedgerUserError(PySparkLedgerError):
    """A mistake the user can fix (an option, a name, a password, an address): the first line of
    the message says what is wrong and how to fix it; a traceback would only hide it."""


class LedgerSourceError(LedgerUserError, LedgerError):
    """Reading or writing through the data source is impossible as asked (no such log, wrong
    password, incompatible schema, ...). The message says what to change."""


class OptionError(LedgerUserError, ValueError):
    """A `format("ledger")` option is missing, unknown or has a bad value; names the option (in its
    documented spelling: Spark lower-cases keys before the source sees them)."""

    def __init__(self, option: str, problem: str):
        self.option = option
        super().__init__(f'ledger data source option "{option}": {problem}')


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """'; did you mean "x"?' for the closest candidate (case-insensitive), or ''."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f'; did you mean "{by_lower[close[0]]}"?' if close else ""


def _report_without_traceback() -> None:
    os.environ[HIDE_TRACEBACK_ENV] = "1"


def user_errors(method: Callable[P, R]) -> Callable[P, R]:
    """A pyspark-facing method whose LedgerUserErrors reach the user without a traceback."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except LedgerUserError:
            _report_without_traceback()
            raise

    return wrapper


def user_errors_in_iterator(method: Callable[P, Iterator[T]]) -> Callable[P, Iterator[T]]:
    """user_errors for a generator method (a task's read): errors come while Spark iterates."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        try:
            yield from method(*args, **kwargs)
        except LedgerUserError:
            _report_without_traceback()
            raise

    return wrapper
