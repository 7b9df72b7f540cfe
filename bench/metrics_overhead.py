"""What the job's metrics cost on ingest: the same records, metrics off and on, same run.

One topic is filled once (``lb produce``: signed events, 1% duplicates); then
``lb run --until-end --no-recovery`` replays it into a fresh namespace with
``LB_METRICS_PORT=off`` (every hook returns at its first line) and with
metrics on (``LB_METRICS_PORT=0``: hooks, stage timers, the HTTP server, a
scrape-time collector), alternating which goes first each round so drift on
a shared machine falls on both sides. Throughput is measured like
``bench/ingest.py``: records counted in ``meta:stats`` (polled every 10 ms)
between the first counted record and the last, so start-up is left out. During
the "on" runs the job's ``/metrics`` is scraped once a second, as Prometheus
would, so the scrape's cost is included. Each run is verified (every record
counted exactly once) before it is used.

    .venv/bin/python -m bench.metrics_overhead                 # 300,000 records x 3 rounds
    .venv/bin/python -m bench.metrics_overhead --records 100000 --rounds 2 --no-doc
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common import (
    ROOT,
    Job,
    Scratch,
    base_settings,
    counted,
    job_env,
    log,
    machine,
    machine_line,
    publish,
    run_id,
    table,
)
from lb.progress_bar import Bar
from telemetry import scrape, server

SECTION = "metrics-overhead"
POLL_S = 0.01


def _fill(scratch: Scratch, topic: str, records: int, partitions: int) -> None:
    env = job_env(scratch.settings, topic, f"{topic}.dlq", "unused", scratch.state_dir)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lb.cli",
            "produce",
            "--count",
            str(records),
            "--players",
            "100000",
            "--partitions",
            str(partitions),
            "--dup-ratio",
            "0.01",
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"lb produce failed: {done.stderr[-2000:]}")


def _one_run(
    scratch: Scratch,
    topic: str,
    records: int,
    mode: str,
    index: int,
    processes: int,
    scrape_every_s: float = 1.0,
) -> dict[str, Any]:
    """One replay of the topic; throughput between the first and the last counted record."""
    namespace = scratch.namespace(f"bmo{scratch.prefix[-6:]}{mode}{index}")
    state = scratch.state_dir / f"{mode}-{index}"
    env = job_env(scratch.settings, topic, f"{topic}.dlq", namespace, state)
    env.update(LB_METRICS_PORT="off" if mode == "off" else "0", LB_PROGRESS_S="0")
    job = Job(
        ["--until-end", "--no-recovery", "--processes", str(processes)],
        env,
        scratch.state_dir / f"{mode}-{index}.log",
    )
    scratch.jobs.append(job)
    first: float | None = None
    last_scrape = 0.0
    scrapes = 0
    while True:
        now = time.monotonic()
        got, _ = counted(scratch.redis, namespace)
        if got and first is None:
            first = now
        if got >= records:
            break
        if job.poll() is not None:
            raise SystemExit(f"the {mode} run ended early:\n{job.tail()}")
        if mode == "on" and scrape_every_s and now - last_scrape >= scrape_every_s:
            last_scrape = now
            for entry in server.registered(state, "job"):
                scrapes += scrape.samples(entry["address"]) is not None
        time.sleep(POLL_S)
    done = time.monotonic()
    code = job.wait(120)
    got, stats = counted(scratch.redis, namespace)
    verified = code == 0 and got == records
    scratch.drop_namespace(namespace)
    assert first is not None
    seconds = max(done - first, 1e-6)
    return {
        "mode": mode,
        "round": index,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "wall_s": round(done - job.started, 2),
        "scrapes": scrapes,
        "stats": stats,
        "verified": verified,
    }


def hook_cost_us(batch_records: int = 500, batches: int = 2000) -> dict[str, float]:
    """CPU per batch of what metrics add on the hot path, measured in this process.

    A noise-free complement to the end-to-end runs (which share 2 cores with
    whatever else runs): the per-batch hooks (outcomes by game, freshness
    buckets, the partition's last record, the stage timers) timed on batches
    shaped like the job's, with metrics on, in microseconds per batch and per record.
    """
    from types import SimpleNamespace

    from telemetry import hooks

    if not hooks.enabled():
        hooks.enable(None, ready_retry_s=30, stall_s=120)
    now_ms = time.time_ns() // 1_000_000
    accepted = tuple(
        SimpleNamespace(offset=i, record_ts_ms=now_ms - (i % 900)) for i in range(batch_records)
    )
    batch = SimpleNamespace(topic="t", partition=0, accepted=accepted, dead=(), records=accepted)
    plan = SimpleNamespace(
        groups=[
            SimpleNamespace(
                keys=SimpleNamespace(tag="g1"),
                stats={"applied": batch_records // 2, "noop": batch_records // 2, "duplicate": 0},
            )
        ]
    )
    step = hooks.timed("validate", lambda b: b)
    started = time.perf_counter()
    for _ in range(batches):
        step(batch)
        hooks.batch_applied(batch, plan)
    per_batch = (time.perf_counter() - started) / batches * 1e6
    return {
        "batch_records": batch_records,
        "us_per_batch": round(per_batch, 1),
        "us_per_record": round(per_batch / batch_records, 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Fill a topic, replay it with metrics off and on, report the difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--scrape-every", type=float, default=1.0, help="seconds between scrapes when on (0: none)"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    settings = base_settings()
    with Scratch(settings, f"bench-mo-{run_id()}") as scratch:
        topic = scratch.topic(f"bench-mo-{run_id()}", args.partitions)
        scratch.own_topic(f"{topic}.dlq")
        log(f"producing {args.records:,} records into {topic}")
        _fill(scratch, topic, args.records, args.partitions)
        runs = []
        bar = Bar("metrics overhead", args.rounds * 2, unit="runs")
        for index in range(args.rounds):
            order = ("off", "on") if index % 2 == 0 else ("on", "off")
            for mode in order:
                run = _one_run(
                    scratch, topic, args.records, mode, index, args.processes, args.scrape_every
                )
                log(f"round {index} metrics {mode}: {run['records_per_s']:,} records/s")
                runs.append(run)
                bar.advance_to(len(runs), f"last: {mode} {run['records_per_s']:,}/s")
        bar.close()
    off = [r["records_per_s"] for r in runs if r["mode"] == "off"]
    on = [r["records_per_s"] for r in runs if r["mode"] == "on"]
    summary: dict[str, Any] = {
        "records": args.records,
        "rounds": args.rounds,
        "partitions": args.partitions,
        "processes": args.processes,
        "median_off": statistics.median(off),
        "median_on": statistics.median(on),
        "overhead_pct": round(100 * (1 - statistics.median(on) / statistics.median(off)), 1),
        # Each round's on/off pair ran back to back: their ratio cancels slow drift.
        "paired_overhead_pct": round(
            100
            * (
                1
                - statistics.median(
                    _rate(runs, "on", i) / _rate(runs, "off", i) for i in range(args.rounds)
                )
            ),
            1,
        ),
        "hook_cost": hook_cost_us(),
        "runs": runs,
        "machine": machine(),
    }
    command = "python -m bench.metrics_overhead " + " ".join(argv or sys.argv[1:])
    summary["command"] = command.strip()
    return publish(
        SECTION,
        summary,
        _markdown,
        verified=all(r["verified"] for r in runs),
        write_doc=not args.no_doc,
    )


def _markdown(summary: dict[str, Any]) -> str:
    rows = [
        (
            str(r["round"]),
            r["mode"],
            f"{r['records_per_s']:,}",
            f"{r['seconds']:.2f}",
            str(r["scrapes"]) if r["mode"] == "on" else "-",
        )
        for r in summary["runs"]
    ]
    return "\n".join(
        [
            f"`{summary['command']}`: {summary['records']:,} records (1% duplicates, "
            f"{summary['partitions']} partitions, {summary['processes']} process), replayed "
            f"{summary['rounds']} times with metrics off and on, alternating.",
            "",
            table(("round", "metrics", "records/s", "seconds", "scrapes"), rows),
            "",
            f"Median: **{summary['median_off']:,.0f}/s off, {summary['median_on']:,.0f}/s on: "
            f"{summary['overhead_pct']:+.1f}% overhead**; median of the rounds' on/off "
            f"ratios: **{summary['paired_overhead_pct']:+.1f}%** (negative: on was faster, "
            "i.e. the difference is within the run-to-run noise of this shared machine).",
            "",
            f"In-process cost of the per-batch hooks (outcomes by game, freshness buckets, "
            f"last record, stage timers) on {summary['hook_cost']['batch_records']}-record "
            f"batches: **{summary['hook_cost']['us_per_batch']} µs per batch, "
            f"{summary['hook_cost']['us_per_record']} µs per record**; at the median 'off' "
            f"rate that is {_share(summary):.1f}% of one core.",
            "",
            machine_line(summary["machine"]),
        ]
    )


def _rate(runs: list[dict[str, Any]], mode: str, index: int) -> float:
    return float(
        next(r["records_per_s"] for r in runs if r["mode"] == mode and r["round"] == index)
    )


def _share(summary: dict[str, Any]) -> float:
    """The hooks' CPU share of one core at the measured 'off' rate."""
    return float(summary["hook_cost"]["us_per_record"]) * float(summary["median_off"]) / 1e4


if __name__ == "__main__":
    sys.exit(main())
