"""The `ledger` admin shell (modelled on `bookkeeper shell`, with BP-44 and BP-35 additions)."""

from pyspark_ledger.cli.app import main

__all__ = ["main"]
