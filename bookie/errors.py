"""The bookie package's one exception root: every exception class defined under bookie/ derives
from BookieError (some also from the builtin they always were, e.g. ValueError, so existing
handlers keep catching them). tests/test_exception_roots.py checks it."""

from __future__ import annotations


class BookieError(Exception):
    """Root of every exception the bookie package defines."""
