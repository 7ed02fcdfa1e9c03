"""The operator identity a client presents to bookies (docs/security.md).

The cluster's operator secret travels as gRPC metadata (the header the bookie checks, see
bookie.auth) on every call of a channel made with `with_operator_secret`; over TLS it is
encrypted like the rest of the call. It comes from the LedgerClient argument `operator_secret`,
else LEDGER_OPERATOR_SECRET, else the file named by LEDGER_OPERATOR_SECRET_FILE: never from a
command-line argument. It is never logged and never part of a message or repr.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from bookie.proto.wire import OPERATOR_SECRET_HEADER
from pyspark_ledger.errors import LedgerError

log = logging.getLogger(__name__)

SECRET_ENV = "LEDGER_OPERATOR_SECRET"
SECRET_FILE_ENV = "LEDGER_OPERATOR_SECRET_FILE"


def operator_secret_from(value: bytes | str | None, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The operator secret: the argument, else the environment (variable, then file), else None."""
    if value:
        return value.encode() if isinstance(value, str) else bytes(value)
    env = os.environ if environ is None else environ
    if env.get(SECRET_ENV):
        return env[SECRET_ENV].strip().encode()
    path = env.get(SECRET_FILE_ENV)
    if path:
        try:
            secret = Path(path).read_bytes().strip()
        except OSError as exc:
            raise LedgerError(f"cannot read {SECRET_FILE_ENV} file {path}: {exc.strerror}") from None
        return secret or None
    return None


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _SecretInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                         grpc.StreamStreamClientInterceptor):
    """Adds the operator secret to every call's metadata."""

    def __init__(self, secret: bytes):
        self._header = (OPERATOR_SECRET_HEADER, bytes(secret))

    def __repr__(self) -> str:
        return "_SecretInterceptor(<secret>)"

    def _details(self, d: grpc.ClientCallDetails) -> _CallDetails:
        metadata = list(d.metadata or ()) + [self._header]
        return _CallDetails(d.method, d.timeout, metadata, d.credentials, getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails,
                              request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails,
                               request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails,
                                request_iterator: Any) -> Any:
        return continuation(self._details(details), request_iterator)


def with_operator_secret(channel: grpc.Channel, secret: bytes | None, *, encrypted: bool = True) -> grpc.Channel:
    """`channel` itself without a secret (no per-call cost), else one that sends it on every call.
    `encrypted`: the channel is TLS; over plaintext anyone on the path reads the secret (warned once)."""
    if not secret:
        return channel
    global _plaintext_warned
    if not encrypted and not _plaintext_warned:
        _plaintext_warned = True
        log.warning("the operator secret goes to bookies over plaintext, readable on the network: set tls_ca")
    return grpc.intercept_channel(channel, _SecretInterceptor(secret))


_plaintext_warned = False
