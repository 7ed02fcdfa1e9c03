"""A takeover fences and closes EVERY unsealed ledger of a log, whoever wrote them (issue 19 item 2).

The invariant: after a takeover no ledger of the log is OPEN except the live writer's last."""

from __future__ import annotations

import pytest

from metadata import LedgerId
from metadata.log_record import LogRecord
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerFencedError
from pyspark_ledger.ledger.write_handle import WriteHandle
from pyspark_ledger.log import LogFencedError, takeover
from pyspark_ledger.log.errors import StaleEpochError

STRANDED = 6  # unsealed ledgers planted in the log: more than the "last two" an old takeover fenced


def check_one_writer_open(client: LedgerClient, name: str, live_last: LedgerId | None) -> None:
    """The invariant: the only OPEN ledger of the log (if any) is the live writer's last."""
    still_open = takeover.open_ledgers_of(client, name)
    allowed = [] if live_last is None else [live_last]
    assert still_open == [lid for lid in allowed if lid in still_open], f"OPEN ledgers left behind: {still_open}"
    head, _ = client.logs.read_head(name)
    unsealed = [lg.ledger_id for lg in head.record.ledgers if not lg.sealed]
    assert unsealed == [lid for lid in allowed if lid in unsealed], f"log records unsealed ledgers: {unsealed}"


def plant_stranded_ledgers(client: LedgerClient, name: str) -> list[WriteHandle]:
    """Ledgers appended to the log and written to but never closed: writers that vanished."""
    client.logs.create(LogRecord(name))
    handles = []
    for i in range(STRANDED):
        h = client.create_ledger(3, 3, 2, "crc32c", b"")
        for j in range(i + 1):
            h.add_entry(b"stranded-%d-%d" % (i, j))
        client.logs.update(name, lambda r, lid=h.ledger_id: r.with_ledger(lid))
        handles.append(h)
    return handles


def test_takeover_closes_every_unsealed_ledger_and_records_their_ends(client: LedgerClient) -> None:
    handles = plant_stranded_ledgers(client, "stranded")
    before = client.logs.read("stranded")[0].writer_epoch
    taken = takeover.take_over(client, "stranded")
    assert taken.epoch == before + 1 and taken.from_seq == STRANDED
    check_one_writer_open(client, "stranded", None)
    rec, _ = client.logs.read("stranded")
    assert [lg.entry_count for lg in rec.ledgers] == [i + 1 for i in range(STRANDED)]  # every end recorded
    for h in handles:  # each old writer is fenced on the bookies
        with pytest.raises(LedgerFencedError):
            h.add_entry(b"too late", timeout_s=10)
        h._close_quietly()


def test_a_planted_fence_only_the_last_two_is_caught(client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    handles = plant_stranded_ledgers(client, "planted")
    # The old behaviour: only the last two unsealed ledgers were fenced.
    monkeypatch.setattr(takeover, "unsealed_ledgers", lambda ledgers: [lg for lg in ledgers if not lg.sealed][-2:])
    takeover.take_over(client, "planted")
    with pytest.raises(AssertionError, match="OPEN ledgers left behind"):
        check_one_writer_open(client, "planted", None)
    monkeypatch.undo()
    takeover.take_over(client, "planted")  # the real takeover repairs the log
    check_one_writer_open(client, "planted", None)
    for h in handles:
        h._close_quietly()


def test_log_writer_takes_over_every_stranded_ledger_and_a_stale_writer_learns_both_epochs(
        client: LedgerClient) -> None:
    handles = plant_stranded_ledgers(client, "writers")
    old = client.open_log_writer("writers", rollover_entries=2)
    check_one_writer_open(client, "writers", old.current_ledger)
    for i in range(5):
        old.append(b"old-%d" % i)
    new = client.open_log_writer("writers")
    check_one_writer_open(client, "writers", new.current_ledger)
    with pytest.raises(LogFencedError):
        old.append(b"stale")
    new.append(b"new")
    new.close()
    check_one_writer_open(client, "writers", None)
    # A change by the stale writer's epoch is refused with both epochs named.
    with pytest.raises(StaleEpochError, match=rf"log 'writers'.*epoch {new.epoch}.*has {old.epoch}") as err:
        takeover.update_log_head(client, "writers", lambda r: takeover.check_epoch(r, old.epoch))
    assert (err.value.current_epoch, err.value.writer_epoch) == (new.epoch, old.epoch)
    old.close()
    for h in handles:
        h._close_quietly()
