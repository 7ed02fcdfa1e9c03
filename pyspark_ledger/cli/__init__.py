"""The `ledger` admin shell (modelled on `bookkeeper shell`, with BP-44 and BP-35 additions)."""

from pyspark_ledger.cli.app import main as _main
from pyspark_ledger.cli.closed_pipe import exit_quietly_on_closed_pipe

main = exit_quietly_on_closed_pipe(_main)

__all__ = ["main"]
