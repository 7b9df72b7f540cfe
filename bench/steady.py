"""Reads while the job writes: a game already at size, the job at full speed, a reader beside it.

Usage (from the repository root, services up with ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.steady                          # 1M players, bounds 0 4000 1000 250
    .venv/bin/python -m bench.steady --players 10000000 --bounds 0 1000
    .venv/bin/python -m bench.steady --players 200000 --events 100000 --no-doc   # a quick look

Game backends read Redis directly, and Redis serves one command at a time: a
reader waits behind whatever the job's write is doing. This measures that wait
on a board the size of the seeds' game rather than on the empty boards the
ingest benchmarks start from:

1. Per run, a fresh namespace is loaded directly (``ZADD``, 20,000 members per
   command, not through the job): ``--players`` N on the all-time board, N x 0.3
   on this week's, N x 0.1 on today's (the lowest player numbers, the ones the
   stream's Zipf draws most), log-normal scores, times within today.
2. One topic of ``--events`` signed records (produced once, before any clock
   starts): 80% from those N players (Zipf s=1.1 over them), 20% from players
   never seen before, live record times.
3. For each ``--bounds`` value B: ``lb run --processes 2 --until-end`` with
   ``LB_WRITE_MAX_UPDATES=B`` applies the whole topic to its own loaded
   namespace while a separate process reads the all-time board at
   ``--read-rate`` calls/s on its own connection, round-robin top-10, rank and
   around (k=5) of random loaded players, through :mod:`readers`. Redis' slow
   log (threshold 1 ms, restored after) gives the longest calls, and
   ``INFO commandstats`` the group writes (``EVALSHA``) made and their mean.
4. The same reads once more with no job running (same run): the idle baseline.

Reported per bound: the job's rate (records counted in ``meta:stats`` per second,
first to last), the group writes and their mean and longest Redis time, and
read p50 / p99 / max per call, next to the idle reads. Bound 0 is the job
without bounded writes (one Lua call per group and batch). The JSON goes to
stdout; the table replaces the ``bench.steady`` section of docs/BENCHMARKS.md
(unless ``--no-doc``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

from adapters.redis import RedisClient
from bench.common import (
    GAME,
    Job,
    Scratch,
    counted,
    job_env,
    log,
    machine,
    machine_line,
    percentile,
    publish,
    run_id,
    table,
)
from bench.formatting import fmt_int
from bench.priority import raised, set_priority
from config.clients import redis_client
from config.settings import Settings
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, GameConfig
from domain.keys import GroupKeys
from domain.signing import Keyring, parse_keyring, sign
from producer.score_producer import ScoreProducer
from producer.zipf import ZipfSampler
from readers.boards import BoardReader
from schemas.codec import ScoreEventCodec

SECTION = "bench.steady"
LOAD_CHUNK = 20_000
#: Shares of the all-time board's players on this week's and today's boards.
WEEK_SHARE, DAY_SHARE = 0.3, 0.1
NEW_SHARE = 0.2
CALLS = ("top-10", "rank", "around")
#: The nice value of Redis and of the reader while the benchmark runs (see reader).
PRIORITY = -10


def player_id(i: int) -> str:
    """Player number ``i``'s id (the load generator's format)."""
    return f"p{i:07d}"


def records(
    keyring: Keyring, start_ms: int, events: int, players: int, seed: int
) -> Iterator[tuple[bytes, bytes, int]]:
    """(key, value, record time) of the stream: 80% returning Zipf players, 20% new ones."""
    rng = random.Random(seed)
    zipf = ZipfSampler(players, 1.1, rng)
    codec = ScoreEventCodec.from_registry()
    key_id = keyring.key_ids[0]
    fresh = players
    for i in range(events):
        if rng.random() < NEW_SHARE:
            player, fresh = player_id(fresh), fresh + 1
        else:
            player = player_id(zipf.sample() - 1)
        score = min(9_999_999, int(rng.lognormvariate(7.0, 1.5)))
        ts = start_ms + i // 100  # 100,000 records per second of record time
        kind = EventKind.SCORE
        event_id = f"s{seed}-{i}"
        sig = sign(keyring, key_id, event_id, GAME, player, score, ts, kind)
        event = ScoreEvent(event_id, GAME, player, score, ts, kind, key_id, sig)
        yield player.encode(), codec.encode(event), ts


def produce(settings: Settings, topic: str, events: int, players: int, start_ms: int) -> float:
    """Write the stream to ``topic``; seconds taken."""
    started = time.monotonic()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    with ScoreProducer(settings.kafka_bootstrap, topic, settings.kafka_extra) as producer:
        for key, value, ts in records(keyring, start_ms, events, players, seed=events):
            producer.produce_record(key, value, ts)
        producer.flush(120.0)
        if producer.delivered != events or producer.failed:
            raise SystemExit(f"producing failed: {producer.delivered} of {events} delivered")
    return time.monotonic() - started


def preload(
    client: RedisClient, namespace: str, game: GameConfig, players: int, now_ms: int
) -> float:
    """Load the game's current boards directly (see the module docstring); seconds taken."""
    started = time.monotonic()
    rng = random.Random(players)
    day_start = now_ms - now_ms % 86_400_000
    keys = GroupKeys(namespace, GAME)
    sizes = {
        "alltime": players,
        "weekly": int(players * WEEK_SHARE),
        "daily": int(players * DAY_SHARE),
    }
    for window in game.windows_at(now_ms):
        kind = window.kind.value
        if kind not in sizes:
            continue
        codec = game.codec(window)
        key = keys.board(window.id)
        for at in range(0, sizes[kind], LOAD_CHUNK):
            chunk = range(at, min(sizes[kind], at + LOAD_CHUNK))
            client.zadd(
                key,
                {
                    player_id(i): codec.encode(
                        min(9_999_999, int(rng.lognormvariate(7.0, 1.5))),
                        rng.randrange(day_start, now_ms),
                    )
                    for i in chunk
                },
            )
        client.sadd(keys.boards, window.id)
    return time.monotonic() - started


