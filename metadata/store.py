"""The MetadataStore interface: versioned values at hierarchical paths, changed only by compare-and-set.

Semantics follow ZooKeeper so that both implementations behave the same:
- `create` makes missing parents, fails with NodeExistsError if the path exists; a new node has version 0.
- `compare_and_set` writes only if the stored version equals `expected_version`, and returns the new
  version; otherwise BadVersionError (the write was definitely not applied). If the connection is lost
  mid-write and the outcome cannot be determined, OutcomeUnknownError: never a guess.
- `delete` with an expected version (or None for any); a node with children cannot be deleted.
- `watch` / `watch_children` call back once with the current state and then on every change, from a
  store thread: callbacks must be quick and must not block (hand work to your own thread).
- `register_ephemeral` makes a node that disappears when its owner dies (ZooKeeper session, or a
  heartbeat TTL in the embedded store) and is re-created by the owner after a session loss.
- `allocate_id` hands out integers that are unique and never reused, even after deletes.
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from metadata.errors import InvalidMetadataError, NoNodeError

# Paths are ZooKeeper-like: absolute, '/'-separated, no empty or dot components.
PATH_CHARS_MAX = 1024


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    version: int


class Watch(Protocol):
    def cancel(self) -> None: ...


class Registration(Protocol):
    path: str

    @property
    def registered(self) -> bool:
        """Whether the node surely exists now (False after a session loss or lapse, until re-created)."""

    def update(self, value: bytes) -> None: ...

    def close(self) -> None: ...


DataCallback = Callable[[Versioned | None], None]
ChildrenCallback = Callable[[list[str]], None]


def check_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or len(path) > PATH_CHARS_MAX:
        raise InvalidMetadataError(f"bad metadata path {path!r}: must be absolute")
    if path != "/" and (path.endswith("/") or any(p in ("", ".", "..") for p in path[1:].split("/"))):
        raise InvalidMetadataError(f"bad metadata path {path!r}")
    return path


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def join(*parts: str) -> str:
    return "/" + "/".join(p.strip("/") for p in parts if p.strip("/"))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a compare-and-set loop retries on conflict: a value, not code scattered around."""

    attempts_max: int = 200
    backoff_initial_ms: float = 1.0
    backoff_max_ms: float = 50.0
    deadline_s: float = 30.0

    def delays(self) -> Iterator[float]:
        """Seconds to sleep before each retry (jittered exponential), bounded by count and deadline."""
        start = time.monotonic()
        delay_ms = self.backoff_initial_ms
        for _ in range(self.attempts_max - 1):
            if time.monotonic() - start > self.deadline_s:
                return
            yield random.uniform(0, delay_ms) / 1000.0
            delay_ms = min(delay_ms * 2, self.backoff_max_ms)


T = TypeVar("T")


def cas_update(
    read: Callable[[], tuple[T, int]],
    write: Callable[[T, int], int],
    change: Callable[[T], T | None],
    retry: RetryPolicy,
) -> tuple[T, int]:
    """The standard compare-and-set loop: read, apply a pure change, write on the version read,
    re-read on conflict. `change` returns the new value, None (or an equal value) when nothing
    needs writing, or raises to give up. Bounded by `retry`."""
    from metadata.errors import BadVersionError

    delays = retry.delays()
    while True:
        value, version = read()
        new = change(value)
        if new is None or new == value:
            return value, version
        try:
            return new, write(new, version)
        except BadVersionError:
            delay = next(delays, None)
            if delay is None:
                raise
            time.sleep(delay)


class MetadataStore(abc.ABC):
    """Abstract metadata store. Implementations: ZooKeeperStore (zk://), EmbeddedStore (sqlite://)."""

    uri: str

    @abc.abstractmethod
    def create(self, path: str, value: bytes) -> int: ...

    @abc.abstractmethod
    def get(self, path: str) -> Versioned | None: ...

    def read(self, path: str) -> Versioned:
        got = self.get(path)
        if got is None:
            raise NoNodeError(f"no metadata at {path}")
        return got

    def exists(self, path: str) -> bool:
        return self.get(path) is not None

    @abc.abstractmethod
    def compare_and_set(self, path: str, value: bytes, expected_version: int) -> int: ...

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int | None = None) -> None: ...

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names (not paths) of the children of `path`, sorted; [] if the path does not exist."""

    @abc.abstractmethod
    def watch(self, path: str, callback: DataCallback) -> Watch: ...

    @abc.abstractmethod
    def watch_children(self, path: str, callback: ChildrenCallback) -> Watch: ...

    @abc.abstractmethod
    def register_ephemeral(
        self, path: str, value: bytes, replace_if: Callable[[bytes], bool] | None = None
    ) -> Registration:
        """Create an ephemeral node. If one exists and `replace_if(existing value)` is true (the
        owner proved it is the same identity restarting, e.g. it holds the data dir lock), the stale
        node is replaced at once instead of waiting for its session or lease to lapse."""

    @abc.abstractmethod
    def allocate_id(self, counter: str = "ledgers") -> int: ...

    @abc.abstractmethod
    def sync(self, path: str) -> None:
        """Make this client's next reads see every write committed before the call (ZooKeeper's
        `sync`: a server that lags the leader catches up). Garbage collection calls it before it
        trusts "no such node" (bookie/storage/gc.py); a no-op where reads never lag."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def ensure_path(self, path: str) -> None:
        """Create `path` (empty) if it is missing; existing values are left alone."""
        try:
            self.create(path, b"")
        except Exception as exc:  # only "already exists" is fine here
            from metadata.errors import NodeExistsError

            if not isinstance(exc, NodeExistsError):
                raise

    def walk(self, path: str, depth: int) -> Iterator[str]:
        """Paths exactly `depth` levels below `path`, in sorted order, fetched level by level."""
        if depth == 0:
            yield path
            return
        for name in self.children(path):
            yield from self.walk(join(path, name), depth - 1)

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
