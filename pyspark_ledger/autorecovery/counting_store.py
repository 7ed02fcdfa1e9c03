"""A MetadataStore that counts the requests sent through it: the audit scan runs on one, so its
request rate is measured (a Prometheus counter) rather than estimated."""

from __future__ import annotations

from collections.abc import Callable

from metadata.store import ChildrenCallback, DataCallback, MetadataStore, Registration, Versioned, Watch


class CountingStore(MetadataStore):
    def __init__(self, inner: MetadataStore, count: Callable[[], None]):
        self.inner = inner
        self.uri = inner.uri
        self._count = count

    def create(self, path: str, value: bytes) -> int:
        self._count()
        return self.inner.create(path, value)

    def get(self, path: str) -> Versioned | None:
        self._count()
        return self.inner.get(path)

    def compare_and_set(self, path: str, value: bytes, expected_version: int) -> int:
        self._count()
        return self.inner.compare_and_set(path, value, expected_version)

    def delete(self, path: str, expected_version: int | None = None) -> None:
        self._count()
        self.inner.delete(path, expected_version)

    def children(self, path: str) -> list[str]:
        self._count()
        return self.inner.children(path)

    def watch(self, path: str, callback: DataCallback) -> Watch:
        return self.inner.watch(path, callback)

    def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        return self.inner.watch_children(path, callback)

    def register_ephemeral(self, path: str, value: bytes,
                           replace_if: Callable[[bytes], bool] | None = None) -> Registration:
        self._count()
        return self.inner.register_ephemeral(path, value, replace_if)

    def allocate_id(self, counter: str = "ledgers") -> int:
        self._count()
        return self.inner.allocate_id(counter)

    def sync(self, path: str) -> None:
        self._count()
        self.inner.sync(path)

    def close(self) -> None:
        """The inner store belongs to whoever opened it."""
