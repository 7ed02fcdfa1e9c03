"""Draw docs/benchmarks.md's plots from the figures kept in bench/results/figures.json.

    python bench/plot_benchmarks.py [--figures bench/results/figures.json] [--out docs/img]

The benchmarks print tables (bench/client_bench.py, spark_bench.py, tls_bench.py, ...); the
figures of the documented runs are copied into figures.json (medians and the runs' ranges),
and this script draws them with matplotlib: bars for medians, whiskers for the ranges. Needs
the `bench` extra (`pip install -e '.[bench]'`). Output PNGs carry no timestamp or version, so
re-running on unchanged figures changes no bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads
from matplotlib.axes import Axes
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
FIGURES_DEFAULT = ROOT / "bench" / "results" / "figures.json"
OUT_DEFAULT = ROOT / "docs" / "img"
DPI = 110
OURS, PEER, OURS_BEFORE, PEER_BEFORE = "#1f77b4", "#ff7f0e", "#aec7e8", "#ffbb78"


def _err(row: dict[str, Any], key: str) -> list[float]:
    """[below, above] the median for a whisker; 0 where only a median was published."""
    value, rng = row.get(key), row.get(key + "_range")
    if value is None or rng is None:
        return [0.0, 0.0]
    return [max(0.0, value - rng[0]), max(0.0, rng[1] - value)]


def _bars(ax: Axes, groups: list[str], series: list[tuple[str, str, list[float], list[list[float]]]],
          ylabel: str) -> None:
    """Grouped bars: series = (label, colour, medians per group, [below, above] per group)."""
    width = 0.8 / len(series)
    for i, (label, colour, values, errs) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        yerr = [[e[0] for e in errs], [e[1] for e in errs]]
        bars = ax.bar(xs, values, width, label=label, color=colour, yerr=yerr, capsize=3,
                      error_kw={"elinewidth": 1})
        ax.bar_label(bars, labels=[_fmt(v) for v in values], padding=2, fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _fmt(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _save(fig: Figure, out: Path, name: str, layout: bool = True) -> Path:
    path = out / name
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def client_plots(data: dict[str, Any], out: Path) -> list[Path]:
    d = data["client_vs_nats"]
    entries = ["1 KiB", "100 B"]

    def rows(system_prefix: str) -> list[dict[str, Any]]:
        by_entry = {r["entry"]: r for r in d["rows"] if r["system"].startswith(system_prefix)}
        return [by_entry[e] for e in entries]

    ours, nats = rows("pyspark-ledger"), rows("NATS")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    _bars(ax, entries, [
        ("pyspark-ledger E3/W3/A2 (fdatasync on 2 of 3)", OURS, [r["acked_per_s"] for r in ours],
         [_err(r, "acked_per_s") for r in ours]),
        ("NATS JetStream R3 (in memory on 2 of 3)", PEER, [r["acked_per_s"] for r in nats],
         [_err(r, "acked_per_s") for r in nats]),
    ], "acknowledged adds/s")
    ax.set_title(f"One client, 100k pipelined adds ({d['date']})", fontsize=10)
    ax.legend(fontsize=8)
    paths = [_save(fig, out, "client_throughput.png")]

    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6), sharey=True)
    for ax, key in zip(axes, ("p50_ms", "p99_ms")):
        _bars(ax, entries, [
            ("pyspark-ledger", OURS, [r[key] for r in ours], [_err(r, key) for r in ours]),
            ("NATS JetStream", PEER, [r[key] for r in nats], [_err(r, key) for r in nats]),
        ], "ms per add" if key == "p50_ms" else "")
        ax.set_title(f"{key[:3]} latency, one add at a time", fontsize=10)
    axes[0].legend(fontsize=8)
    paths.append(_save(fig, out, "client_latency.png"))
    return paths


def spark_plot(data: dict[str, Any], out: Path) -> Path:
    d = data["spark_vs_parquet"]
    fig, axes = plt.subplots(1, len(d["rows"]), figsize=(11.0, 3.6))
    for ax, row in zip(axes, d["rows"]):
        keys = ["ledger", "parquet", "ledger_before", "parquet_before"]
        _bars(ax, [""], [
            (label, colour, [row[k]], [_err(row, k)])
            for k, label, colour in zip(keys, ["ledger", "Parquet (same runs)", "ledger, code before",
                                               "Parquet (those runs)"], [OURS, PEER, OURS_BEFORE, PEER_BEFORE])
        ], row["unit"])
        ax.set_title(row["workload"], fontsize=10)
        ax.set_xticks([])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle(f"Spark local[2]: format(\"ledger\") against Parquet, 2M rows ({d['date']})", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    return _save(fig, out, "spark_vs_parquet.png", layout=False)


def tls_plot(data: dict[str, Any], out: Path) -> Path:
    d = data["tls"]
    modes = [r["mode"] for r in d["rows"]]
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.4))
    _bars(axes[0], modes, [
        ("medians of 5 rounds", OURS, [r["adds_per_s"] for r in d["rows"]], [[0, 0]] * len(modes)),
        ("an earlier 3-round run", OURS_BEFORE, [r["earlier_adds_per_s"] for r in d["rows"]], [[0, 0]] * len(modes)),
    ], "adds/s")
    _bars(axes[1], modes, [
        ("medians of 5 rounds", OURS, [r["p50_ms"] for r in d["rows"]], [[0, 0]] * len(modes)),
        ("an earlier 3-round run", OURS_BEFORE, [r["earlier_p50_ms"] for r in d["rows"]], [[0, 0]] * len(modes)),
    ], "p50 ms per add")
    axes[0].set_title("throughput, 1 KiB E3/W3/A2", fontsize=10)
    axes[1].set_title("latency", fontsize=10)
    axes[0].legend(fontsize=7, loc="lower left")
    return _save(fig, out, "tls_cost.png")


def slow_day_plot(data: dict[str, Any], out: Path) -> Path:
    d = data["client_slow_day"]
    rows = [r for r in d["rows"] if r["entry"] == "1 KiB"]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    _bars(ax, [r["system"].replace(", ", ",\n") for r in rows],
          [("1 KiB adds", OURS, [r["acked_per_s"] for r in rows], [_err(r, "acked_per_s") for r in rows])],
          "acknowledged adds/s")
    ax.set_title(f"A slow day ({d['date']}): add transports and NATS", fontsize=10)
    ax.tick_params(axis="x", labelsize=8)
    return _save(fig, out, "client_slow_day.png")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--figures", type=Path, default=FIGURES_DEFAULT, help="JSON of documented figures")
    p.add_argument("--out", type=Path, default=OUT_DEFAULT, help="directory for the PNGs")
    args = p.parse_args()
    data = json.loads(args.figures.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    for path in [*client_plots(data, args.out), slow_day_plot(data, args.out), spark_plot(data, args.out),
                 tls_plot(data, args.out)]:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
