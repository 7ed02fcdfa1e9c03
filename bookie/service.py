"""The bookie's gRPC service: translates wire messages to storage calls and statuses back.

A handler first decides whether the request is well-formed (and answers INVALID_REQUEST with a
message if not), then acts. Protocol outcomes are StatusCode values in responses; only transport
problems surface as gRPC errors. Nothing here logs master keys.

Authorization (bookie/auth.py) comes first: DeleteLedger and WriteLac need the ledger's master key
or an operator identity, reads need one only with --require-read-auth, the admin RPCs an operator
once one is configured; refused calls abort with PERMISSION_DENIED / UNAUTHENTICATED before
storage is touched. Adds and fences keep their protocol status (UNAUTHORIZED, from storage's key
check): writers and recovery map it to a wrong-password error for that ledger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from bookie import admin
from bookie import config as limits
from bookie.add_handler import ENTRY_BYTES_MAX_DEFAULT, MASTER_KEY_BYTES_MAX, AddHandler
from bookie.add_handler import ledger_key as _ledger_key
from bookie.auth import Authorizer, AuthPolicy, AuthRefusals, keys_equal
from bookie.ledger_owner import LedgerOwners, Verdict
from bookie.long_polls import LongPolls
from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.proto.versions import WIRE_VERSION_MAX, WIRE_VERSION_MIN
from bookie.run_answer import run_answer_parts
from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.range_read import Chunk

log = logging.getLogger(__name__)


def _response_bounds(request: pb.ReadRequest) -> tuple[int, int]:
    """The entries and bytes a read's answer may hold: what it asks for (0: the default), within
    the bookie's maxima."""
    return (min(request.max_entries or limits.READ_RESPONSE_ENTRIES_DEFAULT, limits.READ_RESPONSE_ENTRIES_MAX),
            min(request.max_bytes or limits.READ_RESPONSE_BYTES_DEFAULT, limits.READ_RESPONSE_BYTES_MAX))


