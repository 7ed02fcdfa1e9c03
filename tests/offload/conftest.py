"""Offload tests: a real S3 API on loopback (the moto server, started and stopped by PID)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pyspark_ledger.testing.s3_server import LocalS3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    with LocalS3(tmp_path_factory.mktemp("moto")) as s3:
        yield s3


@pytest.fixture
def s3_env(s3_server: LocalS3) -> Iterator[LocalS3]:
    """The S3 settings in this process's environment (and its children's) for one test."""
    saved = {k: os.environ.get(k) for k in s3_server.env()}
    os.environ.update(s3_server.env())
    try:
        yield s3_server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
