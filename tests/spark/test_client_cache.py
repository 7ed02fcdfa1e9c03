"""One client per worker (issue 33 item 4): the data source's per-process client cache
(pyspark_ledger/datasource/clients.py), without a JVM. Fake clients count what happens to them;
one test leases real clients of the test cluster and counts their metadata sessions."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource import clients
from pyspark_ledger.datasource.clients import ClientCache, lease_client
from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.options.source_options import parse_options


class FakeClient:
    made = 0

    def __init__(self) -> None:
        FakeClient.made += 1
        self.closed = 0
        self.handles_closed = 0

    def close(self) -> None:
        self.closed += 1

    def close_handles(self) -> None:
        self.handles_closed += 1

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FAKE = cast(Callable[[], LedgerClient], FakeClient)  # the cache only opens, closes and clears handles


def lease(cache: ClientCache, key: object) -> FakeClient:
    with cache.lease(key, FAKE) as c:
        return cast(FakeClient, c)


def test_one_client_per_key_reused_and_its_handles_closed_after_each_lease() -> None:
    cache = ClientCache()
    a, b = lease(cache, "k"), lease(cache, "k")
    assert a is b and a.closed == 0 and a.handles_closed == 2
    assert lease(cache, "other") is not a and len(cache) == 2
    cache.close_all()
    assert a.closed == 1 and len(cache) == 0


def test_a_failed_lease_retires_its_client_but_a_users_mistake_does_not() -> None:
    cache = ClientCache()
    with pytest.raises(OptionError), cache.lease("k", FAKE) as c:
        raise OptionError("log", "a mistake of the user")
    assert lease(cache, "k") is c and cast(FakeClient, c).closed == 0
    with pytest.raises(RuntimeError), cache.lease("k", FAKE):
        raise RuntimeError("the session broke")
    assert cast(FakeClient, c).closed == 1 and lease(cache, "k") is not c


def test_idle_clients_close_and_clients_in_use_do_not() -> None:
    cache = ClientCache(idle_close_s=60)
    idle = lease(cache, "idle")
    with cache.lease("busy", FAKE) as busy_client:
        busy = cast(FakeClient, busy_client)
        assert cache.close_idle(now=clients.time.monotonic() + 61) == 1
        assert idle.closed == 1 and busy.closed == 0
    assert lease(cache, "idle") is not idle


def test_the_cache_is_bounded() -> None:
    cache = ClientCache(max_clients=2)
    first, second = lease(cache, 1), lease(cache, 2)
    assert lease(cache, 3) and first.closed == 1 and second.closed == 0 and len(cache) == 2  # LRU goes
    with cache.lease(2, FAKE), cache.lease(3, FAKE):
        extra = lease(cache, 4)  # every cached client in use: one of its own, closed at the end
        assert extra.closed == 1 and len(cache) == 2


def test_a_forked_child_never_uses_or_closes_its_parents_clients() -> None:
    cache = ClientCache()
    parent = lease(cache, "k")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any exit handler
        child = lease(cache, "k")
        ok = child is not parent and parent.closed == 0 and len(cache) == 1
        os.write(write_end, b"ok" if ok else b"bad")
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    assert os.read(read_end, 8) == b"ok"
    os.close(read_end)
    assert lease(cache, "k") is parent and parent.closed == 0


def test_real_clients_one_metadata_session_per_process_and_none_shared_with_cache_off(
        uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(clients.AUDIT_ENV, str(tmp_path))
    opts = parse_options({"metadataServiceUri": uri, "log": "cache-test"})
    seen = []
    for _ in range(5):
        with lease_client(opts) as c:
            seen.append(c)
            assert c.logs.get_tail("no-such-log-here") is None  # the session works
    assert len({id(c) for c in seen}) == 1
    sessions = (tmp_path / str(os.getpid())).read_text().splitlines()
    assert len(sessions) == 1
    monkeypatch.setenv(clients.CACHE_ENV, "0")
    for _ in range(3):
        with lease_client(opts) as c:
            assert c is not seen[0]
    assert len((tmp_path / str(os.getpid())).read_text().splitlines()) == 4
