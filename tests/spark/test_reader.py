"""The executor-side range reader without Spark: bulk fast path, and failover when a replica is
unreachable, drops requests or serves a corrupt copy. Each test that breaks bookies has its own
cluster (the session cluster is shared with the Spark tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.read.planning import LedgerRange, first_entry_range, plan_ranges
from pyspark_ledger.datasource.read.reader import ReadSpec, arrow_schema_of, read_range
from pyspark_ledger.datasource.rows import arrow_read_schema
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.run_response import parse_run_response

ENTRIES = 3000
RAW = ReadSpec("raw", codec.RAW_ARROW_SCHEMA, b"")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, work_dir=tmp_path / "cluster") as c:
        yield c


def write_log(client: LedgerClient, name: str, entries: int = ENTRIES, **quorum: int) -> None:
    with client.open_log_writer(name, rollover_entries=1000, **quorum, batching=False) as w:
        futures = [w.append_async(f"entry-{i:05d}".encode()) for i in range(entries)]
        futures[-1].result(60)


def plan(client: LedgerClient, name: str, **opts: str) -> list[LedgerRange]:
    return plan_ranges(client, parse_options({"metadataServiceUri": client.metadata_uri, "log": name, **opts}))


def read_all(client: LedgerClient, ranges: list[LedgerRange], spec: ReadSpec = RAW) -> list[bytes]:
    out: list[bytes] = []
    for r in ranges:
        for batch in read_range(client, r, spec):
            assert batch.schema == spec.schema
            out.extend(batch.column("payload").to_pylist())
    return out


EXPECTED = [f"entry-{i:05d}".encode() for i in range(ENTRIES)]


def test_fast_path_reads_every_range_in_order(client: LedgerClient, log_name: str) -> None:
    write_log(client, log_name)
    ranges = plan(client, log_name, maxEntriesPerPartition="700")
    assert len(ranges) == 6 and all(r.entries <= 700 for r in ranges)
    assert read_all(client, ranges) == EXPECTED


def test_striped_fragments_read_through_the_write_sets(client: LedgerClient, log_name: str) -> None:
    """E=3, W=2: no bookie holds every entry, so ranges go through per-entry write sets."""
    write_log(client, log_name, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    assert read_all(client, plan(client, log_name)) == EXPECTED


def test_dropped_reads_fail_over_to_another_replica(client: LedgerClient, log_name: str) -> None:
    write_log(client, log_name)
    ranges = plan(client, log_name)
    dead = ranges[0].ensemble[0]  # the first range's first choice
    client.pool.faults.rules.append(lambda kind, bookie: kind == "read" and bookie == dead)
    try:
        assert read_all(client, ranges) == EXPECTED
    finally:
        client.pool.faults.rules.clear()


def tamper_reads(client: LedgerClient, monkeypatch: pytest.MonkeyPatch, tamper: Callable[[str, Any], None]) -> None:
    """Route every bookie read of `client` (per-entry and run answers) through
    `tamper(bookie_id, response)`, which may spoil the answer in place (a replica returning bad
    data)."""
    real_get = client.pool.get

    class Tampering:
        def __init__(self, inner: Any):
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def read(self, ledger: Any, first: int, last: int, **kw: Any) -> Any:
            resp = self.inner.read(ledger, first, last, **kw)
            tamper(self.inner.bookie_id, resp)
            return resp

        def read_runs(self, ledger: Any, first: int, last: int, **kw: Any) -> Any:
            # The bookie's real run answer, spoiled as a message, then parsed as the reader parses
            # what it receives (zero-copy), so the spoiled bytes go through the real parser.
            resp = self.inner.read(ledger, first, last, entry_runs=True, **kw)
            tamper(self.inner.bookie_id, resp)
            return parse_run_response(resp.SerializeToString())

    monkeypatch.setattr(client.pool, "get", lambda bookie: Tampering(real_get(bookie)))


def test_a_corrupt_copy_fails_over(client: LedgerClient, log_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica returns entry 1500 with a flipped payload bit: the digest check catches it and
    that entry is read from another replica of its write set."""
    write_log(client, log_name)
    ranges = plan(client, log_name)
    corrupted: list[Any] = []

    def corrupt(bookie_id: str, resp: Any) -> None:
        for i, eid in enumerate(resp.entry_ids):
            if eid == 500 and not corrupted and resp.entries:
                data = bytearray(resp.entries[i])
                data[-1] ^= 0x01
                resp.entries[i] = bytes(data)
                corrupted.append(bookie_id)
        for run in resp.runs:  # the run answer: entry 500's last byte inside its run's buffer
            k = 500 - run.first_entry_id
            if 0 <= k < len(run.lengths) and not corrupted:
                data = bytearray(run.data)
                data[sum(run.lengths[: k + 1]) - 1] ^= 0x01
                run.data = bytes(data)
                corrupted.append(bookie_id)

    tamper_reads(client, monkeypatch, corrupt)
    assert read_all(client, ranges) == EXPECTED
    assert corrupted


