"""Generated protobuf code is committed; regenerate every .proto and fail on any drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROTOS = sorted(p.relative_to(REPO) for pkg in ("metadata", "bookie") for p in (REPO / pkg).rglob("*.proto"))


def test_there_are_protos() -> None:
    assert Path("metadata/ledger_metadata.proto") in PROTOS


@pytest.mark.parametrize("proto", PROTOS, ids=str)
def test_generated_code_matches_proto(proto: Path, tmp_path: Path) -> None:
    has_service = re.search(r"^service\s", (REPO / proto).read_text(), re.M) is not None
    args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO}", f"--python_out={tmp_path}"]
    if has_service:
        args.append(f"--grpc_python_out={tmp_path}")
    out = subprocess.run(args + [str(proto)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stem = proto.with_suffix("")
    outputs = [Path(f"{stem}_pb2.py")] + ([Path(f"{stem}_pb2_grpc.py")] if has_service else [])
    for rel in outputs:
        fresh = (tmp_path / rel).read_text()
        committed = (REPO / rel).read_text()
        assert fresh == committed, f"{rel} is out of date: regenerate it from {proto} (see the comment in the .proto)"
