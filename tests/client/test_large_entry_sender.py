"""An entry of DIRECT_SEND_BYTES_MAX or more goes out from the write handle's sender thread, never
from the thread that adds it (its sends then overlap the caller's next work: issue 30's batched
1 KiB messages), while a small entry on an idle handle still goes out at once from the caller."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.ledger import write_handle
from pyspark_ledger.ledger.write_handle import WriteHandle

ADDS_MAX = 40  # adds of each size, one at a time: each finds the sender idle once it has caught up


def _senders(client: LedgerClient, monkeypatch: pytest.MonkeyPatch, size: int) -> list[bool]:
    """For each of up to ADDS_MAX adds of `size` bytes, each awaited before the next: whether the
    adding thread sent it itself. Stops early once both answers were seen."""
    by_caller: dict[int, bool] = {}
    caller = threading.get_ident()
    send = WriteHandle._send

    def recording(self: WriteHandle, outbox: Sequence[write_handle._Pending]) -> None:
        for p in outbox:
            by_caller[p.entry_id] = threading.get_ident() == caller
        send(self, list(outbox))

    monkeypatch.setattr(WriteHandle, "_send", recording)
    w = client.create_ledger(3, 3, 2)
    try:
        for _ in range(ADDS_MAX):
            eid = w.add_entry_async(b"e" * size).result(timeout=120)
            assert eid in by_caller, f"entry {eid} acknowledged but never sent through _send"
            if len(set(by_caller.values())) == 2:
                break
    finally:
        w.close()
        monkeypatch.setattr(WriteHandle, "_send", send)
    return list(by_caller.values())


@pytest.mark.parametrize("planted", [False, True], ids=["as built", "planted: large entries sent directly"])
def test_large_entries_go_out_from_the_sender_thread(client: LedgerClient, monkeypatch: pytest.MonkeyPatch,
                                                     planted: bool) -> None:
    assert any(_senders(client, monkeypatch, 1024)), "a small add on an idle handle is sent by its caller"
    size = write_handle.DIRECT_SEND_BYTES_MAX
    if planted:  # the checker below must catch a handle that sends large entries directly
        monkeypatch.setattr(write_handle, "DIRECT_SEND_BYTES_MAX", 2**31)
    large = _senders(client, monkeypatch, size)
    assert len(large) >= 1
    assert any(large) == planted, f"sent by the caller: {large}"
