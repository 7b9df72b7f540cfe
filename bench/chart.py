"""The chart of one ``python -m bench`` run (``docs/benchmarks.png``).

Four panels from the benchmarks' JSON: ingest events/s of every contender, read
latency against PostgreSQL, the job's lag through a 3x spike, and rebuild time
by player count. A panel whose benchmark did not run says so instead of
drawing nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from bench.formatting import processes

Results = Mapping[str, Sequence[Mapping[str, Any]]]


def _missing(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not run", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _ingest(ax: Axes, summary: Mapping[str, Any]) -> None:
    bars = [
        ("reference\nupdater", summary["reference"]["eps"]),
        ("Redis ceiling\n(every update)", summary.get("redis_ceiling", {}).get("eps") or 0),
        ("job\n1 process", summary["jobs"]["1"]["steady_eps"] or 0),
        ("job\n2 processes", summary["jobs"]["2"]["steady_eps"] or 0),
        ("decode+verify\nonly", summary["ceiling"]["eps"]),
    ]
    labels = [b[0] for b in bars]
    values = [b[1] / 1000 for b in bars]
    drawn = ax.bar(labels, values, color=["#999999", "#c28e0e", "#2a6fb0", "#1b4f80", "#bbbbbb"])
    ax.bar_label(drawn, fmt="%.1fK")
    ax.set_ylabel("thousand events/s")
    ax.set_title(f"Ingest of {summary['args']['events']:,} events (3 boards each)")
    ax.tick_params(axis="x", labelsize=8)


def _reads(ax: Axes, summary: Mapping[str, Any]) -> None:
    sizes = summary.get("sizes") or []
    largest = max(sizes, key=lambda s: s["players"]) if sizes else None
    if largest is None or not largest.get("postgres"):
        _missing(ax, "reads against PostgreSQL")
        return
    ops = [op for op in largest["redis"] if op in largest["postgres"]]
    xs = range(len(ops))
    width = 0.4
    redis = [largest["redis"][op]["p50"] for op in ops]
    pg = [largest["postgres"][op]["p50"] for op in ops]
    ax.bar([x - width / 2 for x in xs], redis, width, label="Redis (this project)", color="#2a6fb0")
    ax.bar([x + width / 2 for x in xs], pg, width, label="PostgreSQL + index", color="#999999")
    ax.set_xticks(list(xs), ops, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms (log scale)")
    ax.set_title(f"Reads at {largest['players']:,} players")
    ax.legend(fontsize=8)


def _spike(ax: Axes, summaries: Sequence[Mapping[str, Any]]) -> None:
    spiked = [s for s in summaries if s["result"].get("spike")]
    if not spiked:
        _missing(ax, "freshness spike")
        return
    summary = spiked[0]
    r = summary["result"]
    times = [t for t, _ in r["lag_samples"]]
    lags = [lag / 1000 for _, lag in r["lag_samples"]]
    start, end = r["spike"]["window_s"]
    ax.axvspan(
        start, end, color="#f2d08a", alpha=0.5, label=f"{summary['args']['spike_factor']:g}x spike"
    )
    ax.plot(times, lags, color="#1b4f80", label="job lag")
    ax.set_xlabel("seconds")
    ax.set_ylabel("lag, thousand events")
    drained = r["spike"]["drain_s_after_spike"]
    note = f"drained {drained} s after" if drained is not None else "not drained"
    ax.set_title(f"{summary['args']['rate']:,.0f}/s with a spike; {note}")
    ax.legend(fontsize=8)


def _rebuild(ax: Axes, summary: Mapping[str, Any]) -> None:
    by_procs: dict[int, list[tuple[int, float]]] = {}
    for size in summary["sizes"]:
        for run in size["runs"]:
            by_procs.setdefault(run["processes"], []).append((size["players"], run["seconds"]))
    for procs, points in sorted(by_procs.items()):
        points.sort()
        ax.plot(
            [p / 1e6 for p, _ in points],
            [s for _, s in points],
            marker="o",
            label=processes(procs),
        )
    ax.set_xlabel("million players")
    ax.set_ylabel("seconds")
    ax.set_title("`lb rebuild` from Kafka")
    ax.legend(fontsize=8)


def draw(results: Results, path: Path) -> None:
    """Write the four-panel PNG to ``path``."""
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    firsts: list[tuple[str, Callable[[Axes, Mapping[str, Any]], None], Axes]] = [
        ("ingest", _ingest, axes[0][0]),
        ("reads", _reads, axes[0][1]),
        ("rebuild", _rebuild, axes[1][1]),
    ]
    for name, fn, ax in firsts:
        found = results.get(name)
        if found:
            fn(ax, found[0])
        else:
            _missing(ax, name)
    freshness = results.get("freshness")
    if freshness:
        _spike(axes[1][0], freshness)
    else:
        _missing(axes[1][0], "freshness")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
