"""Rebuild time and memory per player at 1M and 10M players.

Usage (from the repository root)::

    .venv/bin/python -m bench.rebuild [--players 1000000 10000000] [--processes 1 2]

For each player count N:

1. Produces N signed records into a fresh 8-partition topic, one per player
   (``p00000000`` ...; game ``g1`` with the built-in all-time, weekly and daily
   boards; log-normal scores; event times spread over the hour before the
   start), so every board ends with N members.
2. For each ``--modes`` and ``--processes`` count, runs ``python -m lb.cli rebuild``
   into a fresh namespace and times it from process start to exit: ``offline`` is
   ``lb rebuild --offline`` (Bytewax processes replay from the earliest offsets into
   a staging namespace, then the atomic swap), ``replay`` the default ``lb rebuild``
   (replay processes without Bytewax, then the cut-over that a live job would
   follow; none runs here). The job's resident memory (all its processes) is
   sampled every 0.2 s; the peak is reported, and Redis' CPU during the run: its
   main thread's and the time it spent in each command (``INFO commandstats``
   deltas; commands called from Lua are counted under their own names), the
   figure to hold against ``bench.redis_floor``.
3. After the first rebuild of N, measures Redis: ``MEMORY USAGE`` (exact,
   ``SAMPLES 0``) of every board, of the dedupe sets (``meta:seen:*``) and of the
   other metadata, and the growth of ``used_memory``, each divided by N.

Checks before it publishes: the counters equal N applied records and every
board has exactly N members. Results replace the ``bench.rebuild`` section of
``docs/BENCHMARKS.md``. The job's memory per player is the peak RSS growth from
N to the next larger N divided by the added players (the planner's cache is
bounded by ``LB_CACHE_PLAYERS``). Progress on stderr, JSON on
stdout. Everything it creates is deleted afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from adapters.redis import RedisClient
from bench.common import (
    GAME,
    Job,
    Scratch,
    base_settings,
    counted,
    job_env,
    log,
    machine,
    machine_line,
    publish,
    redis_spent,
    redis_time,
    run_id,
    session_rss_bytes,
    table,
)
from bench.formatting import fmt_int, fmt_ratio, processes
from config.settings import Settings
from domain.keys import is_board_suffix
from domain.signing import parse_keyring, signed_event
from lb.commands.rebuild import staging_namespace
from producer.score_producer import ScoreProducer
from schemas.codec import ScoreEventCodec

PARTITIONS = 8
SECTION = "bench.rebuild"
SAMPLE_S = 0.2
SPREAD_MS = 3_600_000


def player_scores(players: int, seed: int, start_ms: int) -> Iterator[tuple[int, int]]:
    """Each player's (score, event time) of the input, in log order.

    Log-normal scores (many ties) and times spread evenly over ``SPREAD_MS``
    from ``start_ms``; ``bench.redis_floor --scores rebuild`` inserts the same.
    """
    rng = random.Random(seed)
    for i in range(players):
        yield min(9_999_999, int(rng.lognormvariate(7.0, 1.5))), start_ms + i * SPREAD_MS // players


def _produce(settings: Settings, topic: str, players: int, seed: int) -> dict[str, Any]:
    """One record per player, event times spread over the last hour."""
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = keyring.key_ids[0]
    encode = ScoreEventCodec.from_registry().encode
    start_ms = int(datetime.now(UTC).timestamp() * 1000) - SPREAD_MS
    started = time.monotonic()
    step = max(1, players // 10)
    with ScoreProducer(settings.kafka_bootstrap, topic, settings.kafka_extra) as producer:
        for i, (score, ts_ms) in enumerate(player_scores(players, seed, start_ms)):
            player = f"p{i:08d}"
            event = signed_event(
                keyring,
                key_id,
                event_id=f"{topic}-{i}",
                game_id=GAME,
                player_id=player,
                score=score,
                ts_ms=ts_ms,
            )
            producer.produce_record(player.encode(), encode(event), ts_ms)
            if (i + 1) % step == 0:
                log(f"produced {i + 1:,} ({(i + 1) / (time.monotonic() - started):,.0f}/s)")
        producer.flush(300.0)
        delivered, failed = producer.delivered, producer.failed
    if delivered != players or failed:
        raise SystemExit(f"producing failed: {delivered} delivered, {failed} failed")
    seconds = time.monotonic() - started
    return {"seconds": round(seconds, 2), "rate": round(players / seconds)}


def _rebuild(
    scratch: Scratch,
    settings: Settings,
    topic: str,
    players: int,
    processes: int,
    label: str,
    mode: str = "offline",
) -> dict[str, Any]:
    namespace = scratch.namespace(f"{scratch.prefix}-{label}")
    scratch.namespace(staging_namespace(namespace))
    flags = (["--offline"] if mode == "offline" else []) + (
        [] if processes <= 1 else ["--processes", str(processes)]
    )
    env = job_env(settings, topic, f"{topic}.dlq", namespace, scratch.state_dir / label)
    if mode == "replay-redis":  # every round through the group writes (no fold in memory)
        env["LB_REPLAY_MEMORY_MEMBERS"] = "0"
    job = Job(flags, env, scratch.state_dir / f"{label}.log", command="rebuild")
    scratch.jobs.append(job)
    log(f"{label}: `{job.command}` into {namespace}")
    redis_before = redis_time(scratch.redis)
    peak = 0
    while job.poll() is None:
        peak = max(peak, session_rss_bytes(job.proc.pid))
        time.sleep(SAMPLE_S)
    seconds = time.monotonic() - job.started
    code = job.wait()
    spent = redis_spent(redis_before, redis_time(scratch.redis))
    if code != 0:
        raise SystemExit(f"{label}: lb rebuild exited {code}:\n{job.tail()}")
    total, stats = counted(scratch.redis, namespace)
    boards = _boards(scratch.redis, namespace)
    verified = (
        stats.get("applied", 0) == players
        and total == players
        and len(boards) >= 3
        and all(size == players for size in _board_sizes(scratch.redis, boards, players))
    )
    log(
        f"{label}: {seconds:.1f} s ({players / seconds:,.0f} players/s), peak RSS "
        f"{peak / 2**20:,.0f} MiB, Redis {spent}, verified={verified}"
    )
    return {
        "label": label,
        "namespace": namespace,
        "mode": mode,
        "processes": processes,
        "redis": spent,
        "seconds": round(seconds, 2),
        "players_per_s": round(players / seconds),
        "peak_rss_bytes": peak,
        "stats": stats,
        "boards": len(boards),
        "verified": verified,
    }


def _boards(client: RedisClient, namespace: str) -> list[str]:
    prefix = f"{namespace}:{{{GAME}}}:"
    keys = [k.decode() for k in client.scan_iter(match=f"{prefix}*", count=1000)]
    # Boards only: not the metadata, nor the change stream the live flow writes.
    return sorted(k for k in keys if is_board_suffix(k[len(prefix) :]))


def _board_sizes(client: RedisClient, boards: list[str], players: int) -> list[int]:
    """Members per window kind (all-time, weekly, daily).

    Summed per kind: if the hour of event times crossed midnight, two daily
    boards share the players.
    """
    sizes: dict[str, int] = {}
    for key in boards:
        kind = key.split(":")[2]  # <ns>:{g1}:<kind>[:<period>]
        sizes[kind] = sizes.get(kind, 0) + int(client.zcard(key))
    return list(sizes.values())


def _memory(client: RedisClient, namespace: str, players: int, used_before: int) -> dict[str, Any]:
    """Exact bytes of each kind of key, per player."""
    prefix = f"{namespace}:{{{GAME}}}:"
    by_kind: dict[str, int] = {"boards": 0, "dedupe (meta:seen)": 0, "other metadata": 0}
    boards = 0
    for raw in client.scan_iter(match=f"{prefix}*", count=1000):
        key = raw.decode()
        size = int(client.memory_usage(key, samples=0) or 0)
        rest = key[len(prefix) :]
        if rest.startswith("meta:seen:"):
            by_kind["dedupe (meta:seen)"] += size
        elif is_board_suffix(rest):
            by_kind["boards"] += size
            boards += 1
        else:  # meta:* and the change stream
            by_kind["other metadata"] += size
    used = int(client.info("memory")["used_memory"]) - used_before
    return {
        "bytes": by_kind,
        "board_keys": boards,
        "per_player_per_board": round(by_kind["boards"] / players / 3, 1),
        "per_player": {k: round(v / players, 1) for k, v in by_kind.items()},
        "used_memory_growth_per_player": round(used / players, 1),
    }


_MODE_TEXT = {
    "offline": "`lb rebuild --offline`",
    "replay": "`lb rebuild`",
    "replay-redis": "`lb rebuild`, `LB_REPLAY_MEMORY_MEMBERS=0`",
}
_RUN_HEADER = (
    "players",
    "command",
    "processes",
    "seconds",
    "players/s",
    "job peak RSS MiB",
    "Redis CPU s",
    "Redis s by command",
    "counters and boards",
)


def markdown(summary: dict[str, Any]) -> str:
    """The benchmark's section of docs/BENCHMARKS.md, from its JSON summary."""
    rows = []
    mem_rows = []
    for size in summary["sizes"]:
        n = size["players"]
        for run in size["runs"]:
            redis = run.get("redis", {})
            commands = ", ".join(f"{k} {v:g}" for k, v in redis.get("commands_s", {}).items())
            rows.append(
                [
                    fmt_int(n),
                    _MODE_TEXT[run.get("mode", "offline")],
                    str(run["processes"]),
                    f"{run['seconds']}",
                    fmt_int(run["players_per_s"]),
                    f"{run['peak_rss_bytes'] / 2**20:,.0f}",
                    f"{redis.get('main_thread_s', '-')}",
                    commands or "-",
                    "ok" if run["verified"] else "**MISMATCH**",
                ]
            )
        mem = size["memory"]
        per = mem["per_player"]
        mem_rows.append(
            [
                fmt_int(n),
                f"{mem['per_player_per_board']}",
                f"{per['boards']}",
                f"{per['dedupe (meta:seen)']}",
                f"{per['other metadata']}",
                f"{mem['used_memory_growth_per_player']}",
            ]
        )
    cache = summary.get("cache_players", 2_000_000)
    mem_table = table(
        [
            "players",
            "per player per board",
            "boards (3)",
            "dedupe ids",
            "other metadata",
            "used_memory growth",
        ],
        mem_rows,
    )
    scaling = summary["scaling"]
    scale_lines = "\n".join(
        f"* {fmt_int(s['from'])} → {fmt_int(s['to'])} players, {processes(s['processes'])}: "
        f"{fmt_ratio(s['players_ratio'])} the players took {fmt_ratio(s['time_ratio'])} the time; "
        f"the job's peak memory grew {s['rss_growth_bytes_per_player']} bytes per added player."
        for s in scaling
    )
    procs = "\n".join(
        f"* {fmt_int(int(n))} players: 2 processes rebuilt {fmt_ratio(r)} as fast as 1."
        for n, r in summary["process_ratio"].items()
    )
    return f"""## Rebuild from Kafka and memory per player (`bench/rebuild.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

Input: one signed record per player (game `g1`: all-time, weekly and daily boards, so
3 board entries per player), {PARTITIONS} partitions. `lb rebuild --offline` (Bytewax
processes) or `lb rebuild` (replay processes without Bytewax, then the cut-over; no
live job runs here, `bench.backfill` times it beside one) replays the topic from the
earliest offsets into a staging namespace and swaps it in; time is process start to
exit (start-up, replay, swap). Peak RSS sums every process of the job. Redis CPU:
its main thread's seconds during the run, and the seconds it spent in the commands
that took most (`INFO commandstats`; commands run by the job's Lua script are counted
under their own names, inside `evalsha`'s total).

{table(_RUN_HEADER, rows)}

{scale_lines}
{procs}

Redis memory after the rebuild (`MEMORY USAGE key SAMPLES 0`, exact), bytes per player:

{mem_table}

The dedupe sets hold each event id for the dedupe horizon's buckets (they expire);
the boards are what stays. `lb rebuild`'s replay processes fold their partitions in
memory and load them once (jobs/replay_memory.py), so their memory grows with the
board members they hold, up to `LB_REPLAY_MEMORY_MEMBERS` per process (then they load
and write through Redis); with `LB_REPLAY_MEMORY_MEMBERS=0` it does not grow beyond the
planner's bounded cache (`LB_CACHE_PLAYERS` = {cache:,} players per worker, held in up
to two generations).
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.rebuild", description=__doc__)
    parser.add_argument("--players", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=sorted(_MODE_TEXT),
        default=["offline"],
        help="offline: lb rebuild --offline (Bytewax); replay: lb rebuild (folds in memory); "
        "replay-redis: lb rebuild with every round through Redis (default offline)",
    )
    parser.add_argument("--seed", type=int, default=20260504)
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)

    settings = base_settings()
    info = machine()
    prefix = f"bench-rebuild-{run_id()}"
    sizes: list[dict[str, Any]] = []
    with Scratch(settings, prefix) as scratch:
        for players in sorted(args.players):
            topic = scratch.topic(f"{prefix}-{players}", PARTITIONS)
            scratch.own_topic(f"{topic}.dlq")
            log(f"producing {players:,} players into {topic}")
            produced = _produce(settings, topic, players, args.seed)
            runs = []
            memory: dict[str, Any] = {}
            combos = [(m, p) for m in args.modes for p in args.processes]
            for index, (mode, processes) in enumerate(combos):
                used_before = int(scratch.redis.info("memory")["used_memory"])
                label = f"n{players}-{mode}-p{processes}"
                run = _rebuild(scratch, settings, topic, players, processes, label, mode)
                if index == 0:
                    memory = _memory(scratch.redis, run["namespace"], players, used_before)
                    log(f"memory per player: {memory['per_player']}")
                scratch.drop_namespace(run["namespace"])
                runs.append(run)
            sizes.append({"players": players, "produced": produced, "runs": runs, "memory": memory})
            scratch.drop_topics([topic])

    first_mode = args.modes[0]

    def run_of(size: dict[str, Any], processes: int) -> dict[str, Any] | None:
        return next(
            (
                r
                for r in size["runs"]
                if r["processes"] == processes and r.get("mode", "offline") == first_mode
            ),
            None,
        )

    scaling = []
    for small, big in itertools.pairwise(sizes):
        for processes in args.processes:
            a, b = run_of(small, processes), run_of(big, processes)
            if a is None or b is None:
                continue
            added = big["players"] - small["players"]
            scaling.append(
                {
                    "from": small["players"],
                    "to": big["players"],
                    "processes": processes,
                    "players_ratio": round(big["players"] / small["players"], 3),
                    "time_ratio": round(b["seconds"] / a["seconds"], 3),
                    "rss_growth_bytes_per_player": round(
                        (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / added, 1
                    ),
                }
            )
    process_ratio = {}
    for size in sizes:
        one, two = run_of(size, 1), run_of(size, 2)
        if one and two:
            process_ratio[str(size["players"])] = round(one["seconds"] / two["seconds"], 3)
    summary: dict[str, Any] = {
        "benchmark": "rebuild",
        "command": (
            ".venv/bin/python -m bench.rebuild "
            + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "machine": info,
        "args": vars(args),
        "sizes": sizes,
        "scaling": scaling,
        "process_ratio": process_ratio,
        "cache_players": settings.cache_players,
    }
    verified = all(run["verified"] for size in sizes for run in size["runs"])
    return publish(SECTION, summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
