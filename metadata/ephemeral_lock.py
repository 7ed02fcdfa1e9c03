"""Try-locks as ephemeral nodes: the auditor's election and the replication workers' claims.

A lock is an ephemeral node whose JSON value names its holder and a random token. Whoever
creates it holds it; everyone else is told at once (no waiting), and tries again later. When the
holder dies the node goes with it (ZooKeeper: its session expires; embedded store: its heartbeat
lease runs out, 10 s by default), so another process takes over.

ZooKeeper: the node belongs to the store's session and is never re-created after a session loss
(a registration would be, which a lock must not be: someone else may hold it by then); the holder
checks `held()` (the node still carries its token) before each step that needs the lock.
Embedded store: the ephemeral registration of metadata.embedded_store; its create fails at once
when another live owner holds the path, and its heartbeat never takes a path over.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from metadata.context import now_ms
from metadata.errors import BadVersionError, MetadataError, NodeExistsError, NoNodeError
from metadata.store import MetadataStore, Registration

log = logging.getLogger(__name__)


class EphemeralLock:
    def __init__(self, store: MetadataStore, path: str, token: str, registration: Registration | None):
        self.store = store
        self.path = path
        self.token = token
        self._registration = registration  # embedded store only
        self.released = False

    def value(self) -> tuple[dict[str, Any], int] | None:
        """The lock's current value and version, if we still hold it."""
        got = self.store.get(self.path)
        if got is None:
            return None
        try:
            d = json.loads(got.value)
        except ValueError:
            return None
        return (d, got.version) if d.get("token") == self.token else None

    def held(self) -> bool:
        if self.released:
            return False
        if self._registration is not None and not self._registration.registered:
            return False
        return self.value() is not None

    def update(self, **fields: Any) -> bool:
        """Add fields (e.g. progress) to the lock's value. False if we no longer hold it."""
        current = self.value()
        if current is None:
            return False
        d, version = current
        d.update(fields)
        try:
            self.store.compare_and_set(self.path, json.dumps(d, sort_keys=True).encode(), version)
            return True
        except (BadVersionError, NoNodeError):
            return False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self._registration is not None:
            self._registration.close()
            return
        current = self.value()
        if current is None:
            return
        try:
            self.store.delete(self.path, current[1])
        except (BadVersionError, NoNodeError):
            pass
        except MetadataError as exc:  # the session ends with the process anyway
            log.warning("could not release lock path=%s error=%s", self.path, exc)


def try_lock(store: MetadataStore, path: str, holder: str, **fields: Any) -> EphemeralLock | None:
    """Take the lock at `path` now, or None if someone holds it."""
    token = os.urandom(8).hex()
    value = json.dumps({"holder": holder, "token": token, "sinceMs": now_ms(), **fields}, sort_keys=True).encode()
    create_ephemeral = getattr(store, "_create", None)  # ZooKeeperStore: a plain ephemeral create
    try:
        if create_ephemeral is not None:
            create_ephemeral(path, value, ephemeral=True)
            return EphemeralLock(store, path, token, None)
        return EphemeralLock(store, path, token, store.register_ephemeral(path, value))
    except NodeExistsError:
        return None


def read_lock(store: MetadataStore, path: str) -> dict[str, Any] | None:
    """Who holds the lock at `path` (its JSON value, without the token), or None."""
    got = store.get(path)
    if got is None:
        return None
    try:
        d = dict(json.loads(got.value))
    except ValueError:
        return None
    d.pop("token", None)
    return d
