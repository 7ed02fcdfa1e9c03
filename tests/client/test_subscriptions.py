"""Durable named subscriptions from Python (issue 32 item 2) on real bookies: a reader of a
subscription resumes exactly after its last commit (inside a batch too, across rollovers), a
commit never moves it backward unless asked, a new subscription starts where Kafka's
auto.offset.reset would put it, and its lag counts what is left."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metadata.errors import NoSuchSubscriptionError
from metadata.subscriptions import SubscriptionPosition, SubscriptionStore
from pyspark_ledger.autorecovery.subscription_lag import Measured, SubscriptionLagCollector, measure
from pyspark_ledger.cli.app import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import LogReader, NotSubscribedError, Position
from pyspark_ledger.log.subscription import at_time, lag
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.message_batches import set_message_batches

SEED = 3203


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerClient]:
    with LocalCluster(3, work_dir=tmp_path_factory.mktemp("subs")) as cluster, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=10) as c:
        set_message_batches(c, True)
        yield c


def write(client: LedgerClient, log: str, messages: list[bytes], *, batching: bool = True) -> list[Position]:
    with client.open_log_writer(log, batching=batching, batch_max_messages=20, rollover_entries=7) as w:
        handles = [w.append_async(m) for m in messages]
        return [h.result(120) for h in handles]


def consume(reader: LogReader, n: int) -> list[tuple[Position, bytes]]:
    """The next n messages of the reader's subscription (n=0: all there are)."""
    got: list[tuple[Position, bytes]] = []
    for e in reader.read():
        got.append((e.position, e.payload))
        if len(got) == n:
            break
    return got


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_a_subscription_resumes_after_its_last_commit(client: LedgerClient, batching: bool) -> None:
    log = f"orders-{'b' if batching else 'u'}"
    sent = [b"m%05d" % i for i in range(600)]
    positions = write(client, log, sent, batching=batching)
    assert len({p.seq for p in positions}) > 3  # rollovers: the resumes cross ledgers
    rng = random.Random(SEED)
    print(f"seed={SEED}")
    received: list[bytes] = []
    while len(received) < len(sent):
        with client.open_log_reader(log, subscription="etl", initial_position="earliest") as r:
            chunk = consume(r, rng.randrange(1, 90))
            processed = chunk[: rng.randrange(1, len(chunk) + 1)]  # the consumer stops before the rest
            received.extend(m for _, m in processed)
            r.commit(processed[-1][0])
    assert received == sent  # no gap, no repeat, in order


def test_commits_never_go_backward_unless_asked(client: LedgerClient) -> None:
    positions = write(client, "back", [b"x%d" % i for i in range(40)])
    with client.open_log_reader("back", subscription="s", initial_position="earliest") as r:
        assert r.commit(positions[30]).position == SubscriptionPosition(positions[30].seq, positions[30].entry_id,
                                                                        positions[30].index)
        assert r.commit(positions[10]).position == r.subscription_state().position  # late: ignored
        assert consume(r, 0)[0][0] == positions[31]
        r.commit(positions[10], allow_backward=True)
        assert consume(r, 0)[0][0] == positions[11]
    with client.open_log_reader("back") as plain, pytest.raises(NotSubscribedError, match="no subscription"):
        plain.commit(positions[0])


def test_a_new_subscription_starts_as_auto_offset_reset_says(client: LedgerClient) -> None:
    write(client, "reset", [b"old-%d" % i for i in range(20)])
    with pytest.raises(NoSuchSubscriptionError, match="create it first"):
        client.open_log_reader("reset", subscription="strict", initial_position="none")
    with pytest.raises(ValueError, match="initial_position"):
        client.open_log_reader("reset", subscription="typo", initial_position="beginning")
    late = client.open_log_reader("reset", subscription="late")  # "latest", Kafka's default
    early = client.open_log_reader("reset", subscription="early", initial_position="earliest")
    try:
        write(client, "reset", [b"new-%d" % i for i in range(5)])
        assert [m for _, m in consume(late, 0)] == [b"new-%d" % i for i in range(5)]
        assert [m for _, m in consume(early, 0)] == [b"old-%d" % i for i in range(20)] + [b"new-%d" % i for i in range(5)]
    finally:
        late.close()
        early.close()
    assert SubscriptionStore(client.store).get("reset", "strict") is None


