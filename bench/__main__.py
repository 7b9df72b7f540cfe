"""Every benchmark in one run: the headline table, a chart and every section.

Usage (from the repository root, with the services up: ``.venv/bin/lb up``)::

    .venv/bin/python -m bench            # ~50 min on 2 cores; rewrites docs/BENCHMARKS.md
    .venv/bin/python -m bench --quick    # small sizes, a smoke test; writes to a temp dir
                                         # (a copy of the doc there, every section rendered)

Runs, one after the other so that none competes with another for the cores:
``bench.ingest`` (1M events), ``bench.freshness`` (steady at 20,000/s with 2
processes, and 10,000/s with a 3x spike for 10 s), ``bench.reads`` (1M and 10M
players, against PostgreSQL), ``bench.rebuild`` (1M and 10M players),
``bench.backfill`` and ``bench.steady`` (10M players loaded; reads beside the
job at 20K/s, 50K/s and full speed). Each
writes its own section of ``docs/BENCHMARKS.md``; this script then writes the
``bench.summary`` section (the headline ratios, all from this run),
``docs/benchmarks.png`` (the chart) and ``docs/benchmarks.json`` (every raw
summary). A benchmark whose own checks fail stops the run (exit 1) before the
summary is written, so the published figures always come from one run.

``LB_BENCH_DOC`` names another file for the sections (every benchmark reads
it through the settings, ``config/settings.py``); ``--quick`` sets it, for the
benchmarks it starts, to its scratch copy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chart import draw
from bench.common import ROOT, base_settings, bench_doc, log, machine, machine_line, write_section
from bench.headline import headline_markdown
from config.settings import child_environment

FULL: dict[str, list[list[str]]] = {
    # The project's shape first: the headline's ingest rows come from it.
    "ingest": [["--workload", "zipf"], ["--workload", "new-players"], ["--workload", "history"]],
    "freshness": [
        ["--rate", "20000", "--seconds", "30", "--processes", "2"],
        ["--rate", "10000", "--seconds", "40", "--spike-factor", "3", "--spike-at", "10"],
    ],
    "reads": [[]],
    "rebuild": [[]],
    "backfill": [[]],
    # The seeds' game: 10M players loaded, reads beside the job (~11 min; --pin needs root).
    "steady": [["--pin"]],
}
QUICK: dict[str, list[list[str]]] = {
    "ingest": [
        [
            "--events",
            "60000",
            "--players",
            "60000",
            "--repeat",
            "1",
            "--ref-events",
            "10000",
            "--stage-events",
            "30000",
            "--workload",
            workload,
        ]
        for workload in ("zipf", "new-players", "history")
    ],
    "freshness": [
        ["--rate", "5000", "--seconds", "10", "--idle-seconds", "0", "--processes", "2"],
        [
            "--rate",
            "3000",
            "--seconds",
            "16",
            "--spike-factor",
            "3",
            "--spike-at",
            "5",
            "--spike-seconds",
            "4",
            "--idle-seconds",
            "0",
        ],
    ],
    "reads": [["--players", "20000", "100000", "--calls", "200"]],
    "rebuild": [["--players", "20000", "100000"]],
    "backfill": [["--players", "20000", "--baseline-s", "5"]],
    "steady": [
        ["--players", "20000", "--rates", "max", "--events", "20000", "--idle-s", "3"],
    ],
}


def _run(name: str, args: list[str], doc: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", f"bench.{name}", *args]
    log(f"=== {' '.join(['python', *argv[1:]])}")
    started = time.monotonic()
    child = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=child_environment({"LB_BENCH_DOC": str(doc)}),
    )
    try:
        stdout, _ = child.communicate()
    except BaseException:
        # Stopped (SIGTERM, Ctrl-C): the benchmark deletes its topics and keys on SIGTERM.
        child.terminate()
        child.wait(120)
        raise
    log(f"=== bench.{name} exit {child.returncode} after {time.monotonic() - started:.0f} s")
    if child.returncode != 0:
        raise SystemExit(f"bench.{name} failed (exit {child.returncode}); nothing summarised")
    summary: dict[str, Any] = json.loads(stdout)
    return summary


def _save(out: Path, run: dict[str, Any], results: dict[str, list[dict[str, Any]]]) -> None:
    """``benchmarks.json``: the run (command, machine, minutes) and every benchmark's summary."""
    doc = {"run": run, "benchmarks": results}
    (out / "benchmarks.json").write_text(json.dumps(doc, indent=2) + "\n")


def _render_sections(results: dict[str, list[dict[str, Any]]], doc: Path) -> None:
    """Every benchmark's own section again, from its saved summary."""
    from bench import backfill, freshness, ingest, reads, rebuild, steady

    for summary in results.get("ingest", []):
        workload = summary["args"].get("workload", "zipf")
        write_section(ingest.section_of(workload), ingest.markdown(summary), doc)
    for summary in results.get("freshness", []):
        write_section(freshness.section_of(summary["args"]), freshness.markdown(summary), doc)
    for summary in results.get("reads", []):
        write_section(reads.SECTION, reads.markdown(summary), doc)
    for summary in results.get("rebuild", []):
        write_section(rebuild.SECTION, rebuild.markdown(summary), doc)
    for summary in results.get("backfill", []):
        write_section(backfill.SECTION, backfill.markdown(summary), doc)
    for summary in results.get("steady", []):
        write_section(summary["section"], steady.markdown(summary), doc)


def _summarise(
    results: dict[str, list[dict[str, Any]]], run: dict[str, Any], out: Path, doc: Path
) -> None:
    """The chart and the ``bench.summary`` section, from one run's summaries."""
    chart = out / "benchmarks.png"
    draw(results, chart)
    body = headline_markdown(results, run["command"], run["machine"], run["minutes"], chart.name)
    write_section("bench.summary", body, doc)
    log(f"chart {chart}; summary in {doc}")


def main(argv: list[str] | None = None) -> int:
    """Run everything; the summary path on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes; a smoke test")
    parser.add_argument(
        "--out", type=Path, help="where the chart and JSON go (default docs/, or a temp dir)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(FULL),
        help="run only these benchmarks (the summary leaves the rest out)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="run nothing: rewrite every section, the headline table and the chart "
        "from a saved benchmarks.json (after a change to how they are drawn)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    plan = QUICK if args.quick else FULL
    published = bench_doc(base_settings())
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench-")) if args.quick else published.parent)
    out.mkdir(parents=True, exist_ok=True)
    doc = published
    if args.quick:
        # A smoke run renders every section too, into a scratch copy of the doc.
        doc = out / "BENCHMARKS.md"
        if published.exists():
            shutil.copy(published, doc)
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        _render_sections(saved["benchmarks"], doc)
        _summarise(saved["benchmarks"], saved["run"], out, doc)
        print(out)
        return 0
    info = machine()
    results: dict[str, list[dict[str, Any]]] = {}
    run = {
        "command": ".venv/bin/python -m bench"
        + (" --quick" if args.quick else "")
        + (" --only " + " ".join(args.only) if args.only else ""),
        "machine": machine_line(info),
        "minutes": 0.0,
    }
    started = time.monotonic()
    for name, runs in plan.items():
        if args.only and name not in args.only:
            continue
        results[name] = [_run(name, run_args, doc) for run_args in runs]
        run["minutes"] = round((time.monotonic() - started) / 60, 1)
        # Saved as each benchmark ends: a later failure keeps what was measured.
        _save(out, run, results)
    _summarise(results, run, out, doc)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
