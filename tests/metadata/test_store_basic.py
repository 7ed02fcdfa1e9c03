"""The MetadataStore contract, on both stores."""

from __future__ import annotations

import threading

import pytest

from metadata import BadVersionError, MetadataError, MetadataStore, NodeExistsError, NoNodeError, open_store


def test_create_read_cas_delete(store: MetadataStore) -> None:
    assert store.get("/a/b") is None
    assert store.create("/a/b", b"one") == 0
    with pytest.raises(NodeExistsError):
        store.create("/a/b", b"again")
    got = store.read("/a/b")
    assert (got.value, got.version) == (b"one", 0)
    assert store.compare_and_set("/a/b", b"two", 0) == 1
    with pytest.raises(BadVersionError) as err:
        store.compare_and_set("/a/b", b"stale", 0)
    assert err.value.actual_version == 1
    assert store.read("/a/b").value == b"two"  # the conflicting write was not applied
    with pytest.raises(BadVersionError):
        store.delete("/a/b", 0)
    store.delete("/a/b", 1)
    assert store.get("/a/b") is None
    with pytest.raises(NoNodeError):
        store.read("/a/b")
    with pytest.raises(NoNodeError):
        store.compare_and_set("/a/b", b"x", 1)
    with pytest.raises(NoNodeError):
        store.delete("/a/b")


def test_children_and_parents(store: MetadataStore) -> None:
    for name in ("c", "a", "b"):
        store.create(f"/p/q/{name}", name.encode())
    assert store.children("/p/q") == ["a", "b", "c"]
    assert store.children("/p") == ["q"]
    assert store.children("/nowhere") == []
    with pytest.raises(MetadataError):
        store.delete("/p/q")  # has children
    assert list(store.walk("/p", 2)) == ["/p/q/a", "/p/q/b", "/p/q/c"]


def test_data_watch_sees_every_change(store: MetadataStore) -> None:
    seen: list[tuple[bytes, int] | None] = []
    changed = threading.Condition()

    def on_change(v):
        with changed:
            seen.append(None if v is None else (v.value, v.version))
            changed.notify_all()

    def wait_for(n: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(seen) >= n, timeout=10), seen

    w = store.watch("/w/node", on_change)
    wait_for(1)
    assert seen[0] is None
    store.create("/w/node", b"v0")
    wait_for(2)
    store.compare_and_set("/w/node", b"v1", 0)
    wait_for(3)
    store.delete("/w/node")
    wait_for(4)
    assert seen == [None, (b"v0", 0), (b"v1", 1), None]
    w.cancel()


def test_children_watch(store: MetadataStore) -> None:
    seen: list[list[str]] = []
    cond = threading.Condition()

    def on_children(kids: list[str]) -> None:
        with cond:
            seen.append(kids)
            cond.notify_all()

    store.watch_children("/members", on_children)
    store.create("/members/x", b"")
    with cond:
        assert cond.wait_for(lambda: seen and seen[-1] == ["x"], timeout=10), seen


def test_bad_paths_are_refused(store: MetadataStore) -> None:
    for bad in ("relative", "/trailing/", "/a//b", "/a/../b"):
        with pytest.raises(MetadataError):
            store.create(bad, b"")


def test_two_clients_see_each_other(store_uri: str) -> None:
    a, b = open_store(store_uri), open_store(store_uri)
    try:
        a.create("/shared", b"from a")
        assert b.read("/shared").value == b"from a"
        b.compare_and_set("/shared", b"from b", 0)
        with pytest.raises(BadVersionError):
            a.compare_and_set("/shared", b"late a", 0)
        assert a.read("/shared") == b.read("/shared")
    finally:
        a.close()
        b.close()
