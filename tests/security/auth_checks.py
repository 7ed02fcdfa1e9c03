"""The bookie's authorization refusals, checked in-process against a BookieService over real
storage (no gRPC server): every call without the right is refused and not one byte of the data
directory changes. Shared by the real check and the planted-bug check (test_auth_service.py)."""

from __future__ import annotations

import functools
import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from pyspark_ledger.testing.certs import CertificateAuthority

LEDGER = (0, 7)
RIGHT_KEY = hashlib.sha256(b"ledger" + b"right password").digest()
WRONG_KEY = hashlib.sha256(b"ledger" + b"wrong password").digest()
SECRET = b"operator-secret-0123456789abcdef"


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name} {details}")
        self.code = code


@functools.cache
def client_certificate_pem(*names: str) -> bytes:
    """A real client certificate (PEM) whose DNS SANs are `names`, of a throwaway CA: the bookie
    reads identities from the certificate itself (bookie.tls.grpc_peer_identities)."""
    with tempfile.TemporaryDirectory() as d:
        return CertificateAuthority(Path(d)).issue("fake-context", server=False, client_names=names).cert.read_bytes()


class FakeContext:
    """What a handler reads of a gRPC call: its metadata, the peer certificate, abort().
    `identity`: one certificate name; `identities`: several SANs of one certificate."""

    def __init__(self, secret: bytes | None = None, identity: str = "", identities: tuple[str, ...] = ()):
        self._metadata = [("x-ledger-operator-secret-bin", secret)] if secret is not None else []
        self._names = identities or ((identity,) if identity else ())

    def invocation_metadata(self) -> list[tuple[str, Any]]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        if not self._names:
            return {}
        # What gRPC also shows: its name fields joined and cut; the bookie must not read them.
        return {"x509_pem_cert": [client_certificate_pem(*self._names)],
                "x509_subject_alternative_name": [n.split("\x00")[0].encode() for n in self._names]}

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def disk_digest(data_dir: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data_dir.rglob("*")) if p.is_file()}


def ref() -> pb.LedgerRef:
    return pb.LedgerRef(scope_id=LEDGER[0], ledger_id=LEDGER[1])


def unauthorized_calls(key: bytes) -> dict[str, Callable[[Any, Any], object]]:
    """Each RPC that needs a right, made with `key` (wrong or empty) as the only credential."""
    return {
        "Add": lambda s, c: s.adds.handle(pb.AddRequest(batches=[pb.AddBatch(
            request_id=1, ledger=ref(), master_key=key, entry_ids=[5], lacs=[3], entries=[b"intruder"])])),
        "Read": lambda s, c: s.Read(pb.ReadRequest(ledger=ref(), first_entry_id=0, last_entry_id=3, master_key=key), c),
        "ReadLac": lambda s, c: s.ReadLac(pb.ReadLacRequest(ledger=ref(), master_key=key), c),
        "WriteLac": lambda s, c: s.WriteLac(pb.WriteLacRequest(ledger=ref(), master_key=key, lac=4), c),
        "Fence": lambda s, c: s.Fence(pb.FenceRequest(ledger=ref(), master_key=key), c),
        "FenceRead": lambda s, c: s.Read(pb.ReadRequest(ledger=ref(), first_entry_id=0, last_entry_id=0, fence=True,
                                                        master_key=key), c),
        "DeleteLedger": lambda s, c: s.DeleteLedger(pb.DeleteLedgerRequest(ledger=ref(), master_key=key), c),
        "StorageStats": lambda s, c: s.StorageStats(pb.StorageStatsRequest(), c),
        "TriggerGc": lambda s, c: list(s.TriggerGc(pb.TriggerGcRequest(), c)),
    }


def refusal_text(outcome: object) -> str | None:
    """The refusal a call's answer carries (an UNAUTHORIZED status and its message), else None."""
    answers = outcome if isinstance(outcome, list) else [outcome]
    for a in answers:
        status = getattr(a, "status", None)
        if status == Status.UNAUTHORIZED:
            return f"UNAUTHORIZED {getattr(a, 'message', '')}"
    return None


def violations(service: Any, data_dir: Path, contexts: dict[str, FakeContext]) -> list[str]:
    """`op/credential` for every call that was not refused with a clear error, or that changed a
    byte on disk. `contexts`: the credentials to try besides the key (none, a wrong secret, ...)."""
    found: list[str] = []
    for cred, ctx in contexts.items():
        for key_name, key in (("wrong key", WRONG_KEY), ("no key", b"")):
            for op, call in unauthorized_calls(key).items():
                before = disk_digest(data_dir)
                try:
                    text = refusal_text(call(service, ctx))
                except Aborted as exc:
                    text = str(exc)
                label = f"{op}/{cred}/{key_name}"
                if text is None:
                    found.append(f"{label}: not refused")
                elif "refused" not in text and "failed" not in text:
                    found.append(f"{label}: unclear refusal {text!r}")
                elif SECRET.decode() in text:
                    found.append(f"{label}: the secret is in the message")
                if disk_digest(data_dir) != before:
                    found.append(f"{label}: bytes changed on disk")
    return found
