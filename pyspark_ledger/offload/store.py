"""An object store for offloaded ledgers, over pyarrow.fs.

    file:///abs/dir          a local or shared directory (the embedded default)
    s3://bucket[/prefix]     an S3-compatible store

S3 settings come from the environment, never from a command line: LEDGER_S3_ENDPOINT (e.g.
http://127.0.0.1:9000; unset: AWS), AWS_REGION or AWS_DEFAULT_REGION, and the credentials as the
AWS libraries read them (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, or the
file AWS_SHARED_CREDENTIALS_FILE with AWS_PROFILE). The URI itself never holds a secret, so it is
what metadata records.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from pyspark_ledger.offload.errors import BadStoreUriError, StoreError

S3_ENDPOINT_ENV = "LEDGER_S3_ENDPOINT"
STORE_LIST_MAX = 1_000_000  # objects one listing returns at most (a log instance holds one per ledger)
_S3_TIMEOUT_S = 30.0


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _s3(endpoint: str | None, *, make_buckets: bool = False) -> pafs.FileSystem:
    kwargs: dict[str, object] = {"region": _region(), "connect_timeout": _S3_TIMEOUT_S,
                                 "request_timeout": _S3_TIMEOUT_S, "allow_bucket_creation": make_buckets,
                                 "allow_delayed_open": True}  # a small object is one PutObject, not a multipart upload
    if endpoint:
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise BadStoreUriError(f"{S3_ENDPOINT_ENV}={endpoint!r} is not an http:// or https:// address")
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if access and secret:  # else the SDK's own chain (the shared credentials file, a profile, ...)
        kwargs.update(access_key=access, secret_key=secret, session_token=os.environ.get("AWS_SESSION_TOKEN"))
    return pafs.S3FileSystem(**kwargs)


@dataclass(frozen=True)
class ObjectInfo:
    name: str  # relative to the store's root
    size_bytes: int
    mtime_ms: int | None


class ObjectStore:
    """Named objects under one root. Names are relative, '/'-separated, never '..'."""

    def __init__(self, uri: str):
        parsed = urllib.parse.urlsplit(uri)
        if parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
                raise BadStoreUriError(f"offload store {uri!r}: a file store is file:///absolute/path")
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self.root = parsed.path.rstrip("/") or "/"
            self.local = True
        elif parsed.scheme == "s3":
            if not parsed.netloc or parsed.query or parsed.fragment or "@" in parsed.netloc:
                raise BadStoreUriError(f"offload store {uri!r}: an S3 store is s3://bucket/prefix (no credentials)")
            self.fs = _s3(os.environ.get(S3_ENDPOINT_ENV))
            self.root = (parsed.netloc + parsed.path).rstrip("/")
            self.local = False
        else:
            raise BadStoreUriError(f"offload store {uri!r}: the scheme must be file:// or s3://")
        self.uri = uri.rstrip("/")

    def path(self, name: str) -> str:
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts):
            raise BadStoreUriError(f"bad object name {name!r}")
        return f"{self.root}/{name}"

    def put(self, name: str, data: bytes) -> None:
        """Write one object whole. A local file is fsynced (and its directory) before this returns."""
        path = self.path(name)
        try:
            if self.local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _write_synced(path, data)
            else:
                with self.fs.open_output_stream(path) as out:
                    out.write(data)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"writing {self.uri}/{name}: {exc}") from exc

    def get(self, name: str) -> bytes:
        try:
            with self.fs.open_input_file(self.path(name)) as f:
                return bytes(f.read())
        except FileNotFoundError as exc:
            raise StoreError(f"{self.uri}/{name} is missing") from exc
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"reading {self.uri}/{name}: {exc}") from exc

    def open(self, name: str) -> pa.NativeFile:
        """A random-access file (Parquet reads only the row groups they need)."""
        try:
            return self.fs.open_input_file(self.path(name))
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"opening {self.uri}/{name}: {exc}") from exc

    def delete(self, name: str) -> bool:
        """Delete one object; False if it was not there."""
        try:
            self.fs.delete_file(self.path(name))
            return True
        except FileNotFoundError:
            return False
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"deleting {self.uri}/{name}: {exc}") from exc

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under `prefix` (recursive), bounded by STORE_LIST_MAX."""
        base = self.path(prefix)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"listing {self.uri}/{prefix}: {exc}") from exc
        if len(infos) > STORE_LIST_MAX:
            raise StoreError(f"{self.uri}/{prefix} holds more than {STORE_LIST_MAX} objects")
        out = []
        for i in infos:
            if i.type == pafs.FileType.File:
                mtime = None if i.mtime is None else int(i.mtime.timestamp() * 1000)
                out.append(ObjectInfo(i.path[len(self.root) + 1:], int(i.size or 0), mtime))
        return out

    def create_bucket_if_missing(self) -> None:
        """Tests and the quickstart: make the S3 bucket (a file store makes its directories itself)."""
        if self.local:
            return
        bucket = self.root.split("/", 1)[0]
        try:
            if not self.fs.get_file_info(bucket).type == pafs.FileType.Directory:
                _s3(os.environ.get(S3_ENDPOINT_ENV), make_buckets=True).create_dir(bucket)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"creating bucket {bucket}: {exc}") from exc


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
