"""The disk monitor's part in coming back from a full disk, in-process with scripted usage: a
journal failure counts as a full disk (writable again only at or below the low-water mark), and
a writable-again step that fails keeps the bookie read-only until a later check succeeds. Also
bookie/writable_again.WritableAgain with a scripted storage."""

from __future__ import annotations

from pathlib import Path

from bookie.disk_monitor import DiskMonitor
from bookie.writable_again import WritableAgain


class Script:
    def __init__(self) -> None:
        self.usage = (50, 100)
        self.accept_writable = True
        self.applied: list[bool] = []

    def apply(self, read_only: bool) -> bool:
        self.applied.append(read_only)
        return read_only or not self.accept_writable


def test_a_journal_failure_is_a_full_disk_until_usage_reaches_the_low_water_mark() -> None:
    s = Script()
    mon = DiskMonitor(lambda: s.usage, s.apply, 0.95, 0.90, 3600)
    assert mon.check_once() is False
    s.usage = (93, 100)
    mon.mark_full()  # ENOSPC below the high-water mark
    assert mon.check_once() is True  # between the marks: stays read-only, nothing re-applied
    assert s.applied == []
    s.usage = (85, 100)
    assert mon.check_once() is False and s.applied == [False]


def test_a_failed_writable_again_step_keeps_it_read_only_and_is_retried() -> None:
    s = Script()
    mon = DiskMonitor(lambda: s.usage, s.apply, 0.95, 0.90, 3600)
    mon.mark_full()
    s.accept_writable = False  # e.g. the journal directory still refuses a synced write
    assert mon.check_once() is True and mon.check_once() is True
    assert s.applied == [False, False]  # asked again at every check
    s.accept_writable = True
    assert mon.check_once() is False and s.applied == [False, False, False]


class FakeStorage:
    def __init__(self, failed: bool, reopen_ok: bool) -> None:
        self.journal_failed, self.reopen_ok, self.reopens = failed, reopen_ok, 0

    def reopen_journal(self) -> bool:
        self.reopens += 1
        if self.reopen_ok:
            self.journal_failed = False
        return self.reopen_ok


def test_writable_again_reopens_only_a_failed_journal_and_only_after_a_good_probe(tmp_path: Path) -> None:
    healthy = FakeStorage(failed=False, reopen_ok=True)
    assert WritableAgain(healthy, tmp_path).attempt() is True and healthy.reopens == 0
    failed = FakeStorage(failed=True, reopen_ok=True)
    step = WritableAgain(failed, tmp_path)
    assert step.attempt() is True and failed.reopens == 1 and step.reopened == 1
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    stuck = FakeStorage(failed=True, reopen_ok=False)
    assert WritableAgain(stuck, tmp_path).attempt() is False and stuck.journal_failed
    no_dir = FakeStorage(failed=True, reopen_ok=True)
    assert WritableAgain(no_dir, tmp_path / "missing").attempt() is False  # probe fails: no reopen
    assert no_dir.reopens == 0
