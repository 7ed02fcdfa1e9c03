"""The add stream's protocol: one response per request, in order, and clients that keep one
request in flight and coalesce what queues meanwhile. Uses real gRPC on loopback: a recording
server for the client side, a real `bookie` process for the server side."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from bookie.grpc_runtime import apply_grpc_tuning
from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.transport.bookie_client import BookieClient, channel_options
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch
from tests.bookie.server_helpers import KEY, Acks, check_mixed_answers, mixed_add_requests

WAIT_S = 20.0


class _HoldingServicer(pb_grpc.BookieServicer):
    """Records every AddRequest; holds the answer to the first until released."""

    def __init__(self) -> None:
        self.requests: list[pb.AddRequest] = []
        self.first_arrived = threading.Event()
        self.release = threading.Event()

    def Add(self, request_iterator: Iterator[pb.AddRequest], context: grpc.ServicerContext) -> Iterator[pb.AddResponse]:  # noqa: N802 - gRPC servicer method name
        for request in request_iterator:
            self.requests.append(request)
            if len(self.requests) == 1:
                self.first_arrived.set()
                assert self.release.wait(WAIT_S)
            yield pb.AddResponse(results=[pb.AddResult(request_id=b.request_id, status=int(Status.OK))
                                          for b in request.batches])


@pytest.fixture
def holding_server() -> Iterator[tuple[_HoldingServicer, str]]:
    servicer = _HoldingServicer()
    server = grpc.server(futures.ThreadPoolExecutor(4), options=channel_options())
    pb_grpc.add_BookieServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    servicer.release.set()
    server.stop(grace=None)


def test_client_keeps_one_request_in_flight_and_coalesces_the_rest(holding_server: tuple[_HoldingServicer, str]) -> None:
    servicer, address = holding_server
    acks = Acks()
    with BookieClient("holding", address) as client:
        first = [(0, -1, b"first")]
        client.add_batch((0, 1), KEY, first, acks.callback(first))
        assert servicer.first_arrived.wait(WAIT_S)
        # While the first request is unanswered, ten more batches (two ledgers) queue up.
        for e in range(1, 11):
            entries = [(e, e - 1, f"entry-{e}".encode())]
            client.add_batch((0, 1 + e % 2), KEY, entries, acks.callback(entries))
        assert acks.count == 0
        servicer.release.set()
        acks.wait(11)
    assert not acks.failed
    # Exactly two requests: the lone first add, then everything that queued behind it, in order.
    assert [len(r.batches) for r in servicer.requests] == [1, 10]
    assert [b.entry_ids[0] for b in servicer.requests[1].batches] == list(range(1, 11))
    assert [b.ledger.ledger_id for b in servicer.requests[1].batches] == [1 + e % 2 for e in range(1, 11)]


def test_a_request_the_bookie_sits_on_times_out_and_the_stream_is_replaced(
        holding_server: tuple[_HoldingServicer, str]) -> None:
    servicer, address = holding_server
    with BookieClient("holding", address, add_timeout_s=0.5) as client:
        acks = Acks()
        stuck = [(0, -1, b"stuck")]
        client.add_batch((0, 1), KEY, stuck, acks.callback(stuck))
        acks.wait(1)
        assert [s for s, _ in acks.failed] == [Status.TIMEOUT]
        # The next add does not queue behind the unanswered request: it goes on a new stream.
        later = [(1, 0, b"later")]
        client.add_batch((0, 1), KEY, later, acks.callback(later))
        acks.wait(2)
        assert acks.ok == [later]
    assert len(servicer.requests) == 2


def test_encoded_batch_is_a_valid_add_request_and_frames_concatenate() -> None:
    a = EncodedAddBatch((0, 7), KEY, [(0, -1, b"x"), (1, -1, b"yy")])
    b = EncodedAddBatch((3, 9), KEY, [(5, 4, b"z" * 300)], recovery=True)
    request = pb.AddRequest.FromString(a.frame_for(1) + b.frame_for(1))
    assert [(x.ledger.scope_id, x.ledger.ledger_id) for x in request.batches] == [(0, 7), (3, 9)]
    assert list(request.batches[0].entries) == [b"x", b"yy"] and request.batches[1].recovery
    assert [x.request_id for x in request.batches] == [a.request_id, b.request_id] and a.request_id != b.request_id
    assert a.payload_bytes == 3 and b.payload_bytes == 300


def test_bookie_answers_each_request_once_with_every_batch_in_order(bookie: LocalBookie) -> None:
    """A raw stream: a request mixing good batches, a malformed one and a wrong key gets one
    response with one result per batch, in the request's order; the good ones are readable."""
    requests = mixed_add_requests((1, 2, 3))
    with grpc.insecure_channel(bookie.address, options=channel_options()) as channel:
        responses = list(pb_grpc.BookieStub(channel).Add(iter(requests), timeout=WAIT_S))
    with BookieClient(bookie.bookie_id, bookie.address) as client:
        check_mixed_answers(responses, client, (1, 2, 3))


def test_grpc_tuning_turns_the_event_engine_listener_off_unless_told_otherwise() -> None:
    env: dict[str, str] = {}
    assert apply_grpc_tuning(env) and env["GRPC_EXPERIMENTS"] == "-event_engine_listener"
    assert not apply_grpc_tuning(env)  # idempotent
    env = {"GRPC_EXPERIMENTS": "event_engine_listener"}  # the user's choice wins
    assert not apply_grpc_tuning(env) and env["GRPC_EXPERIMENTS"] == "event_engine_listener"
    env = {"GRPC_EXPERIMENTS": "some_other"}
    assert apply_grpc_tuning(env) and env["GRPC_EXPERIMENTS"] == "some_other,-event_engine_listener"
    env = {"PYSPARK_LEDGER_GRPC_TUNING": "0"}
    assert not apply_grpc_tuning(env) and "GRPC_EXPERIMENTS" not in env


def test_the_bookie_server_module_tunes_grpc_before_importing_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GRPC_EXPERIMENTS", "PYSPARK_LEDGER_GRPC_TUNING")}
    code = "import sys, bookie.server, os; print(os.environ['GRPC_EXPERIMENTS'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "-event_engine_listener"
    # A client process is left alone: it gains nothing from the setting.
    code = "import pyspark_ledger.client, os; print(os.environ.get('GRPC_EXPERIMENTS', 'unset'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "unset"
