"""The headline table of one ``python -m bench`` run, from the benchmarks' JSON.

Pure: summaries in, Markdown out (unit-tested with made-up summaries). Every
ratio compares two figures of the same run; a part whose benchmark did not run
(or did not report a figure) is left out rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.formatting import fmt_ratio, processes, writes_name

Results = Mapping[str, Sequence[Mapping[str, Any]]]


def _ratio(a: float | None, b: float | None) -> str:
    """``a / b`` formatted, or a dash when either is missing."""
    return "-" if a is None or not b else fmt_ratio(a / b)


def _eps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} events/s"


def ingest_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Events/s of every contender, against the reference updater."""
    ref = summary["reference"]["eps"]
    redis_ceiling = summary.get("redis_ceiling", {}).get("eps")
    one = summary["jobs"]["1"]["steady_eps"]
    two = summary["jobs"]["2"]["steady_eps"]
    ceiling = summary["ceiling"]["eps"]
    return [
        ["ingest", "reference updater (1 MULTI/EXEC of 3 ZADD per event)", _eps(ref), "1.00x"],
        [
            "ingest",
            "Redis ceiling (every update, pipelined multi-element ZADD)",
            _eps(redis_ceiling),
            _ratio(redis_ceiling, ref),
        ],
        [
            "ingest",
            "the job, 1 process (steady)",
            _eps(one),
            f"{_ratio(one, ref)}; {_ratio(one, redis_ceiling)} the Redis ceiling",
        ],
        [
            "ingest",
            "the job, 2 processes (steady)",
            _eps(two),
            f"{_ratio(two, ref)}; {_ratio(two, one)} 1 process",
        ],
        [
            "ingest",
            "decode + verify only, 1 thread (no Redis)",
            _eps(ceiling),
            f"{_ratio(ceiling, ref)}; the job's 1 process is {_ratio(one, ceiling)} of it",
        ],
    ]


def workload_rows(summaries: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Each workload shape's job throughput and CPU per event, worst and best named.

    Throughput depends on the stream's shape (new players, spread of event
    times) far more than on its size, so the best shape alone would flatter.
    """
    shapes = [
        (s["args"].get("workload", "zipf"), s["jobs"]["1"], s["jobs"]["2"], s.get("redis_floor"))
        for s in summaries
        if s.get("jobs")
    ]
    if len(shapes) < 2:
        return []
    by_two = sorted(shapes, key=lambda item: item[2]["steady_eps"] or 0)
    worst, best = by_two[0][0], by_two[-1][0]
    rows = []
    for name, one, two, floor in shapes:
        tag = " (worst)" if name == worst else " (best)" if name == best else ""
        cpu = [_cpu(run) for run in two.get("runs", [])]
        rows.append(
            [
                "ingest",
                f"workload `{name}`{tag}: the job, 1 / 2 processes (steady)",
                f"{_eps(one['steady_eps'])} / {_eps(two['steady_eps'])}",
                "job CPU per event, 2 processes: "
                + (", ".join(cpu) if cpu and all(c != "-" for c in cpu) else "-")
                + _redis_vs_floor(two.get("runs", []), floor),
            ]
        )
    return rows


def _redis_vs_floor(runs: Sequence[Mapping[str, Any]], floor: Mapping[str, Any] | None) -> str:
    """Redis' time per event of the 2-process runs beside the shape's floor (``bench.ingest``)."""
    spent = [run.get("redis_main_us_per_event") for run in runs]
    if floor is None or not spent or any(value is None for value in spent):
        return ""
    least = floor["redis_main_us_per_event"]
    shown = ", ".join(f"{value:.1f}" for value in spent)
    return f"; Redis {shown} us per event, its floor {least:.1f} us"


def _cpu(run: Mapping[str, Any]) -> str:
    """Whole-run CPU per event (start-up included), and steady state's when measured."""
    value = run.get("job_cpu_us_per_event")
    if value is None:
        return "-"
    steady = run.get("job_steady_cpu_us_per_event")
    return f"{value:.1f} us" + ("" if steady is None else f" ({steady:.1f} us steady)")