def _drop_entry_500(run: Any, resp: Any) -> None:
    """Entry 500 leaves its run and is listed as missing: the run splits around it."""
    k = 500 - run.first_entry_id
    lengths, data = list(run.lengths), run.data
    cut = sum(lengths[:k])
    tail_first, tail_lengths, tail_data = 501, lengths[k + 1:], data[cut + lengths[k]:]
    run.data, run.lengths[:] = data[:cut], lengths[:k]
    if tail_lengths:
        resp.runs.add(first_entry_id=tail_first, lengths=tail_lengths, data=tail_data)
    resp.entry_ids.append(500)
    resp.entry_status.append(Status.NO_SUCH_ENTRY)


MALFORMATIONS = {
    "lengths do not add up": lambda run, resp: setattr(run, "data", run.data + b"!"),
    "the answer skips an entry": lambda run, resp: setattr(run, "first_entry_id", run.first_entry_id + 1),
    "a run longer than asked": lambda run, resp: (run.lengths.append(run.lengths[-1]),
                                                  setattr(run, "data", run.data + run.data[-run.lengths[-1]:])),
    "an entry missing mid-run": _drop_entry_500,
}

# What the reader's failover log line says for each.
MALFORMATION_PROBLEMS = {
    "lengths do not add up": "lengths add up to",
    "the answer skips an entry": "malformed answer: entry",
    "a run longer than asked": "malformed answer: a run of",
    "an entry missing mid-run": "entry 500: status NO_SUCH_ENTRY",
}


@pytest.mark.parametrize("malformation", sorted(MALFORMATIONS))
def test_a_bad_run_answer_fails_over_to_another_replica(
        client: LedgerClient, log_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        malformation: str) -> None:
    """A replica's run answer is malformed or lacks an entry: the reader notices, reads the rest
    of that window from the write sets, and the output is still every entry exactly once."""
    write_log(client, log_name)
    ranges = plan(client, log_name)
    spoiled: list[str] = []

    def spoil(bookie_id: str, resp: Any) -> None:
        for run in list(resp.runs):
            if not spoiled and run.first_entry_id < 500 < run.first_entry_id + len(run.lengths) - 1:
                MALFORMATIONS[malformation](run, resp)
                spoiled.append(bookie_id)

    tamper_reads(client, monkeypatch, spoil)
    assert read_all(client, ranges) == EXPECTED
    assert spoiled
    failovers = [r.getMessage() for r in caplog.records if "fast read failed over" in r.getMessage()]
    assert len(failovers) == 1 and MALFORMATION_PROBLEMS[malformation] in failovers[0], failovers


def test_an_unreachable_bookie_fails_over(cluster: LocalCluster) -> None:
    with LedgerClient(cluster.metadata_uri, rpc_timeout_s=5) as client:
        write_log(client, "l")
        ranges = plan(client, "l")
        cluster.bookies[0].stop()
        assert read_all(client, ranges) == EXPECTED


def test_arrow_entries_come_back_as_the_written_columns(client: LedgerClient, log_name: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    packer = ArrowEntryPacker(schema, rows_max=250, compression="lz4")
    batch = pa.record_batch([pa.array(range(2000), pa.int64()), pa.array([f"n{i}" for i in range(2000)])], schema=schema)
    with client.open_log_writer(log_name, batching=False) as w:
        for entry in list(packer.add(batch)) + list(packer.flush()):
            w.append(entry.to_pybytes())
    spec = ReadSpec("arrow", arrow_read_schema(schema), b"")
    rows = pa.Table.from_batches([b for r in plan(client, log_name) for b in read_range(client, r, spec)])
    assert rows.column("id").to_pylist() == list(range(2000))
    assert rows.column("entry").to_pylist() == [i // 250 for i in range(2000)]
    assert rows.column("index").to_pylist() == [i % 250 for i in range(2000)]


def test_a_lone_arrow_ledger_tells_its_schema_through_the_same_reader(client: LedgerClient) -> None:
    """Option ledger on an Arrow ledger: the driver reads entry 0 as every entry is read
    (planned as a range, verified by protocol/entry_runs.py), checked as a read checks the ledger."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    packer = ArrowEntryPacker(schema, rows_max=100)
    batch = pa.record_batch([pa.array(range(300), pa.int64()), pa.array([f"n{i}" for i in range(300)])], schema=schema)
    handle = client.create_ledger(password=b"pw")
    for entry in list(packer.add(batch)) + list(packer.flush()):
        handle.add_entry(entry.to_pybytes())
    handle.close()

    def opts(password: str) -> dict[str, str]:
        return {"metadataServiceUri": client.metadata_uri, "ledger": handle.ledger_id.qualified_name, "password": password}

    rng = first_entry_range(client, parse_options(opts("pw")))
    assert rng is not None and (rng.first_entry_id, rng.last_entry_id) == (0, 0)
    assert arrow_schema_of(client, rng, b"pw") == schema
    with pytest.raises(OptionError) as err:
        first_entry_range(client, parse_options(opts("wrong")))
    assert str(err.value).splitlines()[0].startswith(
        f'ledger data source option "password": wrong password for ledger {handle.ledger_id}')
    empty = client.create_ledger()
    empty.close()
    assert first_entry_range(client, parse_options({"metadataServiceUri": client.metadata_uri,
                                                    "ledger": empty.ledger_id.qualified_name})) is None
