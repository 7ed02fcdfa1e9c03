"""Draw docs/img/architecture.png: the rooms and the imports between them, read from the code.

    python docs/draw_architecture.py

Every `import` and `from ... import` (top level, function-local and TYPE_CHECKING alike) in
metadata/, bookie/ and pyspark_ledger/ is mapped to its room; an arrow from room A to room B,
labelled with the number of import statements, means A imports B. Rooms stand above what they
import, so arrows point down; an arrow that points up is drawn red and printed. Needs matplotlib
(the `bench` extra). The PNG carries no timestamp or version: unchanged code, unchanged bytes.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img" / "architecture.png"
PACKAGES = ("metadata", "bookie", "pyspark_ledger")
CLIENT_ROOMS = ("protocol", "transport", "ledger", "log", "datasource", "cli", "autorecovery", "testing")
BOOKIE_LEAVES = ("status", "crc_batch", "malloc_tuning", "opt_out")

# room -> (x, y, colour, what it holds); y is its layer (higher imports lower)
ROOMS: dict[str, tuple[float, float, str, str]] = {
    "datasource": (0.5, 6.0, "#fde0c5", "Spark data source"),
    "cli": (2.6, 6.0, "#fde0c5", "`ledger` admin shell"),
    "testing": (8.6, 6.0, "#e0e0e0", "local clusters, faults, simulator"),
    "autorecovery": (2.6, 5.0, "#fde0c5", "auditor, re-replication"),
    "client": (0.5, 4.0, "#c6dbef", "LedgerClient (client.py)"),
    "log": (2.6, 4.0, "#c6dbef", "named logs"),
    "ledger": (1.55, 3.0, "#c6dbef", "write/read handles, recovery"),
    "transport": (0.5, 2.0, "#c6dbef", "add streams, poller, gRPC, TLS"),
    "protocol": (2.6, 2.0, "#c7e9c0", "PURE quorum rules"),
    "errors": (1.55, 1.0, "#c6dbef", "pyspark_ledger.errors"),
    "bookie": (6.2, 4.0, "#fdd0a2", "bookie server, services"),
    "bookie/storage": (6.2, 2.6, "#fdd0a2", "journal, entry logs, index"),
    "bookie/proto": (4.7, 1.0, "#fdae6b", "wire types (gRPC, protobuf)"),
    "bookie leaves": (7.6, 1.0, "#fdae6b", "status, crc_batch, ..."),
    "metadata": (4.2, -0.3, "#dadaeb", "stores, ledger metadata, logs, registry"),
}
BOX_W, BOX_H = 1.8, 0.55


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "metadata":
        return "metadata"
    if parts[0] == "bookie":
        if len(parts) > 1 and parts[1] in ("storage", "proto"):
            return "bookie/" + parts[1]
        if len(parts) > 1 and parts[1] in BOOKIE_LEAVES:
            return "bookie leaves"
        return "bookie"
    if parts[0] == "pyspark_ledger":
        if len(parts) > 1 and parts[1] in CLIENT_ROOMS:
            return parts[1]
        if len(parts) > 1 and parts[1] == "errors":
            return "errors"
        return "client"
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges() -> Counter[tuple[str, str]]:
    edges: Counter[tuple[str, str]] = Counter()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = room_of(module_name(path))
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    # `from bookie import crc_batch` imports bookie.crc_batch, a leaf module
                    names = [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                for target in {room_of(name) for name in names}:  # once per statement and room
                    if source and target and target != source:
                        edges[(source, target)] += 1
    return edges


def draw(edges: Counter[tuple[str, str]]) -> list[str]:
    fig, ax = plt.subplots(figsize=(11.5, 7.6))
    upward = []
    for (a, b), count in sorted(edges.items()):
        (xa, ya, _, _), (xb, yb, _, _) = ROOMS[a], ROOMS[b]
        up = yb > ya
        if up:
            upward.append(f"{a} -> {b} ({count} imports)")
        ax.annotate("", xy=(xb + BOX_W / 2, yb + BOX_H), xytext=(xa + BOX_W / 2, ya),
                    arrowprops={"arrowstyle": "-|>", "color": "#d62728" if up else "#777777",
                                "alpha": 0.9 if up else 0.45, "lw": 0.6 + min(count, 30) / 12,
                                "shrinkA": 2, "shrinkB": 2, "connectionstyle": "arc3,rad=0.06"})
        mx, my = (xa + xb) / 2 + BOX_W / 2, (ya + yb + BOX_H) / 2
        ax.text(mx, my, str(count), fontsize=6, color="#d62728" if up else "#555555", ha="center", va="center",
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    for name, (x, y, colour, what) in ROOMS.items():
        ax.add_patch(FancyBboxPatch((x, y), BOX_W, BOX_H, boxstyle="round,pad=0.02", fc=colour, ec="#333333", lw=0.8))
        label = name if name in ("metadata", "bookie", "errors", "client") or name.startswith("bookie") else name + "/"
        ax.text(x + BOX_W / 2, y + BOX_H * 0.66, label, ha="center", va="center", fontsize=9, weight="bold")
        ax.text(x + BOX_W / 2, y + BOX_H * 0.28, what, ha="center", va="center", fontsize=6.5)
    ax.text(0.5, 6.85, "pyspark_ledger (the client package)", fontsize=10, weight="bold", color="#08519c")
    ax.text(6.2, 4.85, "bookie (the storage server)", fontsize=10, weight="bold", color="#a63603")
    ax.set_xlim(0.2, 10.7)
    ax.set_ylim(-0.6, 7.1)
    ax.axis("off")
    ax.set_title("Rooms and their imports (arrow: imports; number: import statements)", fontsize=11)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return upward


def main() -> None:
    edges = import_edges()
    unknown = {r for e in edges for r in e} - set(ROOMS)
    if unknown:
        raise SystemExit(f"rooms without a place in the drawing: {sorted(unknown)}")
    upward = draw(edges)
    print(OUT.relative_to(ROOT))
    for line in upward:
        print("points up:", line)


if __name__ == "__main__":
    main()