def freshness_rows(summaries: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Latency at a steady rate, and a spike's peak lag and drain time."""
    rows = []
    for summary in summaries:
        args, r = summary["args"], summary["result"]
        lat = r["latency_ms"]
        procs = f", {args['processes']} processes" if args.get("processes", 1) > 1 else ""
        spike = r.get("spike")
        if not spike:
            rows.append(
                [
                    "freshness",
                    f"produce → visible at {args['rate']:,.0f}/s{procs}",
                    f"p50 {lat['p50']} ms, p99 {lat['p99']} ms",
                    "kept up" if r["kept_up"] else "fell behind",
                ]
            )
            continue
        phases = r["latency_ms_by_phase"]
        drained = spike["drain_s_after_spike"]
        drain = f"drained {drained} s after the spike" if drained is not None else "not drained"
        rows.append(
            [
                "freshness",
                f"{args['rate']:,.0f}/s with a {args['spike_factor']:g}x spike "
                f"({spike['spike_rate']:,.0f}/s for {args['spike_seconds']:g} s){procs}",
                f"p99 {phases['before']['p99']} ms before, {phases['spike']['p99']} ms in the "
                f"spike, {phases['after']['p99']} ms after",
                f"peak lag {spike['peak_lag_s_of_input']} s of input; {drain}",
            ]
        )
    return rows


def reads_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Redis against PostgreSQL at the largest size measured."""
    sizes = summary.get("sizes") or []
    if not sizes:
        return []
    largest = max(sizes, key=lambda s: s["players"])
    rows = []
    for op, redis in largest["redis"].items():
        pg = (largest.get("postgres") or {}).get(op)
        if pg is None:
            continue
        rows.append(
            [
                "reads",
                f"{op} at {largest['players']:,} players (p50 / p99 ms)",
                f"Redis {redis['p50']:.2f} / {redis['p99']:.2f}; "
                f"PostgreSQL {pg['p50']:.2f} / {pg['p99']:.2f}",
                f"PostgreSQL p50 = {_ratio(pg['p50'], redis['p50'])} Redis",
            ]
        )
    return rows


def memory_rows(
    rebuild: Mapping[str, Any] | None, reads: Mapping[str, Any] | None
) -> list[list[str]]:
    """Bytes per player: Redis boards and dedupe ids, PostgreSQL, the job."""
    rows = []
    if rebuild:
        largest = max(rebuild["sizes"], key=lambda s: s["players"])
        mem = largest["memory"]
        rows.append(
            [
                "memory",
                f"Redis per player per board at {largest['players']:,} players",
                f"{mem['per_player_per_board']} B",
                f"+ {mem['per_player']['dedupe (meta:seen)']} B of dedupe ids per event "
                "(expire with the horizon)",
            ]
        )
        for step in rebuild.get("scaling", []):
            rows.append(
                [
                    "memory",
                    f"the job's peak RSS growth, {step['from']:,} → {step['to']:,} players, "
                    f"{processes(step['processes'])}",
                    f"{step['rss_growth_bytes_per_player']} B per added player",
                    "bounded cache",
                ]
            )
    if reads:
        sizes = reads.get("sizes") or []
        if sizes:
            largest = max(sizes, key=lambda s: s["players"])
            redis_b = largest.get("redis_bytes_per_player")
            pg_b = largest.get("postgres_bytes_per_player")
            if redis_b and pg_b:
                rows.append(
                    [
                        "memory",
                        f"one board at {largest['players']:,} players: Redis vs PostgreSQL "
                        "(table + indexes)",
                        f"{redis_b:.0f} B vs {pg_b:.0f} B per player",
                        f"PostgreSQL = {_ratio(pg_b, redis_b)} Redis",
                    ]
                )
    return rows


def rebuild_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Rebuild times and how they scale."""
    rows = []
    for size in summary["sizes"]:
        for run in size["runs"]:
            rows.append(
                [
                    "rebuild",
                    f"{'`lb rebuild`' if run.get('mode') == 'replay' else '`lb rebuild --offline`'}"
                    f" of {size['players']:,} players, "
                    f"{processes(run['processes'])}",
                    f"{run['seconds']} s",
                    f"{run['players_per_s']:,} players/s",
                ]
            )
    for step in summary.get("scaling", []):
        rows.append(
            [
                "rebuild",
                f"scaling {step['from']:,} → {step['to']:,}, {processes(step['processes'])}",
                f"{step['players_ratio']:g}x the players",
                f"{fmt_ratio(step['time_ratio'])} the time",
            ]
        )
    return rows


def steady_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """The game at size: each full-speed run's rate and read tails against the job stopped."""
    players = summary["params"]["players"]
    idle = summary.get("idle") or {}
    rows = []
    for run in summary["runs"]:
        if run["rate"] != "max":
            continue
        setting = writes_name(run)
        tails = []
        for call in ("top-10", "rank", "around"):
            loaded, stopped = run["reads"][call].get("p99"), idle.get(call, {}).get("p99")
            if loaded is None or stopped is None:
                continue
            tails.append(f"{call} {loaded:.1f} ({stopped:.1f})")
        rows.append(
            [
                "steady",
                f"{players:,} players loaded, the job at full speed ({setting}): "
                "read p99 ms while it writes (job stopped)",
                "; ".join(tails) or "-",
                f"{_eps(run.get('counted_per_s'))}; Redis "
                f"{run.get('redis_us_per_record', '-')} us per record",
            ]
        )
    return rows


def headline_markdown(
    results: Results, command: str, machine: str, minutes: float, chart: str
) -> str:
    """The ``bench.summary`` section."""
    rows: list[list[str]] = []
    if results.get("ingest"):
        rows += ingest_rows(results["ingest"][0])
        rows += workload_rows(results["ingest"])
    if results.get("freshness"):
        rows += freshness_rows(results["freshness"])
    reads = results["reads"][0] if results.get("reads") else None
    rebuild = results["rebuild"][0] if results.get("rebuild") else None
    if reads:
        rows += reads_rows(reads)
    rows += memory_rows(rebuild, reads)
    if rebuild:
        rows += rebuild_rows(rebuild)
    for summary in results.get("steady", []):
        rows += steady_rows(summary)
    lines = [
        "| part | measurement | figure | ratio / note |",
        "| --- | --- | --- | --- |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    table = "\n".join(lines)
    return f"""## Headline figures (one run of every benchmark)

Command: `{command}` ({minutes:.0f} min). Machine: {machine}

{table}

![ingest, reads, spike and rebuild]({chart})

Each figure comes from the sections below, all written by the same run; the raw
summaries are in `benchmarks.json` next to this file.
"""
