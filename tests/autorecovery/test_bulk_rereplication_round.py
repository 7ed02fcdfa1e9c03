"""A lost bookie's whole content re-replicated by `ledger autorecovery` at its default rate while
a writer keeps adding (tests/autorecovery/bulk_shape.py), every copy then read back from every
bookie of its write set and compared. LEDGER_REREPLICATION_GB sizes it (CI: 0.04 GB; the
acceptance run, bench/autorecovery_bench.py --gb 1, is 1 GB)."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from tests.autorecovery.bulk_shape import ENTRY_BYTES, bulk_round

SIZE_GB = float(os.environ.get("LEDGER_REREPLICATION_GB", "0.04"))


def test_a_lost_bookie_is_copied_whole_while_a_writer_runs(zk_server: LocalZooKeeper, tmp_path: Path) -> None:
    result = bulk_round(zk_server.uri("/bulk-round"), tmp_path, SIZE_GB, baseline_s=2.0)
    print(f"bulk re-replication of {SIZE_GB:g} GB: {result.mb_per_s:.1f} MB/s, {result.copies_per_s:.0f} copies/s, "
          f"writer {result.writer_adds_per_s_during:.0f} adds/s during vs {result.writer_adds_per_s_without:.0f} "
          f"without ({result.writer_ratio:.2f})")
    entries = round(SIZE_GB * 1e9) // ENTRY_BYTES
    assert result.copies >= entries, f"{result.copies:g} copies made, the lost bookie held about {entries} entries"
    assert result.copied_mb * 1e6 >= entries * ENTRY_BYTES
    assert result.copies_checked >= 3 * entries, "every entry's three copies are read back and compared"
    assert result.writer_adds_per_s_during > 0, "the writer kept being acknowledged during the copy"
