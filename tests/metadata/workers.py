"""Functions run in separate OS processes by the metadata tests (spawned, so nothing is shared)."""

from __future__ import annotations

from metadata import BadVersionError, LedgerManager, open_store


def cas_increments(uri: str, path: str, count: int) -> list[int]:
    """Read-modify-CAS `count` increments, retrying on conflict. Returns the versions this process
    was told it wrote: if a conflicting write were ever reported as a success, two processes would
    claim the same version, or the total would exceed the final value."""
    store = open_store(uri)
    won: list[int] = []
    try:
        done = 0
        while done < count:
            got = store.read(path)
            value = int(got.value) + 1
            try:
                version = store.compare_and_set(path, str(value).encode(), got.version)
            except BadVersionError:
                continue
            assert version == got.version + 1
            won.append(version)
            done += 1
    finally:
        store.close()
    return won


def allocate_ids(uri: str, count: int) -> list[int]:
    store = open_store(uri)
    try:
        mgr = LedgerManager(store)
        return [mgr.allocate_ledger_id().id for _ in range(count)]
    finally:
        store.close()


def register_and_wait(uri: str, bookie_id: str, ready_path: str) -> None:
    """Register a bookie, signal readiness through a file, then sleep until killed."""
    import time
    from pathlib import Path

    from metadata import BookieInfo, BookieRegistry

    store = open_store(uri)
    BookieRegistry(store).register(BookieInfo(bookie_id, "127.0.0.1:1"))
    Path(ready_path).write_text("ready")
    time.sleep(600)


def open_fresh_and_create(uri: str, name: str) -> bool:
    """Open a store (possibly a brand-new file others are creating at this moment) and write once."""
    store = open_store(uri)
    try:
        store.create(f"/fresh/{name}", b"x")
        return True
    finally:
        store.close()