def reader(
    settings: Settings,
    namespace: str,
    players: int,
    rate: float,
    stop: Event,
    out: Connection,
    cpus: frozenset[int] = frozenset(),
) -> None:
    """Read at ``rate`` calls/s until ``stop``; send the latencies (ms) per call back.

    At raised priority, as Redis is during the run: on this 2-core machine the
    job's processes would otherwise take the cores the reader and Redis need,
    and the figures would measure waiting for a CPU, not waiting behind a
    write (a game backend and Redis have cores of their own in production).
    """
    os.setsid()  # a session, hence an autogroup, of its own (bench.priority)
    set_priority(0, PRIORITY)
    if cpus:
        os.sched_setaffinity(0, cpus)
    client = redis_client(settings)
    boards = BoardReader(client, GameCatalog.builtin(), namespace)
    rng = random.Random(7)
    times: dict[str, list[float]] = {name: [] for name in CALLS}
    pause = 1.0 / rate
    due = time.monotonic()
    n = 0
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        player = player_id(rng.randrange(players))
        name = CALLS[n % len(CALLS)]
        started = time.perf_counter()
        if name == "top-10":
            boards.top(GAME, "alltime", 10, now_ms=now_ms)
        elif name == "rank":
            boards.rank(GAME, player, "alltime", now_ms=now_ms)
        else:
            boards.around(GAME, player, "alltime", 5, now_ms=now_ms)
        times[name].append((time.perf_counter() - started) * 1000)
        n += 1
        due += pause
        time.sleep(max(0.0, due - time.monotonic()))
    out.send(times)
    out.close()


class Reads:
    """The reader process around one measured stretch."""

    def __init__(
        self,
        settings: Settings,
        namespace: str,
        players: int,
        rate: float,
        cpus: frozenset[int] = frozenset(),
    ) -> None:
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._mine, theirs = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=reader, args=(settings, namespace, players, rate, self._stop, theirs, cpus)
        )
        self._proc.start()

    def finish(self) -> dict[str, dict[str, float | int | None]]:
        """Stop reading; p50/p99/max (ms) and the count per call."""
        self._stop.set()
        times: dict[str, list[float]] = self._mine.recv()
        self._proc.join(30)
        return {name: latency(values) for name, values in times.items()}


