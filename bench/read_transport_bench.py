"""Run reads over read connections against gRPC: the Spark reader's CPU per read, no JVM.

Starts 3 bookies, writes N Arrow rows (id bigint, 100 B random payload, 8,192 rows per entry,
LZ4 as spark_bench writes them) and N 100 B messages in message batches, then reads each log
through the data source's reader (pyspark_ledger.datasource.read.reader.read_range, the code a
Spark task runs, fetch threads and all) in this process, alternately with read connections and
with LEDGER_READ_CONNECTIONS=0 (run reads over gRPC), each round in the other order. For each it
reports the median wall time and the CPU seconds of this process and of the bookies per read (from
/proc): the transport's cost is CPU, which a shared machine's load moves far less than walls.

    python bench/read_transport_bench.py [--rows 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.columns import chosen_columns
from pyspark_ledger.datasource.read.planning import plan_ranges
from pyspark_ledger.datasource.read.reader import ReadSpec, read_range
from pyspark_ledger.datasource.rows import arrow_read_schema
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.message_batches import set_message_batches
from pyspark_ledger.transport.read_connections import READ_CONNECTIONS_ENV

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:13]) / TICKS_PER_S
    return total


def write_logs(client: LedgerClient, rows: int) -> None:
    rng = np.random.default_rng(7)
    schema = pa.schema([("id", pa.int64()), ("payload", pa.binary())])
    packer = ArrowEntryPacker(schema, rows_max=8192, compression="lz4")
    with client.open_log_writer("arrow", batching=False) as w:
        for lo in range(0, rows, 65_536):
            n = min(65_536, rows - lo)
            data = rng.bytes(100 * n)
            payload = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(0, 100 * n + 1, 100, dtype=np.int32)),
                                                             pa.py_buffer(data)])
            batch = pa.record_batch([pa.array(np.arange(lo, lo + n)), payload], schema=schema)
            for entry in packer.add(batch):
                w.append_async(entry.to_pybytes())
        for entry in packer.flush():
            w.append_async(entry.to_pybytes())
    with client.open_log_writer("raw", batching=True) as w:
        futures = [w.append_async(rng.bytes(100)) for _ in range(rows)]
        futures[-1].result(600)


def read_once(uri: str, log: str, spec: ReadSpec) -> int:
    """One whole read of `log` with a new client (it reads the transport setting when made)."""
    with LedgerClient(uri) as client:
        n = 0
        for r in plan_ranges(client, parse_options({"metadataServiceUri": uri, "log": log})):
            for batch in read_range(client, r, spec):
                n += batch.num_rows
        return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="read-transport-"))
    cluster = LocalCluster(3, work_dir=work / "cluster").start()
    try:
        uri = cluster.metadata_uri
        with LedgerClient(uri) as client:
            set_message_batches(client, True)
            write_logs(client, args.rows)
        data = pa.schema([("id", pa.int64()), ("payload", pa.binary())])
        none_arrow, none_raw = chosen_columns(data, ()), chosen_columns(pa.schema([("payload", pa.binary())]), ())
        specs = {"arrow none": ("arrow", ReadSpec("arrow", none_arrow.schema, b"", none_arrow)),
                 "arrow all": ("arrow", ReadSpec("arrow", arrow_read_schema(data), b"")),
                 "batched raw none": ("raw", ReadSpec("raw", none_raw.schema, b"", none_raw))}
        bookies = [b.proc.pid for b in cluster.bookies if b.proc is not None]
        print(f"{args.rows:,} rows per log, {args.rounds} rounds; load {os.getloadavg()}")
        print("| read | transport | wall s | reader CPU s | bookies CPU s | sum |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for name, (log, spec) in specs.items():
            got: dict[str, list[tuple[float, float, float]]] = {"connections": [], "gRPC": []}
            for r in range(args.rounds + 1):
                for mode in ("connections", "gRPC") if r % 2 == 0 else ("gRPC", "connections"):
                    os.environ[READ_CONNECTIONS_ENV] = "1" if mode == "connections" else "0"
                    t0, c0, b0 = time.perf_counter(), time.process_time(), cpu_s(bookies)
                    n = read_once(uri, log, spec)
                    sample = (time.perf_counter() - t0, time.process_time() - c0, cpu_s(bookies) - b0)
                    assert n == args.rows, (name, n)
                    if r:  # round 0 warms the page cache and imports
                        got[mode].append(sample)
            for mode, samples in got.items():
                wall, mine, theirs = (statistics.median(s[i] for s in samples) for i in range(3))
                print(f"| {name} | {mode} | {wall:.3f} | {mine:.3f} | {theirs:.3f} | {mine + theirs:.3f} |")
        print(f"load {os.getloadavg()}")
    finally:
        os.environ.pop(READ_CONNECTIONS_ENV, None)
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
