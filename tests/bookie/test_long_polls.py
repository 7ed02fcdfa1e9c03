"""LongPolls (bookie/long_polls.py) in-process: who a call counts against, and a refusal that
aborts with RESOURCE_EXHAUSTED while the slots already held stay held until their block ends.
The real-process test is tests/security/test_long_poll_bounds.py."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from bookie.long_polls import LongPolls, client_key


class Aborted(Exception):
    pass


class FakeContext:
    """The two things LongPolls asks of a gRPC context, and abort."""

    def __init__(self, peer: str):
        self._peer = peer
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, Any]:
        return {}  # no client certificate: counted by address

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


def test_calls_without_a_certificate_count_against_their_host_not_their_port() -> None:
    assert client_key(FakeContext("ipv4:127.0.0.1:5555")) == client_key(FakeContext("ipv4:127.0.0.1:6666"))  # type: ignore[arg-type]  # a fake context
    assert client_key(FakeContext("ipv6:[::1]:5555")) == "addr ipv6:[::1]"  # type: ignore[arg-type]  # a fake context


def test_beyond_the_per_client_bound_a_long_poll_is_refused_resource_exhausted() -> None:
    polls = LongPolls(total_max=3, per_client_max=2)
    a1, a2, a3, b = (FakeContext(f"ipv4:10.0.0.{1 if n < 3 else 2}:{4000 + n}") for n in range(4))
    with polls.slot(a1, "ReadLac"), polls.slot(a2, "Read"):  # type: ignore[arg-type]  # a fake context
        with pytest.raises(Aborted):
            with polls.slot(a3, "ReadLac"):  # type: ignore[arg-type]  # a fake context
                raise AssertionError("a third long poll of one client was let in")
        assert a3.aborted is not None and a3.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "ReadLac long poll refused: at the limit of 2 long polls per client" in a3.aborted[1]
        with polls.slot(b, "ReadLac"):  # type: ignore[arg-type]  # a fake context
            assert polls.slots.total() == 3
    assert polls.slots.total() == 0 and polls.refused == 1