def latency(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of latencies in ms, and how many there were."""
    ordered = sorted(values)
    return {
        "calls": len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "max": ordered[-1] if ordered else None,
    }


def evalsha_stats(client: RedisClient) -> tuple[int, int]:
    """(calls, microseconds) of ``EVALSHA`` so far."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def redis_cpu_s(client: RedisClient) -> float:
    """Redis' main-thread CPU seconds so far (user + system)."""
    cpu = client.info("cpu")
    return float(cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"])) + float(
        cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"])
    )


def memory(client: RedisClient, namespace: str) -> dict[str, float | None]:
    """Bytes per member of the all-time board and per event id the dedupe keeps."""
    keys = GroupKeys(namespace, GAME)
    board = keys.board("alltime")
    members = int(client.zcard(board))
    board_bytes = int(client.memory_usage(board, samples=0) or 0)
    seen_bytes = 0
    for key in client.scan_iter(match=f"{keys.prefix}meta:seen:*", count=1000):
        seen_bytes += int(client.memory_usage(key, samples=0) or 0)
    # Every record applied or found a no-op kept its id (fingerprint bags hold
    # many ids per field, so the fields do not count them).
    ids = sum(int(v or 0) for v in client.hmget(keys.stats, "applied", "noop"))
    return {
        "board_bytes_per_member": round(board_bytes / members, 1) if members else None,
        "dedupe_bytes_per_event": round(seen_bytes / ids, 1) if ids else None,
        "dedupe_ids": ids,
    }


def slow_calls(client: RedisClient) -> list[tuple[str, int]]:
    """(command, microseconds) of the slow log since the last reset."""
    return [
        (str(entry["command"]).split(" ", 1)[0].strip("b'").upper(), int(entry["duration"]))
        for entry in client.slowlog_get(100_000)
    ]


def pin(redis_pid: int) -> frozenset[int]:
    """Redis' main thread on the first CPU, this process (and what it starts) on the others.

    A production Redis has cores of its own; on a 2-core machine the job's
    processes would otherwise share Redis' core and every read would wait for
    a CPU as well as behind the job's writes. Returns the CPUs given to Redis
    (the reader joins them).
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    redis_cpus = frozenset(cpus[:1])
    os.sched_setaffinity(redis_pid, redis_cpus)
    os.sched_setaffinity(0, set(cpus[1:]))
    return redis_cpus


def run_bound(
    scratch: Scratch, settings: Settings, topic: str, bound: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Load a namespace, run the job over the topic with ``bound``, read beside it."""
    client = scratch.redis
    namespace = scratch.namespace(f"{scratch.prefix}-b{bound}")
    now_ms = int(time.time() * 1000)
    loaded_s = preload(
        client, namespace, GameCatalog.builtin().lookup(GAME) or GameConfig(), args.players, now_ms
    )
    log(f"bound {bound}: loaded {args.players:,} players in {loaded_s:.1f} s")
    env = job_env(
        settings, topic, scratch.own_topic(f"{topic}.dlq-b{bound}"), namespace, scratch.state_dir
    )
    env["LB_WRITE_MAX_UPDATES"] = str(bound)
    client.slowlog_reset()
    calls_before, usec_before = evalsha_stats(client)
    redis_cpu_before = redis_cpu_s(client)
    reads = Reads(settings, namespace, args.players, args.read_rate, args.redis_cpus)
    job = Job(
        ["--until-end", "--no-recovery", "--processes", "2"],
        env,
        scratch.state_dir / f"b{bound}.log",
    )
    scratch.jobs.append(job)
    first = done = None
    while job.poll() is None:
        total, _ = counted(client, namespace)
        now = time.monotonic()
        if total and first is None:
            first = (now, total)
        if total >= args.events * 0.99:
            done = done or (now, total)
        if now - job.started > args.job_timeout:
            job.kill()
            raise SystemExit(f"bound {bound}: no exit within {args.job_timeout} s\n{job.tail()}")
        time.sleep(0.2)
    read = reads.finish()
    if job.wait() != 0:
        raise SystemExit(f"bound {bound}: the job failed\n{job.tail()}")
    calls, usec = evalsha_stats(client)
    redis_cpu = redis_cpu_s(client) - redis_cpu_before
    every_slow = slow_calls(client)
    slow = [micros for name, micros in every_slow if name == "EVALSHA"]
    others: dict[str, int] = {}
    for name, micros in every_slow:
        if name != "EVALSHA":
            others[name] = max(others.get(name, 0), micros)
    total, _ = counted(client, namespace)
    span = (done or (time.monotonic(), total))[0] - (first or (job.started, 0))[0]
    rate = (total - (first or (0.0, 0))[1]) / span if span > 0 else None
    writes = calls - calls_before
    held = memory(client, namespace)
    scratch.drop_namespace(namespace)
    return {
        "bound": bound,
        "records": total,
        "rate": round(rate) if rate else None,
        "writes": writes,
        "write_mean_ms": round((usec - usec_before) / writes / 1000, 3) if writes else None,
        "write_max_ms": round(max(slow) / 1000, 2) if slow else None,
        "writes_over_1ms": len(slow),
        "redis_us_per_record": round(redis_cpu / total * 1e6, 2) if total else None,
        "other_slow_max_us": others,
        "reads": read,
        "memory": held,
    }


def idle_reads(scratch: Scratch, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """The same reads with no job running, on a loaded board."""
    client = scratch.redis
    namespace = scratch.namespace(f"{scratch.prefix}-idle")
    preload(
        client,
        namespace,
        GameCatalog.builtin().lookup(GAME) or GameConfig(),
        args.players,
        int(time.time() * 1000),
    )
    reads = Reads(settings, namespace, args.players, args.read_rate, args.redis_cpus)
    time.sleep(args.idle_s)
    out = reads.finish()
    scratch.drop_namespace(namespace)
    return out


def section_of(players: int) -> str:
    """The doc section of a run: the default size keeps the plain name."""
    return SECTION if players == 1_000_000 else f"{SECTION}.{players}"


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}" if value < 10 else f"{value:.0f}")


def markdown(summary: dict[str, Any]) -> str:
    """The section: one row per bound, then the idle reads."""
    header = ["LB_WRITE_MAX_UPDATES", "records/s", "Redis µs/record", "group writes"]
    header += ["write mean / max ms"]
    header += [f"{call} p50 / p99 / max ms" for call in CALLS]

    def cells(reads: dict[str, Any]) -> list[str]:
        return [" / ".join(_ms(reads[c][q]) for q in ("p50", "p99", "max")) for c in CALLS]

    rows = [
        [
            str(run["bound"]) + (" (no bound)" if run["bound"] == 0 else ""),
            fmt_int(run["rate"]),
            _ms(run["redis_us_per_record"]),
            fmt_int(run["writes"]),
            f"{_ms(run['write_mean_ms'])} / {_ms(run['write_max_ms'])}",
            *cells(run["reads"]),
        ]
        for run in summary["runs"]
    ]
    rows.append(["job stopped", "-", "-", "-", "-", *cells(summary["idle"])])
    params = summary["params"]
    return "\n".join(
        [
            f"## Reads while the job writes (`bench.steady`, {fmt_int(params['players'])} players)",
            "",
            f"`{summary['command']}`: {machine_line(summary['machine'])}.",
            "",
            f"{fmt_int(params['players'])} players on the all-time board (x{WEEK_SHARE} on the "
            f"week's, x{DAY_SHARE} on the day's), loaded directly; {fmt_int(params['events'])} "
            f"records ({NEW_SHARE:.0%} from new players) applied by `lb run --processes 2` "
            f"while one reader asks the all-time board {params['read_rate']:g} times a second "
            "(top-10, rank, around in turn). Write times are Redis' own (`INFO commandstats`, "
            "slow log); a read can wait behind one write and its own round trip. Redis and "
            f"the reader run at nice {PRIORITY}, their sessions' autogroups too "
            "(`bench/priority.py`: on 2 cores the job's processes would otherwise make them "
            "wait for a CPU, which a production Redis does not share).",
            "",
            table(header, rows),
            "",
            "How to read it: a group write's Redis time is what `LB_WRITE_MAX_UPDATES` bounds "
            "(mean and longest per row); a read's wait is that plus whatever else held Redis "
            "or the reader's core at that moment, so compare each loaded row with the idle one "
            "of the same run.",
            "",
            "Redis memory after the bound-0 run: "
            + ", ".join(
                f"{name.replace('_', ' ')} {value}"
                for name, value in summary["runs"][0]["memory"].items()
            )
            + ".",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run every bound, then the idle reads; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.steady", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--bounds", type=int, nargs="+", default=[0, 4000, 1000, 250])
    parser.add_argument("--read-rate", type=float, default=200.0)
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--job-timeout", type=float, default=900.0)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="Redis and the reader on the first CPU, this process and the job on the others",
    )
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    with Scratch(settings, f"steady-{run_id()}") as scratch:
        client = redis_client(settings)
        redis_pid = int(client.info("server")["process_id"])
        slowlog = client.config_get("slowlog-*")
        client.config_set("slowlog-log-slower-than", 1000)
        client.config_set("slowlog-max-len", 100_000)
        redis_affinity = os.sched_getaffinity(redis_pid)
        args.redis_cpus = pin(redis_pid) if args.pin else frozenset()
        try:
            with raised(redis_pid, PRIORITY):
                topic = scratch.topic(f"{scratch.prefix}-events", args.partitions)
                start_ms = int(datetime.now(UTC).timestamp() * 1000)
                seconds = produce(settings, topic, args.events, args.players, start_ms)
                log(f"produced {args.events:,} records in {seconds:.1f} s")
                runs = [run_bound(scratch, settings, topic, bound, args) for bound in args.bounds]
                idle = idle_reads(scratch, settings, args)
        finally:
            for name, value in slowlog.items():
                client.config_set(str(name), str(value))
            os.sched_setaffinity(redis_pid, redis_affinity)
    summary = {
        "section": SECTION,
        "command": " ".join(["python -m bench.steady", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(),
        "params": {
            k: sorted(v) if isinstance(v, frozenset) else v
            for k, v in vars(args).items()
            if k != "no_doc"
        },
        "runs": runs,
        "idle": idle,
    }
    section = section_of(args.players)
    summary["section"] = section
    return publish(section, summary, markdown, verified=True, write_doc=not args.no_doc)


if __name__ == "__main__":
    raise SystemExit(main())
