"""Arrow logs' per-entry append time through Spark (issue 32 item 4): a write whose batches arrive
over about a second packs entries at different times; every row reads back with its entry's
time (not the ledger's join time), and startingTimestamp / endingTimestamp T cut exactly before
the first entry whose time is at or after T, in batch and streaming (AvailableNow). The pure
parts (packer, decoding, the search, offload) are in test_arrow_times.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.conftest import ledger_opts

BATCHES, ROWS = 6, 20  # one entry per batch (arrowBatchRows=ROWS)
PAUSE_S = 0.25
WAIT_S = 300.0


def slow_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        for k in range(b.num_rows // ROWS):
            time.sleep(PAUSE_S)  # each entry is packed a while after the previous one
            yield b.slice(k * ROWS, ROWS)


def ms(ts: object) -> int:
    return round(ts.timestamp() * 1000)  # type: ignore[attr-defined]  # a datetime from Spark


def test_arrow_rows_carry_their_entry_time_and_a_start_by_time(spark: SparkSession, client: LedgerClient, uri: str,
                                                               log_name: str, tmp_path: Path) -> None:
    df = spark.range(BATCHES * ROWS, numPartitions=1).mapInArrow(slow_batches, "id long")
    df.write.format("ledger").options(**ledger_opts(uri, log_name, payloadFormat="arrow",
                                                    arrowBatchRows=ROWS)).mode("append").save()
    got = client.logs.get(log_name)
    assert got is not None and len(got[0].ledgers) == 1
    joined = got[0].ledgers[0].ctime_ms
    def read(**opts: object) -> DataFrame:
        return spark.read.format("ledger").options(**ledger_opts(uri, log_name, **opts)).load()

    rows = read().orderBy("id").collect()
    assert [r.id for r in rows] == list(range(BATCHES * ROWS))
    per_entry: dict[int, set[int]] = {}
    for r in rows:
        per_entry.setdefault(r.entry, set()).add(ms(r.timestamp))
    assert all(len(t) == 1 for t in per_entry.values()), per_entry  # one time per entry
    times = [per_entry[e].pop() for e in sorted(per_entry)]
    print(f"\nentry times (ms after the first): {[t - times[0] for t in times]}; joined {joined - times[0]} ms after")
    assert times == sorted(times) and times[-1] <= joined and len(set(times)) > 1, (times, joined)
    # LogReader (and so `ledger logs read`) gives each entry the same time as Spark's rows.
    with client.open_log_reader(log_name) as reader:
        assert [m.timestamp_ms for m in reader.read()] == times
    k = next(i for i in range(1, len(times)) if times[i] > times[i - 1])  # an entry newer than the one before
    t = times[k]
    want = [r.id for r in rows if r.entry >= k]
    from_t = read(startingTimestamp=t).orderBy("id").collect()
    assert [r.id for r in from_t] == want and {ms(r.timestamp) for r in from_t} == set(times[k:])
    assert read(endingTimestamp=t).count() == len(rows) - len(want)

    table = f"arrow_times_{log_name[2:]}"
    q = start_query(lambda: spark.readStream.format("ledger")
                    .options(**ledger_opts(uri, log_name, startingTimestamp=str(t))).load()
                    .writeStream.format("memory").queryName(table).option("checkpointLocation", str(tmp_path / "ckpt"))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(WAIT_S), "the AvailableNow query did not stop"
    streamed = spark.table(table).orderBy("id").collect()
    assert [r.id for r in streamed] == want
    assert [ms(r.timestamp) for r in streamed] == [ms(r.timestamp) for r in from_t]
