"""The orphan auditor's NOT_IN_ITS_LOG rule: a ledger created for a log that the log never took
(a writer killed between creating its next ledger and adding it to the log record)."""

from __future__ import annotations

from metadata import CreateContext, LedgerId, LedgerMetadata, QuorumConfig
from pyspark_ledger import LedgerClient
from pyspark_ledger.autorecovery.auditor import LOG_GONE, NOT_IN_ITS_LOG, Auditor, orphan_reason

HOUR_MS = 3_600_000
NOW_MS = 10 * HOUR_MS


def _meta(n: int, data_set: str | None, age_ms: int) -> LedgerMetadata:
    ctx = CreateContext.builder().part_of_data_set(data_set).build() if data_set else None
    return LedgerMetadata.new(LedgerId(0, n), QuorumConfig(3, 3, 2), ["b0", "b1", "b2"],
                              create_context=ctx, ctime_ms=NOW_MS - age_ms)


def _never_asked(name: str) -> frozenset[LedgerId] | None:
    raise AssertionError(f"the log record of {name!r} should not be read")


def test_the_pure_decision_for_a_ledger_of_a_log() -> None:
    def exists(lid: LedgerId) -> bool:
        return True

    records: dict[str, frozenset[LedgerId] | None] = {
        "events": frozenset({LedgerId(0, 1)}),  # references ledger 1 only
        "gone": LOG_GONE,
        "unreadable": None,
    }

    def decide(meta: LedgerMetadata, refs=records.__getitem__) -> tuple[str, str] | None:
        return orphan_reason(meta, exists, NOW_MS, HOUR_MS, refs)

    assert decide(_meta(1, "log:events", 2 * HOUR_MS)) is None  # referenced by its log
    assert decide(_meta(2, "log:events", 2 * HOUR_MS)) == (NOT_IN_ITS_LOG, "log:events")
    assert decide(_meta(3, "log:gone", 2 * HOUR_MS)) == (NOT_IN_ITS_LOG, "log:gone (gone)")
    assert decide(_meta(4, "log:unreadable", 2 * HOUR_MS)) is None  # unknown is not absent
    # Within the grace period (a writer may be adding it right now), and ledgers of no log or of
    # another kind of data set, never read a log record at all.
    assert decide(_meta(5, "log:events", HOUR_MS // 2), _never_asked) is None
    assert decide(_meta(6, None, 2 * HOUR_MS), _never_asked) is None
    assert decide(_meta(7, "persistent://public/default/t", 2 * HOUR_MS), _never_asked) is None
    assert orphan_reason(_meta(8, "log:events", 2 * HOUR_MS), exists, NOW_MS, HOUR_MS) is None  # rule off


def test_the_auditor_finds_a_ledger_its_log_never_took(client: LedgerClient) -> None:
    w = client.open_log_writer("events", rollover_entries=2)
    for i in range(5):
        w.append(b"e%d" % i)
    w.close()
    in_log = {lg.ledger_id for lg in client.describe_log("events").ledgers}
    assert len(in_log) >= 2
    last = max(in_log)
    # What a writer killed after creating its next ledger leaves: of the log, following its last
    # ledger, never added to the record. And a ledger of a log deleted since.
    stray = client.create_ledger(3, 3, 2, create_context=CreateContext.builder()
                                 .part_of_data_set("log:events").follows_ledger(last).build())
    client.open_log_writer("doomed").close()
    of_gone_log = client.create_ledger(3, 3, 2, create_context=CreateContext.builder()
                                       .part_of_data_set("log:doomed").build())
    of_gone_log.close()
    client.delete_log("doomed")

    assert Auditor(client.context, grace_period_s=3600).audit_once() == []  # all are young
    reads: list[str] = []
    auditor = Auditor(client.context, grace_period_s=0, scan_rate_per_s=10_000)
    real_read_head = auditor.logs.read_head  # a log's lookup starts from its head

    def counted_read_head(name: str) -> object:
        reads.append(name)
        return real_read_head(name)

    auditor.logs.read_head = counted_read_head
    found = auditor.audit_once()
    assert [(o.ledger_id, o.reason, o.detail) for o in found] == sorted([
        (stray.ledger_id, NOT_IN_ITS_LOG, "log:events"),
        (of_gone_log.ledger_id, NOT_IN_ITS_LOG, "log:doomed (gone)"),
    ])
    assert sorted(reads) == ["doomed", "events"]  # each log record read once in the pass
    assert [o.ledger_id for o in auditor.list_orphans()] == [o.ledger_id for o in found]

    # Once the stray ledger is deleted, the next pass clears its finding.
    client.delete_ledger(stray.ledger_id)
    assert [o.ledger_id for o in auditor.audit_once()] == [of_gone_log.ledger_id]
    assert [o.ledger_id for o in auditor.list_orphans()] == [of_gone_log.ledger_id]
