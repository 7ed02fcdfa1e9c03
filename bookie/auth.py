"""Who may do what on a bookie (docs/security.md, "Authenticated operations").

Two kinds of right:
- the right to a ledger: the request carries the ledger's master key (derived from the ledger
  password by the client; the bookie keeps the key the ledger was created with);
- an operator identity: the cluster secret (`--operator-secret-file`, sent by clients as the gRPC
  metadata OPERATOR_SECRET_HEADER) or a mutual-TLS client certificate one of whose identities
  (each SAN, else the CN, a value of its own: bookie.tls.grpc_peer_identities) equals, whole, a
  name listed in `--operator-identities`. Autorecovery and the admin shell use it, so they need no per-ledger
  password.

Secrets are compared in constant time (hmac.compare_digest) and never logged or put in a
message. A refusal is a gRPC error naming the operation and the ledger, counted in
`bookie_auth_refusals_total{op=...}`, decided before storage is touched.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from prometheus_client import Counter

from bookie.errors import BookieError
from bookie.metrics import Metrics
from bookie.proto.wire import OPERATOR_SECRET_HEADER
from bookie.tls import can_decode_peer_certificates, grpc_peer_identities, identity_problem

log = logging.getLogger(__name__)

OPERATOR_SECRET_BYTES_MIN = 16  # a shorter secret is refused at start: it could be guessed
OPERATOR_SECRET_BYTES_MAX = 4096
REFUSALS_METRIC = "bookie_auth_refusals_total"


class AuthConfigError(BookieError, ValueError):
    pass


def read_secret_file(path: str | Path, what: str) -> bytes:
    """A secret from a file (surrounding whitespace stripped). The path may be named in errors,
    the content never is."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise AuthConfigError(f"cannot read {what} file {path}: {exc.strerror}") from None
    secret = raw.strip()
    if not OPERATOR_SECRET_BYTES_MIN <= len(secret) <= OPERATOR_SECRET_BYTES_MAX:
        raise AuthConfigError(f"{what} in {path} must be {OPERATOR_SECRET_BYTES_MIN}.."
                              f"{OPERATOR_SECRET_BYTES_MAX} bytes")
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("secret file is readable by others than its owner (chmod 600 it) what=%s path=%s", what, path)
    return secret


def operator_names(identities: str | None) -> frozenset[str]:
    """The configured --operator-identities (comma-separated), each checked by
    bookie.tls.identity_problem: a name that could never match a certificate whole (a wildcard,
    a control character, an empty item between commas, ...) is refused at start, named."""
    if not identities or not identities.strip():
        return frozenset()
    names = [n.strip() for n in identities.split(",")]
    for name in names:
        problem = identity_problem(name)
        if problem is not None:
            raise AuthConfigError(f"--operator-identities: {name!r} is not a certificate identity: {problem}")
    if not can_decode_peer_certificates():
        raise AuthConfigError("--operator-identities: this Python cannot decode client certificates exactly "
                              "(ssl's certificate decoder is missing); use --operator-secret-file")
    return frozenset(names)


@dataclass(frozen=True)
class AuthPolicy:
    """The bookie's authorization settings (bookie/config.py flags)."""

    operator_secret: bytes | None = None
    operator_identities: frozenset[str] = frozenset()
    require_read_auth: bool = False

    @classmethod
    def from_settings(cls, secret_file: str | None, identities: str | None, require_read_auth: bool) -> AuthPolicy:
        secret = read_secret_file(secret_file, "operator secret") if secret_file else None
        return cls(secret, operator_names(identities), require_read_auth)

    @property
    def has_operator(self) -> bool:
        return self.operator_secret is not None or bool(self.operator_identities)

    def __repr__(self) -> str:  # never the secret
        return (f"AuthPolicy(operator_secret={'set' if self.operator_secret else 'unset'}, "
                f"operator_identities={sorted(self.operator_identities)}, require_read_auth={self.require_read_auth})")


