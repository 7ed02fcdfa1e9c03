"""Layering (docs/architecture.md, "Which way imports go"): imports point down only, and the client
works without pyspark or a JVM."""

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


# ---- the client's rooms (docs/architecture.md "The rooms") ---------------------------------------

CLIENT = "pyspark_ledger"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Every module `path` imports, wherever the import stands: top level, inside a function,
    under TYPE_CHECKING. `from P import X` counts as importing P.X when X is a submodule (and
    then not P itself: that import runs P's __init__ only as a parent package, and a package's
    __init__ re-exporting its own modules is no circle; the __init__'s own imports still count)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(base)
    return out


def client_import_graph(packages: tuple[str, ...] = (CLIENT,)) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports. Left out: a package __init__'s imports of its own
    submodules, which are re-exports (pyspark_ledger.datasource loads .source on first use of
    DefaultSource, and source imports SOURCE_NAME from the package): Python runs the __init__
    first either way, so such a pair is no circle a caller could trip over."""
    files = {module_name(f): f for package in packages for f in py_files(package)}
    known = set(files)
    graph = {}
    for m, f in files.items():
        own = f"{m}." if f.name == "__init__.py" else None
        graph[m] = {d for d in imported_modules(f, known) if d in known and d != m and not (own and d.startswith(own))}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles_in_the_client() -> None:
    cycle = find_cycle(client_import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_import_circles_in_metadata_or_the_bookie() -> None:
    """Lazy imports inside functions count too: metadata.logs <-> metadata.log_lookup was one
    (issue 32 item 1); the lookup now takes what it reads as a protocol."""
    for package in ("metadata", "bookie"):
        cycle = find_cycle(client_import_graph((package,)))
        assert cycle is None, "import circle: " + " -> ".join(cycle or [])


# The protocol room is pure (docs/architecture.md): no I/O, threads, clocks or metadata store, so the
# deterministic simulator can drive the very code production runs. `random` is allowed: the
# simulator passes seeded Random objects. The bare `metadata` package is out too: it re-exports
# the stores and the registry, so `from metadata import X` would hide which part is used (name
# the module: metadata.ledger, metadata.quorum, ...). This checks what the room declares; the
# metadata package's __init__ still runs (and loads its stores) as a parent package.
PROTOCOL_FORBIDDEN_ROOTS = {"socket", "select", "threading", "concurrent", "time", "asyncio", "grpc", "kazoo",
                            "sqlite3", "subprocess"}
PROTOCOL_FORBIDDEN_MODULES = ("metadata.store", "metadata.zookeeper_store", "metadata.embedded_store",
                              "metadata.registry", "pyspark_ledger.transport", "pyspark_ledger.ledger",
                              "pyspark_ledger.testing", "pyspark_ledger.client", "pyspark_ledger.log")


def test_protocol_room_is_pure() -> None:
    known = {module_name(f) for package in (CLIENT, "metadata") for f in py_files(package)}
    bad = []
    for f in py_files(f"{CLIENT}/protocol"):
        for name in imported_modules(f, known):
            forbidden = name.split(".")[0] in PROTOCOL_FORBIDDEN_ROOTS or name == "metadata" or any(
                name == m or name.startswith(m + ".") for m in PROTOCOL_FORBIDDEN_MODULES)
            if forbidden:
                bad.append(f"{f.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


ROOM_FILE_LINES_MAX = 500
SMALL_ROOMS = ("protocol", "ledger", "transport", "testing", "log", "autorecovery")


def test_room_files_stay_small() -> None:
    big = [
        f"{f.relative_to(REPO)}: {n} lines"
        for room in SMALL_ROOMS
        for f in py_files(f"{CLIENT}/{room}")
        if (n := len(f.read_text().splitlines())) > ROOM_FILE_LINES_MAX
    ]
    assert not big, f"files over {ROOM_FILE_LINES_MAX} lines:\n" + "\n".join(big)


# The writer's decisions live once, in protocol.writer_machine: the product's write handle and
# the simulator's writer both drive that machine, so the simulator checks the code that runs,
# not a copy of its rule. A driver that imports the pieces the machine is built from, or reads
# an entry's acks itself, carries (part of) a copy of the rule.
WRITER_DRIVERS = ("pyspark_ledger/ledger/write_handle.py", "pyspark_ledger/testing/sim/writer.py")
WRITER_RULE_PIECES = {"PendingAdds", "plan_ensemble_change", "writer_close_verdict", "write_sets", "write_set_of"}
WRITER_RULE_ATTRIBUTES = {"acked", "collect_completed", "on_send_failed", "ack_quorum_reachable"}


def writer_rule_copies(source: str) -> list[str]:
    """What in `source` (a writer driver) re-does the machine's job; empty if it only drives it."""
    tree = ast.parse(source)
    found = []
    machine_imported = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module == "pyspark_ledger.protocol.writer_machine" and "WriterMachine" in names:
                machine_imported = True
            found += [f"imports {node.module}.{n}" for n in sorted(names & WRITER_RULE_PIECES)]
        elif isinstance(node, ast.Attribute) and node.attr in WRITER_RULE_ATTRIBUTES:
            found.append(f"reads .{node.attr} (line {node.lineno})")
    if not machine_imported:
        found.append("does not import WriterMachine from pyspark_ledger.protocol.writer_machine")
    return found


@pytest.mark.parametrize("driver", WRITER_DRIVERS)
def test_writers_drive_the_protocol_writer_machine(driver: str) -> None:
    copies = writer_rule_copies((REPO / driver).read_text())
    assert not copies, f"{driver} carries its own writer rule: " + "; ".join(copies)


def test_a_writer_with_its_own_ack_rule_is_caught() -> None:
    """The check has teeth: the simulator's old writer (its own PendingAdds, its own plan and
    close verdict) and a driver that counts acks itself are both refused."""
    own_copy = (
        "from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds\n"
        "from pyspark_ledger.protocol.ensemble_change import plan_ensemble_change\n"
        "from pyspark_ledger.protocol.close_rules import writer_close_verdict\n"
    )
    assert len(writer_rule_copies(own_copy)) == 4  # three pieces, and no machine
    counting = (
        "from pyspark_ledger.protocol.writer_machine import WriterMachine\n"
        "def on_ack(p, bookie, a):\n"
        "    p.acked.append(bookie)\n"
        "    return len(p.acked) >= a\n"
    )
    assert writer_rule_copies(counting) == ["reads .acked (line 3)", "reads .acked (line 4)"]
    assert writer_rule_copies("from pyspark_ledger.protocol.writer_machine import WriterMachine\n") == []


# The storage engine is made of parts (docs/storage.md): each file one part or one format, under
# a tighter cap than the other rooms.
STORAGE_FILE_LINES_MAX = 400
NO_MIXIN_PACKAGES = ("bookie", "metadata", CLIENT)


def test_storage_files_stay_small() -> None:
    big = [
        f"{f.relative_to(REPO)}: {n} lines"
        for f in py_files("bookie/storage")
        if (n := len(f.read_text().splitlines())) > STORAGE_FILE_LINES_MAX
    ]
    assert not big, f"files over {STORAGE_FILE_LINES_MAX} lines:\n" + "\n".join(big)


def mixin_classes(source: str) -> list[str]:
    """Classes named *Mixin, and classes that take a *Mixin base (a mixin under another name
    still shows where it is mixed in)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                     for b in node.bases]
            if node.name.endswith("Mixin") or any(b.endswith("Mixin") for b in bases):
                found.append(node.name)
    return found


def test_mixin_check_finds_a_mixin() -> None:
    assert mixin_classes("class ReadsMixin:\n    pass\n") == ["ReadsMixin"]
    assert mixin_classes("class Engine(a.ReadsMixin, Base):\n    pass\n") == ["Engine"]
    assert mixin_classes("class Engine(Base):\n    pass\n") == []


def test_no_mixin_classes() -> None:
    bad = [
        f"{f.relative_to(REPO)}: {name}"
        for package in NO_MIXIN_PACKAGES
        for f in py_files(package)
        for name in mixin_classes(f.read_text())
    ]
    assert not bad, "mixin classes (build objects with narrow interfaces instead):\n" + "\n".join(bad)


# ---- the Spark room's four parts (docs/architecture.md "The Spark room") -------------------------
# Ranks, bottom up: a datasource module imports datasource modules only of a lower rank or of its
# own part. read/ and write/ share rank 3 and so never import each other; stream/ builds on both.
DATASOURCE = f"{CLIENT}.datasource"
DATASOURCE_SHARED_LEAVES = ("errors", "rows", "keyed_entries", "worker_gc")
DATASOURCE_RANKS = {"options": 1, "clients": 2, "read": 3, "write": 3, "stream": 4}
DATASOURCE_TOP_RANK = 5  # the package itself and source.py (the pyspark-facing registration)


def datasource_part(module: str) -> tuple[str, int] | None:
    """(part, rank) of a datasource module, or None for a module outside the data source."""
    if module == DATASOURCE:  # the package's __init__ and source.py are one part: SOURCE_NAME, DefaultSource
        return "source", DATASOURCE_TOP_RANK
    if not module.startswith(DATASOURCE + "."):
        return None
    part = module[len(DATASOURCE) + 1:].split(".")[0]
    if part in DATASOURCE_SHARED_LEAVES:
        return part, 0
    if part in DATASOURCE_RANKS:
        return part, DATASOURCE_RANKS[part]
    assert part == "source", f"{module}: a datasource module outside the four parts and the shared modules"
    return part, DATASOURCE_TOP_RANK


def datasource_layer_breaks(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, deps in sorted(graph.items()):
        if (here := datasource_part(m)) is None:
            continue
        for d in sorted(deps):
            there = datasource_part(d)
            if there is not None and there[0] != here[0] and there[1] >= here[1]:
                bad.append(f"{m} imports {d}")
    return bad


def test_datasource_parts_import_only_downwards() -> None:
    bad = datasource_layer_breaks(client_import_graph())
    assert not bad, "\n".join(bad)


def test_datasource_layer_check_catches_read_importing_write() -> None:
    planted = {f"{DATASOURCE}.read.codec": {f"{DATASOURCE}.write.packer", f"{DATASOURCE}.rows"},
               f"{DATASOURCE}.options.values": {f"{DATASOURCE}.clients"},
               f"{DATASOURCE}.stream.sink": {f"{DATASOURCE}.write.job", f"{DATASOURCE}.errors"}}
    assert datasource_layer_breaks(planted) == [f"{DATASOURCE}.options.values imports {DATASOURCE}.clients",
                                                f"{DATASOURCE}.read.codec imports {DATASOURCE}.write.packer"]