class BookieService(pb_grpc.BookieServicer):
    def __init__(self, storage: BookieStorage, bookie_id: str, version: str, instance_id: str, metrics: Metrics,
                 data_dir: Path | None = None, auth: AuthPolicy | None = None, long_polls: LongPolls | None = None,
                 owners: LedgerOwners | None = None, entry_bytes_max: int = ENTRY_BYTES_MAX_DEFAULT):
        self.storage = storage
        self.data_dir = data_dir  # for the admin RPCs; None: they report no directories
        self.journal_reopens: Callable[[], int] = lambda: 0  # set by the server (bookie/writable_again.py)
        self.bookie_id = bookie_id
        self.version = version
        self.instance_id = instance_id
        self.metrics = metrics
        refusals = AuthRefusals(metrics)
        self.auth = Authorizer(auth or AuthPolicy(), refusals)
        self.owners = owners  # None: trust on first write (in-process tests without metadata)
        self.adds = AddHandler(storage, metrics, refusals, owners, entry_bytes_max)
        self.long_polls = long_polls or LongPolls()  # bookie/long_polls.py: bounded, so Info never starves

    # ---- add ----------------------------------------------------------------------------------

    def Add(self, request_iterator: Iterator[pb.AddRequest], context: grpc.ServicerContext) -> Iterator[pb.AddResponse]:  # noqa: N802  # gRPC method names are CamelCase
        """One response per request, in order, once every batch of the request is durable (or
        refused): bookie.add_handler, shared with the plain-TCP add listener."""
        try:
            for request in request_iterator:
                yield pb.AddResponse(results=[pb.AddResult(request_id=o.request_id, status=int(o.status), message=o.message,
                                                           stored_count=o.stored)
                                              for o in self.adds.handle(request)])
        except grpc.RpcError:
            return  # the client went away; what it sent still completes durably

    # ---- reads --------------------------------------------------------------------------------

    def Read(self, request: pb.ReadRequest, context: grpc.ServicerContext) -> pb.ReadResponse | bytes:  # noqa: N802  # gRPC method names are CamelCase
        """A range read. A run answer (request.entry_runs) comes back serialized already
        (bookie/run_answer.py; register_bookie_service's serializer passes it through)."""
        started = time.monotonic()
        key = _ledger_key(request.ledger)
        self._check_read(context, "Read", key, request.master_key)
        first, last = request.first_entry_id, request.last_entry_id
        if first < 0 or last < first:
            return pb.ReadResponse(status=int(Status.INVALID_REQUEST), message=f"bad entry range {first}..{last}")
        if request.fence:
            refused = self._unseen_key_refusal(key, request.master_key, "Fence")
            if refused is not None:
                return pb.ReadResponse(status=int(refused.status), message=refused.message)
            status, _lac = self.storage.fence(key, request.master_key)
            if status != Status.OK:
                if status == Status.UNAUTHORIZED:
                    self.auth.refusals.count("Fence")
                return pb.ReadResponse(status=int(status), message=f"fence failed: {status.name}")
        if request.HasField("long_poll_min_lac"):
            timeout_s = min(request.long_poll_timeout_ms, limits.LONG_POLL_TIMEOUT_MS_MAX) / 1000
            with self.long_polls.slot(context, "Read"):
                status, _lac = self.storage.wait_lac(key, request.long_poll_min_lac, timeout_s)
            if status not in (Status.OK,):
                return pb.ReadResponse(status=int(status), lac=-1)
        max_entries, max_bytes = _response_bounds(request)
        resp: pb.ReadResponse | bytes
        if request.entry_runs:
            parts, served = self._run_answer(key, first, last, max_entries, max_bytes)
            resp = b"".join(parts)  # gRPC sends one buffer (register_bookie_service passes bytes through)
        else:
            resp, served = self._read_entries(key, first, last, max_entries, max_bytes)
        self.metrics.record_read(served, time.monotonic() - started)
        return resp

    def _read_entries(self, key: tuple[int, int], first: int, last: int, max_entries: int,
                      max_bytes: int) -> tuple[pb.ReadResponse, int]:
        """The per-entry answer: one (id, status, bytes) triple per entry."""
        status, results = self.storage.read_range(key, first, last, max_entries, max_bytes)
        _, lac = self.storage.read_lac(key)
        resp = pb.ReadResponse(status=int(status), lac=lac)
        if results:
            resp.entry_ids.extend([r.entry_id for r in results])
            resp.entry_status.extend([int(r.status) for r in results])
            resp.entries.extend([r.data for r in results])
        return resp, len(results)

    def _run_answer(self, key: tuple[int, int], first: int, last: int, max_entries: int,
                    max_bytes: int) -> tuple[list[Chunk], int]:
        """The run answer (ReadRequest.entry_runs) as the serialized ReadResponse in parts (OK
        entries as runs, their data straight from the pread buffers; the others by id:
        bookie/run_answer.py), and the entries it serves. Both transports send these parts."""
        status, answer = self.storage.read_runs(key, first, last, max_entries, max_bytes)
        _, lac = self.storage.read_lac(key)
        if answer is None:
            return [pb.ReadResponse(status=int(status), lac=lac).SerializeToString()], 0
        return run_answer_parts(status, lac, answer.runs, answer.others), answer.count

    def socket_read(self, request: pb.ReadRequest, identity: str | None) -> list[Chunk]:
        """A run read from a read connection (bookie/read_connection.py): the serialized answer in
        parts, the runs' data straight from the pread buffers. The gRPC Read's checks, with what a
        connection can present: the ledger's master key, or a TLS client identity that is an
        operator's (a client that is an operator by secret only is answered UNAUTHORIZED here and
        asks again over gRPC, which carries the secret)."""
        started = time.monotonic()
        key = _ledger_key(request.ledger)
        first, last = request.first_entry_id, request.last_entry_id
        problem = None
        if not request.entry_runs or request.fence or request.HasField("long_poll_min_lac"):
            problem = Status.INVALID_REQUEST, "a read connection serves run reads only (entry_runs, no fence or long poll)"
        elif first < 0 or last < first:
            problem = Status.INVALID_REQUEST, f"bad entry range {first}..{last}"
        elif self.auth.policy.require_read_auth and not (
                keys_equal(self.storage.stored_master_key(key), request.master_key)
                or self.auth.is_operator_identity(identity)):
            self.auth.refusals.count("Read")
            problem = Status.UNAUTHORIZED, "Read refused: needs the ledger's master key or an operator identity"
        if problem is not None:
            return [pb.ReadResponse(status=int(problem[0]), message=problem[1]).SerializeToString()]
        parts, served = self._run_answer(key, first, last, *_response_bounds(request))
        self.metrics.record_read(served, time.monotonic() - started)
        return parts

    def ReadLac(self, request: pb.ReadLacRequest, context: grpc.ServicerContext) -> pb.ReadLacResponse:  # noqa: N802  # gRPC method names are CamelCase
        key = _ledger_key(request.ledger)
        self._check_read(context, "ReadLac", key, request.master_key)
        if request.HasField("long_poll_min_lac"):
            timeout_s = min(request.long_poll_timeout_ms, limits.LONG_POLL_TIMEOUT_MS_MAX) / 1000
            with self.long_polls.slot(context, "ReadLac"):
                status, lac = self.storage.wait_lac(key, request.long_poll_min_lac, timeout_s)
        else:
            status, lac = self.storage.read_lac(key)
        return pb.ReadLacResponse(status=int(status), lac=lac)

    def _check_read(self, context: grpc.ServicerContext, op: str, key: tuple[int, int], master_key: bytes) -> None:
        if not self.auth.policy.require_read_auth:
            return
        if not self.auth.may_use_ledger(context, self.storage.stored_master_key(key), master_key):
            self.auth.refuse(context, op, key, master_key, "the ledger's master key or an operator identity "
                                                            "(this bookie runs with --require-read-auth)")

    # ---- control ------------------------------------------------------------------------------

    def WriteLac(self, request: pb.WriteLacRequest, context: grpc.ServicerContext) -> pb.WriteLacResponse:  # noqa: N802  # gRPC method names are CamelCase
        if request.lac < -1:
            return pb.WriteLacResponse(status=int(Status.INVALID_REQUEST), message=f"bad lac {request.lac}")
        key = _ledger_key(request.ledger)
        stored = self.storage.stored_master_key(key)
        master_key = request.master_key
        # An unseen ledger is created by its first write, as an add does (the reference protocol).
        if stored is not None and not self.auth.may_use_ledger(context, stored, master_key):
            self.auth.refuse(context, "WriteLac", key, master_key, "the ledger's master key or an operator identity")
        if stored is not None and not master_key:
            master_key = stored  # an operator's write carries no key: the ledger's own applies
        refused = None if stored is not None else self._unseen_key_refusal(key, master_key, "WriteLac")
        if refused is not None:
            return pb.WriteLacResponse(status=int(refused.status), message=refused.message)
        status = self.storage.write_lac(key, master_key, request.lac)
        if status == Status.UNAUTHORIZED:  # the key changed between the check and the write: never with one key
            self.auth.refuse(context, "WriteLac", key, master_key, "the ledger's master key or an operator identity")
        return pb.WriteLacResponse(status=int(status))

    def Fence(self, request: pb.FenceRequest, context: grpc.ServicerContext) -> pb.FenceResponse:  # noqa: N802  # gRPC method names are CamelCase
        key = _ledger_key(request.ledger)
        if len(request.master_key) > MASTER_KEY_BYTES_MAX:
            return pb.FenceResponse(status=int(Status.INVALID_REQUEST), message="master key too long")
        master_key = request.master_key
        stored = self.storage.stored_master_key(key)
        if not master_key and stored is not None and self.auth.is_operator(context):
            master_key = stored  # an operator fences without the password (admin shell, autorecovery)
        refused = None if stored is not None else self._unseen_key_refusal(key, master_key, "Fence")
        if refused is not None:
            return pb.FenceResponse(status=int(refused.status), lac=-1, message=refused.message)
        status, lac = self.storage.fence(key, master_key)  # the engine logs the fence
        if status == Status.UNAUTHORIZED:
            self.auth.refusals.count("Fence")
            return pb.FenceResponse(status=int(status), lac=lac,
                                    message=f"Fence refused for ledger {key[0]}:{key[1]}: wrong master key (password)")
        return pb.FenceResponse(status=int(status), lac=lac)

    def _unseen_key_refusal(self, key: tuple[int, int], master_key: bytes, op: str) -> Verdict | None:
        """Why `master_key` may not become the key of a ledger storage keeps none for (its
        metadata names another: bookie/ledger_owner.py), or None. Counted as a refusal."""
        if self.owners is None:
            return None
        verdict = self.owners.first_key_refusal(self.storage.stored_master_key(key), key, master_key, op)
        if verdict is not None and verdict.status == Status.UNAUTHORIZED:
            self.auth.refusals.count(op)
        return verdict

    def DeleteLedger(self, request: pb.DeleteLedgerRequest, context: grpc.ServicerContext) -> pb.DeleteLedgerResponse:  # noqa: N802  # gRPC method names are CamelCase
        key = _ledger_key(request.ledger)
        # Never without a right: a deleted copy makes recovery truncate. A copy whose key this
        # bookie does not hold (known only from a keyless record) takes an operator to delete.
        if not self.auth.may_use_ledger(context, self.storage.stored_master_key(key), request.master_key):
            if self.storage.ledger_state(key) is None:
                return pb.DeleteLedgerResponse(status=int(Status.NO_SUCH_LEDGER))  # nothing to protect
            self.auth.refuse(context, "DeleteLedger", key, request.master_key,
                             "the ledger's master key or an operator identity")
        status = self.storage.delete_ledger(key)
        log.info("ledger deleted ledger=%s status=%s", key, Status(status).name)
        return pb.DeleteLedgerResponse(status=int(status))

    def LedgerKey(self, request: pb.LedgerKeyRequest, context: grpc.ServicerContext) -> pb.LedgerKeyResponse:  # noqa: N802  # gRPC method names are CamelCase
        """The master key this bookie keeps for a ledger, for an operator only (even on a bookie with
        no operator configured: there nobody may ask), so autorecovery copies need no password."""
        key = _ledger_key(request.ledger)
        if not self.auth.is_operator(context):
            self.auth.refuse(context, "LedgerKey", key, b"", "an operator identity")
        stored = self.storage.stored_master_key(key)
        if stored is None:
            return pb.LedgerKeyResponse(status=int(Status.NO_SUCH_LEDGER),
                                        message=f"bookie {self.bookie_id} keeps no key for ledger {key[0]}:{key[1]}")
        log.info("ledger key handed to an operator ledger=%s", key)
        return pb.LedgerKeyResponse(status=int(Status.OK), master_key=stored)

    def Info(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.InfoResponse:  # noqa: N802  # gRPC method names are CamelCase
        used, total = self.storage.disk_usage()
        return pb.InfoResponse(
            bookie_id=self.bookie_id, version=self.version, read_only=self.storage.read_only,
            free_bytes=max(total - used, 0), total_bytes=total, uncertain=self.storage.uncertain,
            ledger_count=len(self.storage.ledgers()), instance_id=self.instance_id,
            wire_version_min=WIRE_VERSION_MIN, wire_version_max=WIRE_VERSION_MAX,
        )

    # ---- admin (ledger bookieinfo, ledger triggergc) -------------------------------------------

    def StorageStats(self, request: pb.StorageStatsRequest, context: grpc.ServicerContext) -> pb.StorageStatsResponse:  # noqa: N802  # gRPC method names are CamelCase
        if not self.auth.may_administer(context):
            self.auth.refuse(context, "StorageStats", None, b"", "an operator identity")
        gc = admin.gc_stats(self.storage)
        resp = pb.StorageStatsResponse(
            bookie_id=self.bookie_id, read_only=self.storage.read_only, journal_failed=self.storage.journal_failed,
            journal_reopens=self.journal_reopens(), gc_available=admin.gc_available(self.storage),
            entry_log_count=int(gc.get("entry_log_count", admin.entry_log_count(self.data_dir) if self.data_dir else 0)),
        )
        reports = admin.directory_reports(self.data_dir, self.storage.ledger_dirs) if self.data_dir else []
        for i, d in enumerate(reports):
            entry = resp.directories.add(path=d.path, role=d.role, used_bytes=d.used_bytes,
                                         capacity_bytes=d.capacity_bytes, stored_bytes=d.stored_bytes)
            if i == 0 and d.role == "ledgers" and "live_bytes" in gc:  # the bookie's figures, on its first ledger dir
                entry.live_bytes, entry.dead_bytes = int(gc["live_bytes"]), int(gc.get("dead_bytes", 0))
        for field, key, kind in (("last_gc_unix_s", "last_gc_unix_s", float),
                                 ("last_compaction_unix_s", "last_compaction_unix_s", float),
                                 ("reclaimed_bytes", "reclaimed_bytes_total", int),
                                 ("compaction_runs", "compaction_runs_total", int)):
            if key in gc:
                setattr(resp, field, kind(gc[key]))
        return resp

    def TriggerGc(self, request: pb.TriggerGcRequest, context: grpc.ServicerContext) -> Iterator[pb.GcProgress]:  # noqa: N802  # gRPC method names are CamelCase
        if not self.auth.may_administer(context):
            self.auth.refuse(context, "TriggerGc", None, b"", "an operator identity")
        log.info("GC and compaction triggered by an operator")
        for e in admin.run_gc(self.storage):
            msg = pb.GcProgress(status=int(e.status), message=e.message, phase=e.phase, done=e.done, total=e.total,
                                finished=e.finished)
            if e.reclaimed_bytes is not None:
                msg.reclaimed_bytes = e.reclaimed_bytes
            yield msg