def auth_policy(cfg: Any) -> AuthPolicy:
    """The policy of a BookieConfig (its operator_* and require_read_auth fields); warns when no
    operator identity is configured (the admin RPCs are then open to anyone who can connect)."""
    policy = AuthPolicy.from_settings(cfg.operator_secret_file, cfg.operator_identities, cfg.require_read_auth)
    if not policy.has_operator:
        log.warning("no operator identity configured (--operator-secret-file / --operator-identities): "
                    "StorageStats and TriggerGc are open; deletes still need the ledger's master key")
    return policy


class AuthRefusals:
    """bookie_auth_refusals_total{op=...}: a labeled counter in the bookie's registry (an op
    appears on the page with its first refusal)."""

    def __init__(self, metrics: Metrics):
        # prometheus_client appends the _total suffix on the page.
        self._counter = Counter(REFUSALS_METRIC.removesuffix("_total"), "requests refused for missing or wrong credentials",
                                ["op"], registry=metrics.registry)

    def count(self, op: str) -> None:
        self._counter.labels(op=op).inc()


def keys_equal(stored: bytes | None, presented: bytes) -> bool:
    """The ledger right: the presented master key is the stored one (constant time)."""
    return stored is not None and hmac.compare_digest(stored, presented)


def _ledger_name(ledger: tuple[int, int] | None) -> str:
    return "" if ledger is None else f" ledger {ledger[0]}:{ledger[1]}"


class Authorizer:
    """Decides per call; handlers ask before they act and abort with `refuse`."""

    def __init__(self, policy: AuthPolicy, refusals: AuthRefusals):
        self.policy = policy
        self.refusals = refusals

    def presented_secret(self, context: grpc.ServicerContext) -> bytes | None:
        for key, value in context.invocation_metadata() or ():
            if key == OPERATOR_SECRET_HEADER:
                return value.encode() if isinstance(value, str) else bytes(value)
        return None

    def is_operator(self, context: grpc.ServicerContext) -> bool:
        secret = self.presented_secret(context)
        if secret is not None and self.policy.operator_secret is not None:
            if hmac.compare_digest(secret, self.policy.operator_secret):
                return True
        if self.policy.operator_identities:
            return any(identity_problem(name) is None and name in self.policy.operator_identities
                       for name in grpc_peer_identities(context))
        return False

    def is_operator_identity(self, identity: str | None) -> bool:
        """A connection's verified TLS client identity (bookie.tls.cert_identity) is an operator's:
        how a read connection, which carries no gRPC metadata, is an operator (is_operator's
        second half)."""
        return identity is not None and identity_problem(identity) is None and identity in self.policy.operator_identities

    def may_use_ledger(self, context: grpc.ServicerContext, stored_key: bytes | None, presented_key: bytes) -> bool:
        return keys_equal(stored_key, presented_key) or self.is_operator(context)

    def may_administer(self, context: grpc.ServicerContext) -> bool:
        """Admin RPCs (StorageStats, TriggerGc): an operator; open on a bookie with no operator
        identity configured (a development bookie, warned about at start)."""
        return not self.policy.has_operator or self.is_operator(context)

    def refuse(self, context: grpc.ServicerContext, op: str, ledger: tuple[int, int] | None, presented_key: bytes,
               needs: str) -> NoReturn:
        """Count and abort the call: UNAUTHENTICATED when it carried no credential at all,
        PERMISSION_DENIED when it carried a wrong one."""
        self.refusals.count(op)
        carried = bool(presented_key) or self.presented_secret(context) is not None or bool(grpc_peer_identities(context))
        code = grpc.StatusCode.PERMISSION_DENIED if carried else grpc.StatusCode.UNAUTHENTICATED
        log.info("request refused op=%s ledger=%s code=%s", op, ledger, code.name)
        context.abort(code, f"{op} refused for{_ledger_name(ledger) or ' this bookie'}: needs {needs}")
        raise AssertionError("unreachable: context.abort raises")
