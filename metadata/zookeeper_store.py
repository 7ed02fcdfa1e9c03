"""ZooKeeperStore: the metadata store on a real ZooKeeper ensemble, through kazoo.

Every call has one deadline (`op_timeout_s`, by default the session timeout): with ZooKeeper gone,
a call fails with MetadataUnavailableError naming the store and the deadline instead of waiting
for the connection forever (kazoo's synchronous calls queue a request while disconnected and wait
for it without a bound, so only the asynchronous calls with a timed wait are used here). A write
that was sent and not answered before the deadline is OutcomeUnknownError, never a guess: kazoo
may still deliver the queued request when the connection returns. Compare-and-set, create and delete are never retried
blindly after a connection loss, because a retried conditional write can report a conflict for a
write that in fact succeeded. Instead each written value carries a random 16-byte token in a small
envelope, and after a connection loss the store re-reads the node and decides:

    token found                        -> the write was applied: success
    version unchanged / node absent    -> not applied: retry it (still conditional)
    version moved by exactly one, not our token -> someone else won: BadVersionError
    otherwise                          -> OutcomeUnknownError (never a guess)

Ephemeral registrations are re-created by a background thread when a session expires and a new
one is established; watches are kazoo recipes, which re-arm themselves across reconnects.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import NodeExistsError as ZkNodeExists
from kazoo.exceptions import NoNodeError as ZkNoNode
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from metadata.errors import (
    BadVersionError,
    IdAllocationError,
    MetadataError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    OutcomeUnknownError,
)
from metadata.paths import counter_path
from metadata.store import ChildrenCallback, DataCallback, MetadataStore, RetryPolicy, Versioned, check_path
from metadata.zk_envelope import unwrap as _unwrap
from metadata.zk_envelope import wrap as _wrap
from metadata.zk_session import start_client

log = logging.getLogger(__name__)

# Transient failures: the request may or may not have reached the server.
_TRANSIENT = (ConnectionLoss, SessionExpiredError, KazooTimeoutError, ConnectionClosedError)
# How many times an unapplied conditional write is re-sent after connection losses.
_RESEND_ATTEMPTS_MAX = 5


class _Watch:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _ZkRegistration:
    def __init__(self, store: ZooKeeperStore, path: str, value: bytes, replace_if: Callable[[bytes], bool] | None = None):
        self.path = path
        self.value = value
        self.replace_if = replace_if
        self._store = store
        self.closed = False
        # False from a session loss until the node is re-created: the owner must not believe it
        # is registered while ZooKeeper has dropped its ephemeral node.
        self._created = True

    @property
    def registered(self) -> bool:
        """Whether the node surely exists: created, and the session not lost nor possibly expired
        (disconnected longer than the session timeout, which ZooKeeper only reports on reconnect)."""
        return self._created and not self.closed and self._store._session_may_be_alive()

    def update(self, value: bytes) -> None:
        """Replace the value. Done as delete + create in one transaction so that membership
        (children) watches fire, as they do when a bookie turns read-only."""
        self.value = value
        self._store._replace_ephemeral(self.path, value)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._store._unregister(self)


class ZooKeeperStore(MetadataStore):
    def __init__(
        self,
        hosts: str,
        root: str,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        op_timeout_s: float = 10.0,
        uri: str | None = None,
        auth: tuple[str, str] | None = None,
    ):
        """auth: ZooKeeper credentials (scheme, "user:secret"), metadata.uri.zk_auth: the session
        authenticates with them and every node this store creates (parents too) is readable and
        writable by that user only. `uri` is shown in errors: pass it redacted."""
        self.hosts = hosts
        self.root = check_path(root)
        self.uri = uri or f"zk://{hosts}{root}"
        self.session_timeout_s = session_timeout_s
        self.op_timeout_s = op_timeout_s
        self._registrations: list[_ZkRegistration] = []
        self._reg_lock = threading.Lock()
        self._lost = threading.Event()  # set when a session expired; cleared after re-registering
        self._stop = threading.Event()
        self._disconnected_since: float | None = None
        self._client, self._session_auth = start_client(
            hosts, session_timeout_s=session_timeout_s, connect_timeout_s=connect_timeout_s, uri=self.uri, auth=auth
        )
        self._client.add_listener(self._on_state)
        self._rereg_thread = threading.Thread(target=self._reregister_loop, name="zk-reregister", daemon=True)
        self._rereg_thread.start()
        try:
            self._call(self._client.ensure_path_async, self.root)
        except MetadataError:  # e.g. a rejected SASL login: end the client's threads before raising
            self.close()
            raise

    # ---- plumbing -----------------------------------------------------------------------------

    def _abs(self, path: str) -> str:
        check_path(path)
        return self.root if path == "/" else self.root.rstrip("/") + path

    def _unavailable(self, what: str, exc: BaseException | None = None) -> MetadataUnavailableError:
        cause = f" (last error: {exc!r})" if exc is not None else ""
        return MetadataUnavailableError(
            f"metadata store {self.uri} (ZooKeeper at {self.hosts}) unavailable: {what} did not "
            f"complete within its {self.op_timeout_s:g} s deadline{cause}"
        )

    def _deadline(self) -> float:
        return time.monotonic() + self.op_timeout_s

    def _call(self, async_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A read or an idempotent call, re-sent after connection losses until one deadline."""
        deadline = self._deadline()
        what = getattr(async_fn, "__name__", "call").removesuffix("_async")
        while True:
            self._wait_connected(deadline, what)
            try:
                return async_fn(*args, **kwargs).get(timeout=max(0.01, deadline - time.monotonic()))
            except (NoAuthError, AuthFailedError) as exc:
                raise self._session_auth.refused(exc, what) from None
            except _TRANSIENT as exc:
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise self._unavailable(what, exc) from exc
                time.sleep(0.05)

    def _once(self, async_fn: Callable[..., Any], *args: Any, deadline: float, **kwargs: Any) -> Any:
        """Send one request and wait until the deadline. Transient errors propagate to the caller."""
        try:
            return async_fn(*args, **kwargs).get(timeout=max(0.01, deadline - time.monotonic()))
        except (NoAuthError, AuthFailedError) as exc:
            raise self._session_auth.refused(exc, getattr(async_fn, "__name__", "call")) from None

    def _wait_connected(self, deadline: float, what: str) -> None:
        while self._client.state != KazooState.CONNECTED:
            self._session_auth.check(what)  # a rejected login never reconnects: say so now
            if time.monotonic() > deadline or self._stop.is_set():
                raise self._unavailable(what)
            time.sleep(0.05)

    def _read_raw(self, apath: str, deadline: float, what: str) -> tuple[bytes, Any] | None:
        """Read after a connection loss to learn a write's outcome, waiting (bounded) for the
        connection to return. Running out of time means the outcome is unknown, not unavailable."""
        while True:
            try:
                self._wait_connected(deadline, what)
                data, stat = self._once(self._client.get_async, apath, deadline=deadline)
                return data, stat
            except ZkNoNode:
                return None
            except (MetadataUnavailableError, *_TRANSIENT) as exc:
                if time.monotonic() > deadline or self._stop.is_set():
                    raise OutcomeUnknownError(
                        f"{what}: the connection to the metadata store {self.uri} was lost with the "
                        f"write in flight and did not return within the {self.op_timeout_s:g} s deadline; "
                        "it may or may not have been applied"
                    ) from exc
                time.sleep(0.05)

    # ---- MetadataStore ------------------------------------------------------------------------

    def create(self, path: str, value: bytes) -> int:
        return self._create(path, value, ephemeral=False)

    def _create(self, path: str, value: bytes, *, ephemeral: bool) -> int:
        apath = self._abs(path)
        data, token = _wrap(value)
        deadline = self._deadline()
        for _ in range(_RESEND_ATTEMPTS_MAX):
            # Not connected until the deadline: nothing was sent, so the store is unavailable.
            self._wait_connected(deadline, f"create of {path}")
            try:
                self._once(self._client.create_async, apath, data, ephemeral=ephemeral, makepath=True, deadline=deadline)
                return 0
            except ZkNodeExists:
                raise NodeExistsError(f"metadata already exists at {path}") from None
            except _TRANSIENT as exc:
                log.info("connection lost during create; resolving outcome path=%s error=%r", path, exc)
                got = self._read_raw(apath, deadline, f"create of {path}")
                if got is None:
                    continue  # not applied: send again
                if _unwrap(got[0])[1] == token:
                    return int(got[1].version)
                raise NodeExistsError(f"metadata already exists at {path}") from None
        raise OutcomeUnknownError(f"create of {path}: connection kept failing")

    def get(self, path: str) -> Versioned | None:
        apath = self._abs(path)
        try:
            data, stat = self._call(self._client.get_async, apath)
        except ZkNoNode:
            return None
        return Versioned(_unwrap(data)[0], int(stat.version))

    def compare_and_set(self, path: str, value: bytes, expected_version: int) -> int:
        apath = self._abs(path)
        data, token = _wrap(value)
        deadline = self._deadline()
        for _ in range(_RESEND_ATTEMPTS_MAX):
            self._wait_connected(deadline, f"compare-and-set of {path}")
            try:
                stat = self._once(self._client.set_async, apath, data, version=expected_version, deadline=deadline)
                return int(stat.version)
            except ZkBadVersion:
                current = self.get(path)
                raise BadVersionError(path, expected_version, None if current is None else current.version) from None
            except ZkNoNode:
                raise NoNodeError(f"no metadata at {path}") from None
            except _TRANSIENT as exc:
                log.info("connection lost during compare-and-set; resolving outcome path=%s error=%r", path, exc)
                got = self._read_raw(apath, deadline, f"compare-and-set of {path}")
                if got is None:
                    raise OutcomeUnknownError(
                        f"compare-and-set of {path}: connection lost and the node is now gone"
                    ) from None
                stored, stat = got
                if _unwrap(stored)[1] == token:
                    return int(stat.version)
                if stat.version == expected_version:
                    continue  # not applied: send again (still conditional)
                if stat.version == expected_version + 1:
                    # The one write that could follow expected_version is not ours.
                    raise BadVersionError(path, expected_version, int(stat.version)) from None
                raise OutcomeUnknownError(
                    f"compare-and-set of {path} at version {expected_version}: connection lost; "
                    f"the node is now at version {stat.version} and it cannot be told whether this write was applied"
                ) from None
        raise OutcomeUnknownError(f"compare-and-set of {path}: connection kept failing")

    def delete(self, path: str, expected_version: int | None = None) -> None:
        apath = self._abs(path)
        version = -1 if expected_version is None else expected_version
        deadline = self._deadline()
        for _ in range(_RESEND_ATTEMPTS_MAX):
            self._wait_connected(deadline, f"delete of {path}")
            try:
                self._once(self._client.delete_async, apath, version=version, deadline=deadline)
                return
            except ZkNoNode:
                raise NoNodeError(f"no metadata at {path}") from None
            except ZkBadVersion:
                current = self.get(path)
                raise BadVersionError(path, version, None if current is None else current.version) from None
            except NotEmptyError:
                raise MetadataError(f"cannot delete {path}: it has children") from None
            except _TRANSIENT as exc:
                log.info("connection lost during delete; resolving outcome path=%s error=%r", path, exc)
                got = self._read_raw(apath, deadline, f"delete of {path}")
                if got is None:
                    return  # gone: deletes are idempotent
                if version != -1 and got[1].version != version:
                    raise BadVersionError(path, version, int(got[1].version)) from None
        raise OutcomeUnknownError(f"delete of {path}: connection kept failing")

    def sync(self, path: str) -> None:
        """ZooKeeper's sync: the session's server catches up with the leader first."""
        self._call(self._client.sync_async, self._abs(path))

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self._call(self._client.get_children_async, self._abs(path)))
        except ZkNoNode:
            return []

    def watch(self, path: str, callback: DataCallback) -> _Watch:
        handle = _Watch()

        def on_data(data: bytes | None, stat: Any) -> bool | None:
            if handle.cancelled:
                return False
            callback(None if stat is None else Versioned(_unwrap(data)[0], int(stat.version)))
            return None

        DataWatch(self._client, self._abs(path), on_data)
        return handle

    def watch_children(self, path: str, callback: ChildrenCallback) -> _Watch:
        handle = _Watch()
        self.ensure_path(path)

        def on_children(children: list[str]) -> bool | None:
            if handle.cancelled:
                return False
            callback(sorted(children))
            return None

        ChildrenWatch(self._client, self._abs(path), on_children, allow_session_lost=True)
        return handle

    def allocate_id(self, counter: str = "ledgers") -> int:
        path = counter_path(counter)
        policy = RetryPolicy(attempts_max=500, deadline_s=self.op_timeout_s * 4)
        delays = policy.delays()
        while True:
            current = self.get(path)
            try:
                if current is None:
                    self.create(path, b"1")
                    return 1
                value = int(current.value or b"0") + 1
                self.compare_and_set(path, str(value).encode(), current.version)
                return value
            except (BadVersionError, NodeExistsError):
                delay = next(delays, None)
                if delay is None:
                    raise IdAllocationError(f"id allocation for {counter} gave up after contention") from None
                time.sleep(delay)
            except OutcomeUnknownError as exc:
                # The counter may have moved for us; skipping is safe (ids are unique, gaps are fine).
                log.warning("id allocation outcome unknown; trying again counter=%s error=%s", counter, exc)

    # ---- ephemeral registrations --------------------------------------------------------------

    def register_ephemeral(
        self, path: str, value: bytes, replace_if: Callable[[bytes], bool] | None = None
    ) -> _ZkRegistration:
        reg = _ZkRegistration(self, path, value, replace_if)
        self._create_ephemeral_waiting(reg)
        with self._reg_lock:
            self._registrations.append(reg)
        return reg

    def _create_ephemeral_waiting(self, reg: _ZkRegistration) -> None:
        """Create the node; if a previous session of the same owner still holds it (a process that was
        killed and restarted), wait for that session to expire, bounded by the session timeout."""
        deadline = time.monotonic() + self._client._session_timeout / 1000.0 * 2 + 5
        while True:
            try:
                self._create(reg.path, reg.value, ephemeral=True)
                return
            except NodeExistsError:
                got = self.get(reg.path)
                stat = self._call(self._client.exists_async, self._abs(reg.path))
                if stat is not None and stat.ephemeralOwner == self._client.client_id[0]:
                    self._replace_ephemeral(reg.path, reg.value)
                    return
                if got is not None and stat is not None and reg.replace_if is not None and reg.replace_if(got.value):
                    log.info("replacing a stale registration of the same identity path=%s", reg.path)
                    try:
                        self.delete(reg.path, int(stat.version))
                    except MetadataError:
                        pass  # changed under us: loop and look again
                    continue
                if time.monotonic() > deadline:
                    raise NodeExistsError(
                        f"{reg.path} is registered by another live session; is another process using the same id?"
                    ) from None
                log.info("waiting for a stale registration to expire path=%s present=%s", reg.path, got is not None)
                time.sleep(0.25)

    def _replace_ephemeral(self, path: str, value: bytes) -> None:
        apath = self._abs(path)
        data, _ = _wrap(value)
        t = self._client.transaction()
        t.delete(apath)
        t.create(apath, data, ephemeral=True)
        try:
            results = t.commit_async().get(timeout=self.op_timeout_s)
        except _TRANSIENT as exc:
            raise OutcomeUnknownError(
                f"replacing the registration at {path} in {self.uri}: no answer within the "
                f"{self.op_timeout_s:g} s deadline"
            ) from exc
        for r in results:
            if isinstance(r, Exception):
                # Not present (e.g. lapsed): just create it.
                self._create(path, value, ephemeral=True)
                return

    def _unregister(self, reg: _ZkRegistration) -> None:
        with self._reg_lock:
            if reg in self._registrations:
                self._registrations.remove(reg)
        try:
            self.delete(reg.path)
        except (NoNodeError, MetadataUnavailableError):
            pass

    def _session_may_be_alive(self) -> bool:
        since = self._disconnected_since
        return not self._lost.is_set() and (since is None or time.monotonic() - since < self.session_timeout_s)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread: never block here, only signal.
        since = self._disconnected_since
        if state == KazooState.CONNECTED:
            if since is not None:
                log.info("ZooKeeper connection back hosts=%s after=%.1fs", self.hosts, time.monotonic() - since)
            self._disconnected_since = None
        elif since is None:
            self._disconnected_since = time.monotonic()
            if not self._stop.is_set():  # once per outage: kazoo's per-attempt lines are at INFO (zk_session.py)
                log.warning("ZooKeeper connection lost hosts=%s; reconnecting, calls wait %gs", self.hosts, self.op_timeout_s)
        if state == KazooState.LOST and not self._stop.is_set() and not self._session_auth.rejected:
            log.warning("ZooKeeper session expired hosts=%s; registrations will be re-created", self.hosts)
            with self._reg_lock:
                for reg in self._registrations:
                    reg._created = False
            self._lost.set()

    def _reregister_loop(self) -> None:
        while not self._stop.is_set():
            if not self._lost.wait(0.5):
                continue
            if self._client.state != KazooState.CONNECTED:
                time.sleep(0.05)
                continue
            with self._reg_lock:
                regs = [r for r in self._registrations if not r.closed]
            try:
                for reg in regs:
                    self._create_ephemeral_waiting(reg)
                    reg._created = True
                    log.info("re-registered after session expiry path=%s", reg.path)
                self._lost.clear()
            except MetadataError as exc:
                log.warning("re-registration failed, will retry error=%s", exc)
                time.sleep(random.uniform(0.1, 0.5))

    def session_id(self) -> int:
        return int(self._client.client_id[0])

    @property
    def kazoo_client(self) -> KazooClient:
        """The underlying client (tests use it to expire sessions)."""
        return self._client

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        with self._reg_lock:
            regs = list(self._registrations)
        for reg in regs:
            reg.close()
        try:
            self._client.stop()
            self._client.close()
        except Exception:  # closing a broken client must not raise
            log.debug("error while closing ZooKeeper client", exc_info=True)
        self._rereg_thread.join(timeout=2)
