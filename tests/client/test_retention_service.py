"""Retention applied by the log service (issue 32 item 3): `ledger logs set`, `ledger retention run`
against subscriptions, the autorecovery leader's task, rollover by the log's settings, and what
`ledger logs show` says. Real bookie processes; `ledger retention run` on ZooKeeper and the
embedded store, the rest on the embedded store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import log_trim_marks
from metadata.log_record import LogRecord
from metadata.subscriptions import SubscriptionStore
from pyspark_ledger.autorecovery.retention_task import RetentionSettings
from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
from pyspark_ledger.cli import main
from pyspark_ledger.cli.retention_commands import parse_changes
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log.rollover import RolloverPolicy
from pyspark_ledger.log.subscription_source import store_subscriptions
from pyspark_ledger.testing.local_cluster import LocalCluster

WAIT_S = 180.0  # generous: a shared, loaded machine


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, work_dir=tmp_path / "cluster") as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[LedgerClient]:
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as c:
        yield c


@pytest.fixture
def any_store(store_uri: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, LedgerClient]]:
    """Bookies on the parametrized store: ZooKeeper and the embedded one."""
    with LocalCluster(3, metadata_uri=store_uri, work_dir=tmp_path / "cluster-any") as c, \
            LedgerClient(c.metadata_uri, add_timeout_s=10) as cl:
        yield c, cl


def run(capsys: pytest.CaptureFixture[str], uri: str, *args: str) -> tuple[int, str, str]:
    code = main(["--metadata-uri", uri, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_set_refuses_a_bad_key_or_value_by_name() -> None:
    assert parse_changes(["max_size_bytes=5", "backlog_policy=trim", "rollover_max_age_ms="]) == {
        "max_size_bytes": "5", "backlog_policy": "trim", "rollover_max_age_ms": None}
    for bad, named in (("max_sise_bytes=5", "unknown log setting 'max_sise_bytes'"),
                       ("backlog_policy=maybe", "backlog_policy='maybe': must be one of keep, trim"),
                       ("max_age_ms=-1", "max_age_ms='-1': must be >= 0"),
                       ("max_age_ms=soon", "max_age_ms='soon': not an integer"),
                       ("rollover_max_bytes", "'rollover_max_bytes' is not KEY=VALUE")):
        with pytest.raises(ValueError, match=named.replace("(", r"\(")):
            parse_changes([bad])


def test_rollover_comes_from_the_log_settings_unless_given() -> None:
    rec = LogRecord("r")
    default = RolloverPolicy.for_log(rec, max_entries=None, max_bytes=None, max_age_s=None)
    assert default == RolloverPolicy(None, 128 * 1024 * 1024, 3600.0)  # rolls over by default
    from metadata import log_settings

    small = log_settings.with_settings(rec, {"rollover_max_bytes": "1000", "rollover_max_age_ms": "0"})
    assert RolloverPolicy.for_log(small, max_entries=None, max_bytes=None, max_age_s=None) == RolloverPolicy(None, 1000)
    assert RolloverPolicy.for_log(small, max_entries=5, max_bytes=0, max_age_s=2.0) == RolloverPolicy(5, None, 2.0)
    assert not default.due(0, 10**12, 10**6, 1) and RolloverPolicy(None, 1000).due(1, 900, 0, 101)


def write(client: LedgerClient, name: str, messages: int, size: int = 300) -> None:
    with client.open_log_writer(name, batching=False) as w:
        for i in range(messages):
            w.append(bytes([i % 256]) * size)


def test_retention_run_respects_subscriptions_and_the_backlog_policy(
        capsys: pytest.CaptureFixture[str], any_store: tuple[LocalCluster, LedgerClient]) -> None:
    cluster, client = any_store
    uri = cluster.metadata_uri
    write(client, "events", 1)  # makes the log
    code, out, _ = run(capsys, uri, "logs", "set", "events", "max_size_bytes=1500", "rollover_max_bytes=1000")
    assert code == 0 and "max_size_bytes=1500" in out and "rollover_max_bytes=1000" in out
    code, _, err = run(capsys, uri, "logs", "set", "events", "backlog_policy=sometimes")
    assert code == 1 and "backlog_policy='sometimes'" in err
    write(client, "events", 30)  # 9 kB in ledgers of at most 1,000 bytes: rolled over by the setting
    rec = client.describe_log("events")
    assert len(rec.ledgers) >= 9 and all((lg.size_bytes or 0) <= 1000 for lg in rec.ledgers)

    subs = SubscriptionStore(client.store)
    early = rec.ledgers[2]
    subs.create("events", "etl")
    subs.commit("events", "etl", early.seq, 0)  # read one entry of the third ledger
    code, out, _ = run(capsys, uri, "--json", "retention", "run", "--log", "events")
    assert code == 0, out
    after = client.describe_log("events")
    assert after.ledgers[0].seq == early.seq, "retention passed the subscription under policy keep"
    assert subs.read("events", "etl").lost_before_seq is None

    # The subscription moves on: retention trims to the size bound, and says so in `logs show`.
    subs.commit("events", "etl", rec.ledgers[-1].seq, 0)
    assert run(capsys, uri, "retention", "run")[0] == 0
    kept = client.describe_log("events")
    assert kept.size_bytes <= 1500 + 1000
    last_gone = rec.by_seq(kept.ledgers[0].seq - 1)
    assert last_gone is not None
    assert log_trim_marks.boundary(kept) == log_trim_marks.TrimBoundary(last_gone.seq, last_gone.entry_count or 0,
                                                                         last_gone.ledger_id.qualified_name)
    counts = log_trim_marks.retention_counts(kept)
    assert counts.ledgers == len(rec.ledgers) - len(kept.ledgers) and counts.passes == 2
    code, out, _ = run(capsys, uri, "logs", "show", "events")
    assert f"retention trimmed {counts.ledgers} ledger(s)" in out and "max_size_bytes" in out

    # Policy trim: a subscription left behind loses data, and is told.
    write(client, "events", 30)
    subs.create("events", "slow")
    subs.commit("events", "slow", kept.ledgers[0].seq, 0)
    assert run(capsys, uri, "logs", "set", "events", "backlog_policy=trim", "backlog_quota_bytes=2000")[0] == 0
    code, out, _ = run(capsys, uri, "retention", "run", "--log", "events")
    assert code == 0 and "slow" in out
    slow = subs.read("events", "slow")
    assert slow.lost_before_seq == client.log_summary("events").trim_seq and slow.lost_entries > 0


def test_the_elected_auditor_applies_retention_on_its_schedule(client: LedgerClient) -> None:
    write(client, "auto", 1)
    client.logs.update_head("auto", lambda r: r.with_retention(r.retention.__class__(max_size_bytes=2000)))
    from metadata import log_settings

    client.logs.update_head("auto", lambda r: log_settings.with_settings(r, {"rollover_max_bytes": "1000"}))
    settings = AutorecoverySettings(workers=0, retention=RetentionSettings(interval_s=0.2))
    service = AutorecoveryService(client.context, settings, logs=client,
                                  subscriptions=store_subscriptions(client.store)).start()
    try:
        write(client, "auto", 40)
        deadline = time.monotonic() + WAIT_S
        # The pass moves the trim point, deletes, then counts: wait for the count too.
        while ((client.log_summary("auto").size_bytes > 2000 + 1000
                or service.metrics.retention_trimmed_ledgers._value.get() == 0) and time.monotonic() < deadline):
            time.sleep(0.2)
        assert client.describe_log("auto").size_bytes <= 2000 + 1000
        assert service.metrics.retention_trimmed_ledgers._value.get() > 0
    finally:
        service.stop()


def test_a_stream_at_the_end_of_a_trimmed_ledger_lost_nothing(client: LedgerClient, cluster: LocalCluster) -> None:
    """Issue 32 item 6: the stream read every entry of ledger 0, then retention trimmed it. Its
    next batch plans from ledger 1 without a data-loss report; a stream that stopped one entry
    short of ledger 0's end, or that had not reached ledger 1 when both went, did lose data."""
    from pyspark_ledger.datasource.options.source_options import parse_options
    from pyspark_ledger.datasource.read.cuts import DataLossError
    from pyspark_ledger.datasource.stream.offsets import LogOffset
    from pyspark_ledger.datasource.stream.plan import plan_batch
    from pyspark_ledger.log import Position

    with client.open_log_writer("ends", batching=False, rollover_entries=5) as w:
        for i in range(15):
            w.append(b"e%02d" % i)
    rec = client.describe_log("ends")
    zero, one, two = rec.ledgers[:3]
    opts = parse_options({"metadataServiceUri": cluster.metadata_uri, "log": "ends"})
    end = {"ends": LogOffset(two.seq, 5, two.ledger_id.qualified_name)}
    at_end = {"ends": LogOffset(zero.seq, 5, zero.ledger_id.qualified_name)}  # read entries 0..4: all of ledger 0
    short = {"ends": LogOffset(zero.seq, 4, zero.ledger_id.qualified_name)}
    client.trim_log("ends", before=Position(one.seq, 0, one.ledger_id))
    ranges = plan_batch(client, opts, at_end, end)
    assert [(r.first_entry_id, r.last_entry_id) for r in ranges] == [(0, 4), (0, 4)]
    with pytest.raises(DataLossError, match="trimmed"):
        plan_batch(client, opts, short, end)
    client.trim_log("ends", before=Position(two.seq, 0, two.ledger_id))
    with pytest.raises(DataLossError, match="trimmed"):
        plan_batch(client, opts, at_end, end)  # ledger 1 went unread