def test_lag_counts_what_is_left_and_a_move_to_a_time_resumes_there(client: LedgerClient) -> None:
    first = write(client, "lagging", [b"a" * 100 for _ in range(300)])
    time.sleep(0.05)
    t_ms = int(time.time() * 1000)
    time.sleep(0.05)
    second = write(client, "lagging", [b"b" * 100 for _ in range(100)])
    with client.open_log_reader("lagging", subscription="slow", initial_position="earliest") as r:
        now = int(time.time() * 1000)
        behind = lag(r, r.subscription_state(), now)
        entries = len({(p.seq, p.entry_id) for p in first + second})
        assert behind.entries == entries and behind.size_bytes >= 400 * 100 and behind.time_ms >= 100
        r.commit(second[-1])
        caught_up = lag(r, r.subscription_state(), now)
        assert (caught_up.entries, caught_up.size_bytes, caught_up.time_ms) == (0, 0, 0)
        r.commit(first[-1], allow_backward=True)
        only_second = lag(r, r.subscription_state(), now)
        assert only_second.entries == len({(p.seq, p.entry_id) for p in second})
        assert 100 * 100 <= only_second.size_bytes < behind.size_bytes
        subs = SubscriptionStore(client.store)
        subs.move("lagging", "slow", at_time(r, t_ms))
        assert [m for _, m in consume(r, 0)] == [b"b" * 100] * 100  # resumes at the first message at or after t


def shell(client: LedgerClient, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main(["--metadata-uri", client.store.uri, "subscriptions", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_shell_creates_lists_moves_and_deletes(client: LedgerClient, capsys: pytest.CaptureFixture[str]) -> None:
    positions = write(client, "shell-subs", [b"s%03d" % i for i in range(120)])
    made = shell(client, capsys, "create", "shell-subs", "ops", "--to-earliest")
    assert made["position"] == {"seq": 0, "entry": -1, "index": 0}
    (row,) = shell(client, capsys, "list", "shell-subs")
    entries = len({(p.seq, p.entry_id) for p in positions})
    assert (row["subscription"], row["lagEntries"]) == ("ops", entries) and row["lagBytes"] > 0 and row["lostEntries"] == 0
    target = positions[57]
    shell(client, capsys, "move", "shell-subs", "ops", "--to-position", json.dumps(target.to_json()))
    with client.open_log_reader("shell-subs", subscription="ops", initial_position="none") as r:
        assert consume(r, 1)[0][0] == target  # the subscription next reads the message it was moved to
    shell(client, capsys, "move", "shell-subs", "ops", "--to-latest")
    listed = shell(client, capsys, "list")  # every log
    assert "shell-subs" in {r["log"] for r in listed}
    (row,) = [r for r in listed if r["log"] == "shell-subs"]
    assert (row["log"], row["lagEntries"], row["lagBytes"], row["lagMs"]) == ("shell-subs", 0, 0, 0)
    future = datetime.fromtimestamp(time.time() + 3600, tz=UTC).isoformat()
    shell(client, capsys, "move", "shell-subs", "ops", "--to-datetime", future)  # nothing that late yet: the latest
    assert main(["--metadata-uri", client.store.uri, "subscriptions", "move", "shell-subs", "ops",
                 "--to-datetime", "yesterday"]) == 1
    assert "--to-datetime" in capsys.readouterr().err
    assert main(["--metadata-uri", client.store.uri, "subscriptions", "delete", "shell-subs", "ops"]) == 0
    assert shell(client, capsys, "list", "shell-subs") == []
    assert main(["--metadata-uri", client.store.uri, "subscriptions", "delete", "shell-subs", "ops"]) == 1
    assert "no subscription 'ops'" in capsys.readouterr().err


def test_the_elected_process_serves_each_subscriptions_lag(client: LedgerClient) -> None:
    positions = write(client, "scraped", [b"p%03d" % i for i in range(50)])
    with client.open_log_reader("scraped", subscription="dash", initial_position="earliest") as r:
        r.commit(positions[9])
    measures: list[int] = []
    leading = [False]
    clock = [0.0]

    def measure_counted() -> Measured:
        measures.append(1)
        return measure(client)

    registry = CollectorRegistry()
    registry.register(SubscriptionLagCollector(measure_counted, lambda: leading[0], refresh_s=30, clock=lambda: clock[0]))
    assert "ledger_subscription" not in generate_latest(registry).decode() and not measures  # not elected: silent
    leading[0] = True
    page = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    (lag_entries,) = [s for s in families["ledger_subscription_lag_entries"].samples
                      if s.labels == {"log": "scraped", "subscription": "dash"}]
    entries_read = {(p.seq, p.entry_id) for p in positions[:10]}  # the committed one's entry counts as read
    assert lag_entries.value == len({(p.seq, p.entry_id) for p in positions} - entries_read) > 0
    generate_latest(registry)
    assert len(measures) == 1  # a scrape within refresh_s serves the last measure
    clock[0] = 31.0
    generate_latest(registry)
    assert len(measures) == 2
