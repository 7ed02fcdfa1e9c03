"""`ledger autorecovery` with a planted bug, for the tests only: the auditor never marks.

Run as `python -m tests.autorecovery.planted_autorecovery <ledger args>`; the acceptance test
uses it to show that it fails when nothing gets marked (the product has no such switch).
"""

from __future__ import annotations

import sys

from metadata.underreplication import UnderReplicationManager
from pyspark_ledger.cli import main


def never_mark(self: UnderReplicationManager, *args: object, **kwargs: object) -> bool:
    return False


if __name__ == "__main__":
    UnderReplicationManager.mark = never_mark
    sys.exit(main(sys.argv[1:]))
