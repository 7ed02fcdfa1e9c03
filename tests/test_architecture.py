"""Layering (DESIGN.md): imports point down only, and the client works without pyspark or a JVM."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# package -> top-level modules it must never import
FORBIDDEN = {
    "metadata": {"grpc", "pyspark", "bookie", "pyspark_ledger", "pyarrow"},
    "bookie": {"pyspark", "pyspark_ledger", "pyarrow"},
}
# The client may take only the wire types from the bookie package, the one process setting both
# sides share (malloc tuning for MiB-sized read buffers), the batched crc check and the opt-out
# spelling: leaf modules importing only the standard library (and each other).
CLIENT_ALLOWED_FROM_BOOKIE = ("bookie.proto", "bookie.status", "bookie.malloc_tuning", "bookie.crc_batch", "bookie.opt_out")


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def py_files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_layers(package: str) -> None:
    bad = []
    for f in py_files(package):
        for name in imports_of(f):
            if name.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{f.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


def test_client_takes_only_wire_types_from_bookie() -> None:
    bad = []
    for f in py_files("pyspark_ledger"):
        for name in imports_of(f):
            if name.split(".")[0] == "bookie" and not name.startswith(CLIENT_ALLOWED_FROM_BOOKIE):
                bad.append(f"{f.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


def test_packages_import_without_pyspark_or_grpc_side_effects() -> None:
    code = (
        "import sys, pyspark_ledger, metadata;"
        "import metadata.zookeeper_store, metadata.embedded_store;"
        "bad = [m for m in ('pyspark', 'py4j', 'grpc') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing the base packages pulled in {out.stdout.strip()}"
