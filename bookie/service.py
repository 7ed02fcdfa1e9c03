"""The bookie's gRPC service: translates wire messages to storage calls and statuses back.

A handler first decides whether the request is well-formed (and answers INVALID_REQUEST with a
message if not), then acts. Protocol outcomes are StatusCode values in responses; only transport
problems surface as gRPC errors. Nothing here logs master keys.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Iterator

import grpc

from bookie import config as limits
from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from bookie.storage import BookieStorage

log = logging.getLogger(__name__)

U64_MAX = 2**64 - 1
MASTER_KEY_BYTES_MAX = 1024
# How long the add stream's response generator waits for a completion before checking that the
# client is still there; and how long, once the client finished sending, it waits for the last
# in-flight batches to become durable before giving up on them.
_ADD_POLL_S = 0.5
_ADD_DRAIN_TIMEOUT_S = 30.0
_RESULTS_PER_RESPONSE_MAX = 4096
_END = object()


def _ledger_key(ref: pb.LedgerRef) -> tuple[int, int]:
    return (ref.scope_id, ref.ledger_id)


class BookieService(pb_grpc.BookieServicer):
    def __init__(self, storage: BookieStorage, bookie_id: str, version: str, instance_id: str, metrics: Metrics):
        self.storage = storage
        self.bookie_id = bookie_id
        self.version = version
        self.instance_id = instance_id
        self.metrics = metrics

    # ---- add ----------------------------------------------------------------------------------

    def Add(self, request_iterator: Iterator[pb.AddRequest], context: grpc.ServicerContext) -> Iterator[pb.AddResponse]:  # noqa: N802
        results: queue.Queue[Any] = queue.Queue()
        inflight = threading.Semaphore(limits.ADD_STREAM_INFLIGHT_BATCHES_MAX)
        outstanding = [0]
        lock = threading.Lock()

        def complete(request_id: int, started: float, nbytes: int, count: int, status: Status, message: str = "") -> None:
            with lock:
                outstanding[0] -= 1
            inflight.release()
            if status == Status.OK:
                self.metrics.inc("bookie_adds_total", "entries durably added", count)
                self.metrics.inc("bookie_add_bytes_total", "entry bytes durably added", nbytes)
                self.metrics.add_latency.observe(time.monotonic() - started)
            else:
                self.metrics.inc("bookie_add_errors_total", "add batches refused or failed")
            results.put(pb.AddResult(request_id=request_id, status=int(status), message=message))

        def submit(batch: pb.AddBatch) -> None:
            started = time.monotonic()
            rid = batch.request_id
            n = len(batch.entry_ids)
            problem = None
            if n == 0 or len(batch.lacs) != n or len(batch.entries) != n:
                problem = "an add batch needs equally many entry ids, lacs and entries (at least one)"
            elif len(batch.master_key) > MASTER_KEY_BYTES_MAX:
                problem = "master key too long"
            if problem is not None:
                results.put(pb.AddResult(request_id=rid, status=int(Status.INVALID_REQUEST), message=problem))
                return
            # Bounded: a stream that outruns the disk waits here, so gRPC flow control slows the client.
            if not inflight.acquire(timeout=limits.LONG_POLL_TIMEOUT_MS_MAX / 1000):
                results.put(pb.AddResult(request_id=rid, status=int(Status.BUSY), message="too many adds in flight"))
                return
            with lock:
                outstanding[0] += 1
            entries = list(zip(batch.entry_ids, batch.lacs, batch.entries))
            nbytes = sum(len(e) for e in batch.entries)
            try:
                self.storage.add_batch(
                    _ledger_key(batch.ledger), batch.master_key, entries, batch.recovery,
                    lambda status: complete(rid, started, nbytes, n, Status(status)),
                )
            except Exception as exc:  # noqa: BLE001 - the stream must survive one bad batch
                log.exception("add batch failed ledger=%s", _ledger_key(batch.ledger))
                complete(rid, started, nbytes, n, Status.INTERNAL_ERROR, str(exc))

        def reader() -> None:
            try:
                for request in request_iterator:
                    for batch in request.batches:
                        submit(batch)
            except grpc.RpcError:
                pass  # the client went away; its in-flight adds still complete durably
            except Exception:  # noqa: BLE001
                log.exception("add stream reader failed")
            finally:
                results.put(_END)

        threading.Thread(target=reader, name="add-stream-reader", daemon=True).start()
        ended = False
        drain_deadline = None
        while True:
            try:
                item = results.get(timeout=_ADD_POLL_S)
            except queue.Empty:
                if not context.is_active():
                    return
                if ended and drain_deadline is not None and time.monotonic() > drain_deadline:
                    log.warning("add stream closed with batches still pending outstanding=%d", outstanding[0])
                    return
                if ended and outstanding[0] == 0:
                    return
                continue
            batch_results = []
            while True:
                if item is _END:
                    ended = True
                    drain_deadline = time.monotonic() + _ADD_DRAIN_TIMEOUT_S
                else:
                    batch_results.append(item)
                if len(batch_results) >= _RESULTS_PER_RESPONSE_MAX:
                    break
                try:
                    item = results.get_nowait()
                except queue.Empty:
                    break
            if batch_results:
                yield pb.AddResponse(results=batch_results)
            with lock:
                done = ended and outstanding[0] == 0 and results.empty()
            if done:
                return

    # ---- reads --------------------------------------------------------------------------------

    def Read(self, request: pb.ReadRequest, context: grpc.ServicerContext) -> pb.ReadResponse:  # noqa: N802
        started = time.monotonic()
        key = _ledger_key(request.ledger)
        first, last = request.first_entry_id, request.last_entry_id
        if first < 0 or last < first:
            return pb.ReadResponse(status=int(Status.INVALID_REQUEST), message=f"bad entry range {first}..{last}")
        if request.fence:
            status, _lac = self.storage.fence(key, request.master_key)
            if status != Status.OK:
                return pb.ReadResponse(status=int(status), message=f"fence failed: {status.name}")
        if request.HasField("long_poll_min_lac"):
            timeout_s = min(request.long_poll_timeout_ms, limits.LONG_POLL_TIMEOUT_MS_MAX) / 1000
            status, _lac = self.storage.wait_lac(key, request.long_poll_min_lac, timeout_s)
            if status not in (Status.OK,):
                return pb.ReadResponse(status=int(status), lac=-1)
        max_entries = min(request.max_entries or limits.READ_RESPONSE_ENTRIES_DEFAULT, limits.READ_RESPONSE_ENTRIES_MAX)
        max_bytes = min(request.max_bytes or limits.READ_RESPONSE_BYTES_DEFAULT, limits.READ_RESPONSE_BYTES_MAX)
        status, results = self.storage.read_range(key, first, last, max_entries, max_bytes)
        _, lac = self.storage.read_lac(key)
        resp = pb.ReadResponse(status=int(status), lac=lac)
        if results:
            resp.entry_ids.extend([r.entry_id for r in results])
            resp.entry_status.extend([int(r.status) for r in results])
            resp.entries.extend([r.data for r in results])
        self.metrics.inc("bookie_read_entries_total", "entries served by reads", len(results))
        self.metrics.read_latency.observe(time.monotonic() - started)
        return resp

    def ReadLac(self, request: pb.ReadLacRequest, context: grpc.ServicerContext) -> pb.ReadLacResponse:  # noqa: N802
        key = _ledger_key(request.ledger)
        if request.HasField("long_poll_min_lac"):
            timeout_s = min(request.long_poll_timeout_ms, limits.LONG_POLL_TIMEOUT_MS_MAX) / 1000
            status, lac = self.storage.wait_lac(key, request.long_poll_min_lac, timeout_s)
        else:
            status, lac = self.storage.read_lac(key)
        return pb.ReadLacResponse(status=int(status), lac=lac)

    # ---- control ------------------------------------------------------------------------------

    def WriteLac(self, request: pb.WriteLacRequest, context: grpc.ServicerContext) -> pb.WriteLacResponse:  # noqa: N802
        if request.lac < -1:
            return pb.WriteLacResponse(status=int(Status.INVALID_REQUEST), message=f"bad lac {request.lac}")
        status = self.storage.write_lac(_ledger_key(request.ledger), request.master_key, request.lac)
        return pb.WriteLacResponse(status=int(status))

    def Fence(self, request: pb.FenceRequest, context: grpc.ServicerContext) -> pb.FenceResponse:  # noqa: N802
        key = _ledger_key(request.ledger)
        if len(request.master_key) > MASTER_KEY_BYTES_MAX:
            return pb.FenceResponse(status=int(Status.INVALID_REQUEST), message="master key too long")
        status, lac = self.storage.fence(key, request.master_key)  # the engine logs the fence
        return pb.FenceResponse(status=int(status), lac=lac)

    def DeleteLedger(self, request: pb.DeleteLedgerRequest, context: grpc.ServicerContext) -> pb.DeleteLedgerResponse:  # noqa: N802
        key = _ledger_key(request.ledger)
        status = self.storage.delete_ledger(key)
        log.info("ledger deleted ledger=%s status=%s", key, Status(status).name)
        return pb.DeleteLedgerResponse(status=int(status))

    def Info(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.InfoResponse:  # noqa: N802
        used, total = self.storage.disk_usage()
        return pb.InfoResponse(
            bookie_id=self.bookie_id, version=self.version, read_only=self.storage.read_only,
            free_bytes=max(total - used, 0), total_bytes=total, uncertain=self.storage.uncertain,
            ledger_count=len(self.storage.ledgers()), instance_id=self.instance_id,
        )
