"""Ports for the servers tests start: never one the kernel hands out by itself, never twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pyspark_ledger.testing import zookeeper_server
from pyspark_ledger.testing.zookeeper_server import free_port


def test_free_ports_lie_below_the_ephemeral_range_and_never_repeat() -> None:
    low, _high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(zookeeper_server.PORT_FLOOR <= p < low for p in ports), (low, min(ports), max(ports))
    # What bind(0) gets (a bookie's add listener, an outgoing connection) is never one of them.
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(50)]
    try:
        assert not {s.getsockname()[1] for s in held} & set(ports)
    finally:
        for s in held:
            s.close()
    with socket.create_server(("127.0.0.1", free_port())):  # and each is free to listen on
        pass


def test_each_xdist_worker_hands_out_ports_from_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    low, _high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    middle = zookeeper_server.PORT_FLOOR + (low - zookeeper_server.PORT_FLOOR) // 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices[worker] = [free_port() for _ in range(100)]
    assert all(zookeeper_server.PORT_FLOOR <= p < middle for p in slices["gw0"])
    assert all(middle <= p < low for p in slices["gw1"])
