"""Steady state: a game at size, the job at fixed rates and at full speed, a reader beside it.

Usage (from the repository root, services up with ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.steady                          # 10M players, 20K/s, 50K/s, max
    .venv/bin/python -m bench.steady --players 1000000 --rates 20000 max --bounds 0 1000
    .venv/bin/python -m bench.steady --players 200000 --seconds 10 --events 100000 --no-doc

Game backends read Redis directly, and Redis serves one command at a time: a
reader waits behind whatever the job's write is doing. This measures that wait,
the job's freshness and its cost on boards the size of the seeds' game rather
than on the empty boards the ingest benchmarks start from:

1. One namespace is loaded directly (``ZADD``, 20,000 members per command, not
   through the job): ``--players`` N on the all-time board, N x 0.3 on this
   week's, N x 0.1 on today's (the lowest player numbers, the ones the stream's
   Zipf draws most), log-normal scores, times within today; and a friend set of
   ``--friends`` loaded players for each of the first ``--askers`` players.
   Every run below writes into it (the game keeps growing, as a live one does).
2. The stream: 80% of records from those N players (Zipf s=1.1 over them), 20%
   from players never seen before, signed, live record times; every record of
   every run has an id of its own.
3. Per ``--rates`` value R (records/s): ``lb run --processes 2`` tails a fresh
   topic while this process produces ``R x --seconds`` records at R/s (made
   before the clock starts, paced by :mod:`bench.schedule`). Probe records
   (``--probe-rate``/s, players of their own with rising scores) go through the
   same producer, and a poller process notes when each shows on the all-time
   board: freshness is produce() to visible, :mod:`bench.freshness`' method. The
   job kept up when its lag never reached one second of input and was 0 after
   the drain. ``max`` is the job at full speed instead: ``--events`` records
   produced before any clock starts, applied by ``lb run --processes 2
   --until-end``, once per ``--bounds`` value (``LB_WRITE_MAX_UPDATES``) and
   ``--paces`` value (``LB_WRITES_IN_FLIGHT``); a fixed rate uses the first of
   each.
4. Throughout each run a separate process reads at ``--read-rate`` calls/s on its
   own connection, in turn: top-10, top-100 at offset ``--deep-offset``, rank
   and around (k=5) of a random loaded player, and the friends board of a random
   asker, all through :mod:`readers`. Redis' slow log (threshold 1 ms, restored
   after) and ``INFO commandstats`` give the group writes (``EVALSHA``).
5. The same reads once more with no job running (same run, same boards).

Reported per run: records produced and counted per second, kept up, freshness
p50 / p99, CPU per counted record of the job's processes (their session's
``/proc`` times) and of Redis (``INFO cpu`` main thread), the group writes; read
p50 / p99 / max per call next to the idle reads; Redis memory per member per
board and per deduplicated event; and the issue's goals against these figures
(the rebuild's is quoted from the ``bench.rebuild`` section, not re-run). The
JSON goes to stdout, progress to stderr; the section replaces the
``bench.steady`` one of docs/BENCHMARKS.md (``bench.steady.<players>`` for
another size; not with ``--no-doc``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any, cast

from adapters.redis import RedisClient, text
from bench.common import (
    GAME,
    PUBLISHED_DOC,
    Job,
    Scratch,
    children_cpu_s,
    counted,
    job_env,
    log,
    machine,
    machine_line,
    percentile,
    publish,
    run_id,
    session_cpu_s,
    steal_share,
    steal_ticks,
    table,
)
from bench.formatting import fmt_int, writes_name
from bench.freshness import poll_probes
from bench.isolation import Isolation, isolated, join_kept
from bench.priority import raised, set_priority
from bench.schedule import RateSchedule
from config.clients import redis_client
from config.settings import Settings
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, GameConfig
from domain.keys import GroupKeys
from domain.planner import MAX_UPDATES
from domain.signing import Keyring, parse_keyring, sign
from producer.score_producer import ScoreProducer
from producer.zipf import ZipfSampler
from readers.boards import BoardReader
from readers.friends import FriendsReader
from schemas.codec import ScoreEventCodec

SECTION = "bench.steady"
#: The size of the seeds' game: its run keeps the plain section name.
DEFAULT_PLAYERS = 10_000_000
LOAD_CHUNK = 20_000
#: Shares of the all-time board's players on this week's and today's boards.
WEEK_SHARE, DAY_SHARE = 0.3, 0.1
NEW_SHARE = 0.2
#: The job at full speed, in ``--rates``.
MAX = "max"
CALLS = ("top-10", "top-100 deep", "rank", "around", "friends")
#: The calls the goal of reads under write load names.
GOAL_CALLS = ("top-10", "rank", "around")
#: The nice value of Redis, the reader and the freshness poller while the benchmark runs.
PRIORITY = -10
PROBE_PLAYERS = 20

#: The issue's goals: read p99 / max (ms) with the job at its maximum rate, dedupe
#: bytes per event, rebuild of 10M players (s), Redis and job CPU per event (µs).
READ_P99_MS, READ_MAX_MS = 5.0, 20.0
DEDUPE_BYTES = 16.0
REBUILD_S = 180.0
REDIS_US, JOB_US = 12.0, 18.0
#: How long a dedupe bucket outlives its last write at the default horizon (2 x 300 s + 60 s).
DEDUPE_TTL_S = 660

Rate = int | str


def player_id(i: int) -> str:
    """Player number ``i``'s id (the load generator's format)."""
    return f"p{i:07d}"


def parse_rate(text: str) -> Rate:
    """A ``--rates`` value: records per second, or ``max``."""
    if text == MAX:
        return MAX
    try:
        rate = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole rate nor {MAX!r}") from None
    if rate <= 0:
        raise argparse.ArgumentTypeError(f"a rate must be positive, got {rate}")
    return rate


def plan(
    rates: Sequence[Rate], bounds: Sequence[int], paces: Sequence[int] = (1,)
) -> list[tuple[Rate, int, int]]:
    """The runs, in order: (rate, write bound, pace); a fixed rate runs at the first of each."""
    runs: list[tuple[Rate, int, int]] = []
    for rate in rates:
        if rate == MAX:
            runs += [(MAX, bound, pace) for bound in bounds for pace in paces]
        else:
            runs.append((rate, bounds[0], paces[0]))
    return runs


def run_events(rate: Rate, seconds: float, max_events: int) -> int:
    """Records one run produces: ``rate x seconds`` (the schedule's), or ``max_events``."""
    if rate == MAX:
        return max_events
    return RateSchedule.steady(float(rate), seconds).total


def records(
    keyring: Keyring,
    start_ms: int,
    events: int,
    players: int,
    seed: int,
    first_new: int | None = None,
    per_second: float = 100_000.0,
) -> Iterator[tuple[bytes, bytes, int]]:
    """(key, value, record time) of the stream: 80% returning Zipf players, 20% new ones.

    New players are numbered from ``first_new`` (``players`` by default) up;
    record times advance ``per_second`` records per second from ``start_ms``.
    """
    rng = random.Random(seed)
    zipf = ZipfSampler(players, 1.1, rng)
    codec = ScoreEventCodec.from_registry()
    key_id = keyring.key_ids[0]
    fresh = players if first_new is None else first_new
    for i in range(events):
        if rng.random() < NEW_SHARE:
            player, fresh = player_id(fresh), fresh + 1
        else:
            player = player_id(zipf.sample() - 1)
        score = min(9_999_999, int(rng.lognormvariate(7.0, 1.5)))
        ts = start_ms + int(i * 1000 / per_second)
        kind = EventKind.SCORE
        event_id = f"s{seed}-{i}"
        sig = sign(keyring, key_id, event_id, GAME, player, score, ts, kind)
        event = ScoreEvent(event_id, GAME, player, score, ts, kind, key_id, sig)
        yield player.encode(), codec.encode(event), ts


def produce(settings: Settings, topic: str, stream: Sequence[tuple[bytes, bytes, int]]) -> float:
    """Write ``stream`` to ``topic`` as fast as it goes; seconds taken."""
    started = time.monotonic()
    with ScoreProducer(settings.kafka_bootstrap, topic, settings.kafka_extra) as producer:
        for key, value, ts in stream:
            producer.produce_record(key, value, ts)
        producer.flush(120.0)
        if producer.delivered != len(stream) or producer.failed:
            raise SystemExit(f"producing failed: {producer.delivered} of {len(stream)} delivered")
    return time.monotonic() - started


def the_game() -> GameConfig:
    """The benchmark game's configuration."""
    return GameCatalog.builtin().lookup(GAME) or GameConfig()


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


def load_friends(
    client: RedisClient, namespace: str, players: int, askers: int, friends: int
) -> None:
    """A set of ``friends`` random loaded players for each of the first ``askers`` players."""
    rng = random.Random(askers)
    keys = GroupKeys(namespace, GAME)
    pipe = client.pipeline(transaction=False)
    for asker in range(askers):
        pipe.sadd(
            keys.friends(player_id(asker)),
            *(player_id(rng.randrange(players)) for _ in range(friends)),
        )
        if asker % 500 == 499:
            pipe.execute()
    pipe.execute()


@dataclass(frozen=True)
class ReadPlan:
    """What the reader asks: loaded players, askers with friends, the deep page's offset."""

    players: int
    askers: int
    deep_offset: int
    rate: float


def reader(
    settings: Settings,
    namespace: str,
    reads: ReadPlan,
    stop: Event,
    out: Connection,
    isolation: Isolation | None = None,
) -> None:
    """Read at ``reads.rate`` calls/s until ``stop``; send the latencies (ms) per call back.

    At raised priority, as Redis is during the run: on this 2-core machine the
    job's processes would otherwise take the cores the reader and Redis need,
    and the figures would measure waiting for a CPU, not waiting behind a
    write (a game backend and Redis have cores of their own in production).
    """
    os.setsid()  # a session, hence an autogroup, of its own (bench.priority)
    set_priority(0, PRIORITY)
    join_kept(isolation)
    client = redis_client(settings)
    catalog = GameCatalog.builtin()
    boards = BoardReader(client, catalog, namespace)
    friends = FriendsReader(client, catalog, namespace, rng=random.Random(11))
    rng = random.Random(7)
    times: dict[str, list[float]] = {name: [] for name in CALLS}
    pause = 1.0 / reads.rate
    due = time.monotonic()
    n = 0
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        player = player_id(rng.randrange(reads.players))
        name = CALLS[n % len(CALLS)]
        started = time.perf_counter()
        if name == "top-10":
            boards.top(GAME, "alltime", 10, now_ms=now_ms)
        elif name == "top-100 deep":
            boards.top(GAME, "alltime", 100, reads.deep_offset, now_ms=now_ms)
        elif name == "rank":
            boards.rank(GAME, player, "alltime", now_ms=now_ms)
        elif name == "around":
            boards.around(GAME, player, "alltime", 5, now_ms=now_ms)
        else:
            asker = player_id(rng.randrange(reads.askers))
            friends.board(GAME, asker, "alltime", now_ms=now_ms)
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
        reads: ReadPlan,
        isolation: Isolation | None = None,
    ) -> None:
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._mine, theirs = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=reader, args=(settings, namespace, reads, self._stop, theirs, isolation)
        )
        self._proc.start()
        self._steal = steal_ticks()
        #: The hypervisor's share of the CPU ticks while the reads ran (%), after :meth:`finish`.
        self.steal_pct: float | None = None

    def finish(self) -> dict[str, dict[str, float | int | None]]:
        """Stop reading; p50/p99/max (ms) and the count per call."""
        self._stop.set()
        times: dict[str, list[float]] = self._mine.recv()
        self.steal_pct = steal_share(self._steal, steal_ticks())
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


def memory(client: RedisClient, namespace: str, game: GameConfig) -> dict[str, Any]:
    """Bytes per member of each loaded board and per event id the dedupe keeps."""
    keys = GroupKeys(namespace, GAME)
    per_board: dict[str, float | None] = {}
    for window in game.windows_at(int(time.time() * 1000)):
        if window.kind.value not in ("alltime", "weekly", "daily"):
            continue
        board = keys.board(window.id)
        members = int(client.zcard(board))
        used = int(client.memory_usage(board, samples=0) or 0)
        per_board[window.kind.value] = round(used / members, 1) if members else None
    seen_bytes = 0
    for key in client.scan_iter(match=f"{keys.prefix}meta:seen:*", count=1000):
        seen_bytes += int(client.memory_usage(key, samples=0) or 0)
    # Every record applied or found a no-op kept its id (fingerprint bags hold
    # many ids per field, so the fields do not count them).
    ids = sum(int(v or 0) for v in client.hmget(keys.stats, "applied", "noop"))
    return {
        "board_bytes_per_member": per_board,
        "dedupe_bytes_per_event": round(seen_bytes / ids, 1) if ids else None,
        "dedupe_ids": ids,
    }


def slow_calls(client: RedisClient) -> list[tuple[str, int]]:
    """(command, microseconds) of the slow log since the last reset."""
    return [
        (str(entry["command"]).split(" ", 1)[0].strip("b'").upper(), int(entry["duration"]))
        for entry in client.slowlog_get(100_000)
    ]


def redis_stalls(client: RedisClient) -> dict[str, float]:
    """Redis' latency monitor since the last reset: the longest stall (ms) per event.

    Its events (``fork``, ``aof-write``, ``command``, ``fast-command``, ...) say
    what held Redis: its own persistence, a slow command, or a fast command that
    took long because Redis was off its CPU.
    """
    latest = cast(list[list[Any]], client.latency_latest())
    return {text(row[0]): float(row[3]) for row in latest}


class Meter:
    """Counted records, the job's and Redis' CPU and the group writes over one stretch."""

    def __init__(self, client: RedisClient, namespace: str, job: Job) -> None:
        self._client = client
        self._namespace = namespace
        self._job = job
        client.slowlog_reset()
        client.latency_reset()
        self.records = counted(client, namespace)[0]
        self.started = time.monotonic()
        self._job_cpu = session_cpu_s(job.proc.pid)
        self._redis_cpu = redis_cpu_s(client)
        self._calls, self._usec = evalsha_stats(client)

    def job_cpu_s(self) -> float:
        """The job's CPU seconds since the start (call while it still runs)."""
        return session_cpu_s(self._job.proc.pid) - self._job_cpu

    def report(self, job_cpu_s: float) -> dict[str, Any]:
        """Records counted, CPU per record and the group writes since the start."""
        client = self._client
        records = counted(client, self._namespace)[0] - self.records
        redis_cpu = redis_cpu_s(client) - self._redis_cpu
        calls, usec = evalsha_stats(client)
        writes = calls - self._calls
        stalls = redis_stalls(client)  # before SLOWLOG GET, itself slow on a long log
        every_slow = slow_calls(client)
        slow = [micros for name, micros in every_slow if name == "EVALSHA"]
        others: dict[str, int] = {}
        for name, micros in every_slow:
            if name != "EVALSHA":
                others[name] = max(others.get(name, 0), micros)
        return {
            "records": records,
            "job_us_per_record": round(job_cpu_s / records * 1e6, 2) if records else None,
            "redis_us_per_record": round(redis_cpu / records * 1e6, 2) if records else None,
            "writes": writes,
            "write_mean_ms": round((usec - self._usec) / writes / 1000, 3) if writes else None,
            "write_max_ms": round(max(slow) / 1000, 2) if slow else None,
            "writes_over_1ms": len(slow),
            "other_slow_max_us": others,
            "redis_stalls_ms": stalls,
        }


@dataclass
class Bench:
    """What every run shares: services, the loaded namespace, the arguments."""

    scratch: Scratch
    settings: Settings
    namespace: str
    args: argparse.Namespace
    reads: ReadPlan
    next_new: int


def job_for(bench: Bench, topic: str, writes: tuple[int, int], name: str, until_end: bool) -> Job:
    """``lb run --processes 2`` on ``topic`` into the loaded namespace (bound, pace)."""
    scratch = bench.scratch
    env = job_env(
        bench.settings,
        topic,
        scratch.own_topic(f"{topic}.dlq"),
        bench.namespace,
        scratch.state_dir / name,
    )
    env["LB_WRITE_MAX_UPDATES"], env["LB_WRITES_IN_FLIGHT"] = (str(n) for n in writes)
    flags = ["--no-recovery", "--processes", "2"] + (["--until-end"] if until_end else [])
    (scratch.state_dir / name).mkdir(parents=True, exist_ok=True)
    job = Job(flags, env, scratch.state_dir / f"{name}.log")
    scratch.jobs.append(job)
    return job


def stream_of(
    bench: Bench, events: int, seed: int, per_second: float
) -> list[tuple[bytes, bytes, int]]:
    """One run's records (made before its clock starts), new players of its own."""
    keyring = parse_keyring(bench.settings.hmac_keys.reveal())
    started = time.monotonic()
    start_ms = int(datetime.now(UTC).timestamp() * 1000)
    out = list(
        records(keyring, start_ms, events, bench.args.players, seed, bench.next_new, per_second)
    )
    bench.next_new += events
    log(f"made {events:,} records in {time.monotonic() - started:.1f} s")
    return out


def run_max(bench: Bench, index: int, bound: int, pace: int) -> dict[str, Any]:
    """``--until-end`` over a topic produced beforehand: the job at full speed."""
    args, client = bench.args, bench.scratch.redis
    topic = bench.scratch.topic(f"{bench.scratch.prefix}-r{index}", args.partitions)
    seconds = produce(bench.settings, topic, stream_of(bench, args.events, index, 100_000.0))
    log(
        f"run {index} (max, bound {bound}, pace {pace}): "
        f"produced {args.events:,} records in {seconds:.1f} s"
    )
    job = job_for(bench, topic, (bound, pace), f"r{index}", until_end=True)
    # The meter resets the slow log (tens of ms on a long one) before anything is read.
    meter = Meter(client, bench.namespace, job)
    reads = Reads(bench.settings, bench.namespace, bench.reads, args.isolation)
    children_before = children_cpu_s()
    first = done = None
    job_cpu = 0.0
    while job.poll() is None:
        total = counted(client, bench.namespace)[0] - meter.records
        now = time.monotonic()
        if total and first is None:
            first = (now, total)
        if total >= args.events * 0.99:
            done = done or (now, total)
        if now - job.started > args.job_timeout:
            job.kill()
            raise SystemExit(f"run {index}: no exit within {args.job_timeout} s\n{job.tail()}")
        job_cpu = max(job_cpu, meter.job_cpu_s())
        time.sleep(0.2)
    # lb run waits for its processes, so once it is reaped their CPU is its children's
    # (the reader is not joined yet); the live samples miss the last 0.2 s.
    job_cpu = max(job_cpu, children_cpu_s() - children_before)
    read = reads.finish()
    if job.wait() != 0:
        raise SystemExit(f"run {index}: the job failed\n{job.tail()}")
    report = meter.report(job_cpu)
    total = report["records"]
    span = (done or (time.monotonic(), total))[0] - (first or (job.started, 0))[0]
    rate = (total - (first or (0.0, 0))[1]) / span if span > 0 else None
    log(f"run {index}: {total:,} records counted, {rate or 0:,.0f}/s")
    return {
        "rate": MAX,
        "bound": bound,
        "pace": pace,
        "produced_per_s": None,
        "counted_per_s": round(rate) if rate else None,
        "kept_up": None,
        "freshness_ms": None,
        **report,
        "reads": read,
        "steal_pct": reads.steal_pct,
        "memory": memory(client, bench.namespace, the_game()),
    }


class Probes:
    """Probe records through the producer, and the poller process that sees them land."""

    def __init__(self, bench: Bench, index: int, producer: ScoreProducer) -> None:
        self._bench = bench
        self._index = index
        self._producer = producer
        self._keyring = parse_keyring(bench.settings.hmac_keys.reveal())
        self._codec = ScoreEventCodec.from_registry()
        self.produced_at: dict[int, float] = {}
        self.seq = 0
        game = the_game()
        alltime = next(w for w in game.windows_at(0) if w.kind.value == "alltime")
        board = GroupKeys(bench.namespace, GAME).board(alltime.id)
        ctx = mp.get_context("spawn")
        self._ours, theirs = ctx.Pipe()
        self._proc = ctx.Process(
            target=raised_poller,
            args=(bench.settings, board, game.codec(alltime).slots, theirs, bench.args.isolation),
            daemon=True,
        )
        self._proc.start()

    def send(self, track: bool) -> None:
        """One probe (tracked: its produce time and the poller told)."""
        self.seq += 1
        seq = self.seq
        player = f"probe-r{self._index}-{seq % PROBE_PLAYERS:03d}"
        ts_ms = int(time.time() * 1000)
        event_id = f"{self._bench.scratch.prefix}-r{self._index}-probe-{seq}"
        key_id = self._keyring.key_ids[0]
        kind = EventKind.SCORE
        sig = sign(self._keyring, key_id, event_id, GAME, player, seq, ts_ms, kind)
        event = ScoreEvent(event_id, GAME, player, seq, ts_ms, kind, key_id, sig)
        if track:
            self._ours.send((seq, player, seq))
        at = time.monotonic()
        self._producer.produce_record(player.encode(), self._codec.encode(event), ts_ms)
        if track:
            self.produced_at[seq] = at

    def latencies_s(self) -> list[float]:
        """Produce-to-visible seconds of every tracked probe seen."""
        self._ours.send(None)
        self._ours.send(10.0)
        seen: dict[str, Any] = self._ours.recv() if self._ours.poll(30) else {"visible": {}}
        self._proc.join(10)
        visible: dict[int, float] = seen["visible"]
        return [visible[n] - at for n, at in self.produced_at.items() if n in visible]


def raised_poller(
    settings: Settings, board: str, slots: int, conn: Connection, isolation: Isolation | None
) -> None:
    """:func:`bench.freshness.poll_probes` at the reader's priority (and CPUs)."""
    os.setsid()
    set_priority(0, PRIORITY)
    join_kept(isolation)
    poll_probes(settings, board, slots, conn, 0.002)


def run_rate(bench: Bench, index: int, rate: int, bound: int, pace: int) -> dict[str, Any]:
    """The job tailing a topic this process writes at ``rate`` records/s."""
    args, client = bench.args, bench.scratch.redis
    schedule = RateSchedule.steady(float(rate), args.seconds)
    stream = stream_of(bench, schedule.total, index, float(rate))
    topic = bench.scratch.topic(f"{bench.scratch.prefix}-r{index}", args.partitions)
    job = job_for(bench, topic, (bound, pace), f"r{index}", until_end=False)
    with ScoreProducer(
        bench.settings.kafka_bootstrap, topic, bench.settings.kafka_extra
    ) as producer:
        probes = Probes(bench, index, producer)
        base = counted(client, bench.namespace)[0]
        deadline = time.monotonic() + args.job_timeout
        while counted(client, bench.namespace)[0] == base:
            probes.send(track=False)
            producer.poll(0.2)
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"run {index}: the job did not start\n{job.tail()}")
        log(
            f"run {index} ({rate:,}/s, bound {bound}, pace {pace}): "
            f"job up after {time.monotonic() - job.started:.1f} s"
        )
        meter = Meter(client, bench.namespace, job)  # before the reads (see run_max)
        reads = Reads(bench.settings, bench.namespace, bench.reads, args.isolation)
        probe_every = 1.0 / args.probe_rate
        started = time.monotonic()
        next_probe, next_sample = started, started + 1.0
        max_lag = 0
        for i, (key, value, ts) in enumerate(stream):
            producer.produce_record(key, value, ts)
            if i % 50:
                continue
            now = time.monotonic()
            while now >= next_probe:
                probes.send(track=True)
                next_probe += probe_every
            if now >= next_sample:
                next_sample += 1.0
                # Every record and probe produced so far, less those counted.
                lag = base + probes.seq + i + 1 - counted(client, bench.namespace)[0]
                max_lag = max(max_lag, lag)
                if job.poll() is not None:
                    raise SystemExit(f"run {index}: the job exited\n{job.tail()}")
            producer.poll(0)
            while (ahead := started + schedule.due(i) - time.monotonic()) > 0:
                if ahead >= 0.001:
                    producer.poll(ahead)
                else:
                    time.sleep(ahead)
        produce_s = time.monotonic() - started
        producer.flush(60.0)
    counted_in_time = counted(client, bench.namespace)[0] - meter.records
    read = reads.finish()
    target = base + len(stream) + probes.seq
    drain_until = time.monotonic() + args.drain_seconds
    while (done := counted(client, bench.namespace)[0]) < target and time.monotonic() < drain_until:
        time.sleep(0.05)
    job_cpu = meter.job_cpu_s()
    report = meter.report(job_cpu)
    freshness = sorted(probes.latencies_s())
    code = job.stop(60)
    final_lag = target - done
    kept_up = final_lag <= 0 and max_lag < rate
    log(
        f"run {index}: produced {len(stream) / produce_s:,.0f}/s, counted "
        f"{counted_in_time / produce_s:,.0f}/s, max lag {max_lag:,}, final lag {final_lag:,}, "
        f"job exit {code}"
    )
    return {
        "rate": rate,
        "bound": bound,
        "pace": pace,
        "produced_per_s": round(len(stream) / produce_s),
        "counted_per_s": round(counted_in_time / produce_s),
        "kept_up": kept_up,
        "max_lag": max_lag,
        "final_lag": final_lag,
        "freshness_ms": {
            "probes": len(probes.produced_at),
            "seen": len(freshness),
            "p50": _scaled(percentile(freshness, 50)),
            "p99": _scaled(percentile(freshness, 99)),
        },
        **report,
        "reads": read,
        "steal_pct": reads.steal_pct,
        "memory": memory(client, bench.namespace, the_game()),
    }


def _scaled(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def idle_reads(bench: Bench) -> tuple[dict[str, Any], float | None]:
    """The same reads with no job running, on the same boards; the steal share meanwhile."""
    reads = Reads(bench.settings, bench.namespace, bench.reads, bench.args.isolation)
    time.sleep(bench.args.idle_s)
    return reads.finish(), reads.steal_pct


# -- the goals and the section -------------------------------------------------------------


def verdict(value: float | None, limit: float) -> str:
    """PASS when ``value`` is at most ``limit``, ``over`` above it, ``-`` unmeasured."""
    if value is None:
        return "-"
    return "PASS" if value <= limit else "over"


_REBUILD_ROW = re.compile(r"^\| 10,000,000 \| `lb rebuild` \| \d+ \| ([\d.]+) \|", re.MULTILINE)


def rebuild_seconds(doc: str) -> float | None:
    """The 10M players' ``lb rebuild`` seconds in the ``bench.rebuild`` section of ``doc``."""
    begin, end = "<!-- BEGIN bench.rebuild -->", "<!-- END bench.rebuild -->"
    if begin not in doc or end not in doc:
        return None
    found = _REBUILD_ROW.search(doc.split(begin, 1)[1].split(end, 1)[0])
    return float(found.group(1)) if found else None


def goals(summary: Mapping[str, Any]) -> list[list[str]]:
    """Rows (goal, figure, verdict) of the issue's goals against this run."""
    rows: list[list[str]] = []
    at_max = [run for run in summary["runs"] if run["rate"] == MAX]
    for run in at_max:
        for call in GOAL_CALLS:
            read = run["reads"][call]
            ok = verdict(read["p99"], READ_P99_MS), verdict(read["max"], READ_MAX_MS)
            rows.append(
                [
                    f"{call} at the job's maximum rate ({writes_name(run)}): "
                    f"p99 ≤ {READ_P99_MS:g} ms, max ≤ {READ_MAX_MS:g} ms",
                    f"{_ms(read['p99'])} / {_ms(read['max'])} ms",
                    "PASS" if ok == ("PASS", "PASS") else ("-" if "-" in ok else "over"),
                ]
            )
    dedupe = memory_run(summary)[1].get("dedupe_bytes_per_event")
    rows.append(
        [
            f"dedupe memory ≤ {DEDUPE_BYTES:g} B per event",
            f"{_num(dedupe)} B",
            verdict(dedupe, DEDUPE_BYTES),
        ]
    )
    rebuild = summary.get("rebuild_s")
    rows.append(
        [
            f"rebuild of 10M players ≤ {REBUILD_S:g} s (quoted from the rebuild section)",
            f"{_num(rebuild)} s",
            verdict(rebuild, REBUILD_S),
        ]
    )
    for run in at_max:
        redis_us, job_us = run["redis_us_per_record"], run["job_us_per_record"]
        rows.append(
            [
                f"Redis CPU ≤ {REDIS_US:g} µs per event (goal on new players; this stream: "
                f"{NEW_SHARE:.0%} new), {writes_name(run)}",
                f"{_num(redis_us)} µs",
                verdict(redis_us, REDIS_US),
            ]
        )
        rows.append(
            [
                f"job CPU ≤ {JOB_US:g} µs per event (goal on new players), {writes_name(run)}",
                f"{_num(job_us)} µs",
                verdict(job_us, JOB_US),
            ]
        )
    return rows


def memory_run(summary: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """("first" or "last", that run's memory): the last one while no dedupe id can have expired.

    The dedupe ids of every run are in the counters, but a bucket expires
    :data:`DEDUPE_TTL_S` after its last write: past that, the first run's
    figure is the exact one, though one with fewer ids (a bucket's fixed cost
    weighs more).
    """
    runs = summary["runs"]
    if not runs:
        return "last", {}
    if summary["total_s"] <= DEDUPE_TTL_S:
        return "last", runs[-1]["memory"]
    return "first", runs[0]["memory"]


def section_of(players: int) -> str:
    """The doc section of a run: the default size keeps the plain name."""
    return SECTION if players == DEFAULT_PLAYERS else f"{SECTION}.{players}"


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}" if value < 10 else f"{value:.0f}")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def run_name(run: Mapping[str, Any]) -> str:
    """A run's label: its rate and write settings."""
    rate = "max" if run["rate"] == MAX else f"{fmt_int(run['rate'])}/s"
    return f"{rate}, {writes_name(run)}"


def _kept(run: Mapping[str, Any]) -> str:
    if run["kept_up"] is None:
        return "-"
    return "yes" if run["kept_up"] else "no"


def ingest_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per run: rates, freshness, CPU per record, group writes."""
    rows = []
    for run in runs:
        fresh = run["freshness_ms"] or {}
        rows.append(
            [
                run_name(run),
                fmt_int(run["produced_per_s"]) if run["produced_per_s"] else "-",
                fmt_int(run["counted_per_s"]) if run["counted_per_s"] else "-",
                _kept(run),
                f"{_ms(fresh.get('p50'))} / {_ms(fresh.get('p99'))}" if fresh else "-",
                _num(run["job_us_per_record"]),
                _num(run["redis_us_per_record"]),
                fmt_int(run["writes"]),
                f"{_ms(run['write_mean_ms'])} / {_ms(run['write_max_ms'])}",
            ]
        )
    return rows


def read_rows(
    runs: Sequence[Mapping[str, Any]], idle: Mapping[str, Any], idle_steal: float | None = None
) -> list[list[str]]:
    """One row per call: p50 / p99 / max in each run, then with the job stopped.

    Then the share of CPU ticks the hypervisor took meanwhile (a Redis waiting
    for its virtual CPU stalls every reader, whatever the job does) and Redis'
    latency monitor: its longest stall per event over 1 ms (:func:`redis_stalls`).
    """

    def cell(read: Mapping[str, Any]) -> str:
        return " / ".join(_ms(read[q]) for q in ("p50", "p99", "max"))

    rows = [
        [call] + [cell(run["reads"][call]) for run in runs] + [cell(idle[call])] for call in CALLS
    ]
    steal = [run.get("steal_pct") for run in runs] + [idle_steal]
    stalls = [
        ", ".join(
            f"{name} {value:g}" for name, value in sorted(run.get("redis_stalls_ms", {}).items())
        )
        or "-"
        for run in runs
    ]
    return [
        *rows,
        ["CPU stolen by the host (%)"] + [_num(value) for value in steal],
        ["Redis' longest stall per event (ms)", *stalls, "-"],
    ]


def markdown(summary: dict[str, Any]) -> str:
    """The section: goals, the runs, the reads per call against idle, memory."""
    params = summary["params"]
    runs = summary["runs"]
    after, held = memory_run(summary)
    boards = held.get("board_bytes_per_member", {})
    ingest_header = [
        "run",
        "produced/s",
        "counted/s",
        "kept up",
        "freshness p50 / p99 ms",
        "job µs/record",
        "Redis µs/record",
        "group writes",
        "write mean / max ms",
    ]
    read_header = ["call (p50 / p99 / max ms)"] + [run_name(run) for run in runs] + ["job stopped"]
    return "\n".join(
        [
            f"## Steady state (`bench.steady`, {fmt_int(params['players'])} players)",
            "",
            f"`{summary['command']}`: {machine_line(summary['machine'])}. "
            f"Loading the boards took {summary['load_s']:.0f} s, the whole run "
            f"{summary['total_s'] / 60:.1f} min.",
            "",
            f"{fmt_int(params['players'])} players on the all-time board (x{WEEK_SHARE} on the "
            f"week's, x{DAY_SHARE} on the day's), loaded directly, and {fmt_int(params['askers'])} "
            f"players with {params['friends']} friends each. Then `lb run --processes 2` on "
            f"records {NEW_SHARE:.0%} from new players, {1 - NEW_SHARE:.0%} from loaded ones "
            "(Zipf): at a fixed rate, the job tailing a topic this benchmark writes for "
            f"{params['seconds']:g} s, or at `max`, {fmt_int(params['events'])} records "
            "produced beforehand and applied with `--until-end`. All runs write into the same "
            f"boards. Meanwhile one reader asks {params['read_rate']:g} calls/s in turn: "
            f'top-10, top-100 at offset {fmt_int(params["deep_offset"])} ("top-100 deep"), '
            "rank and around (k=5) of a random loaded player, the friends board of a random "
            "asker. Freshness: probe records (players of their own, rising scores) through the "
            "same producer, a poller process noting when each shows on the all-time board "
            "(`bench.freshness`' method; an upper bound by about 2 ms). Kept up: the lag never "
            "reached one second of input and was 0 after the drain. CPU per record counted: "
            "the job's processes (their `/proc` times) and Redis' main thread (`INFO cpu`). "
            f"Redis, the reader and the poller run at nice {PRIORITY}, their autogroups too "
            "(`bench/priority.py`)"
            + (f"; {params['isolation']}." if params.get("isolation") else "."),
            "",
            "Goals:",
            "",
            table(["goal", "this run", "verdict"], goals(summary)),
            "",
            table(ingest_header, ingest_rows(runs)),
            "",
            table(read_header, read_rows(runs, summary["idle"], summary.get("idle_steal_pct"))),
            "",
            f"Redis memory after the {after} run (`MEMORY USAGE`, exact; a dedupe bucket lives "
            f"{DEDUPE_TTL_S // 60} minutes after its last write, so the last run's figure counts "
            "every id only when the whole run was shorter): bytes per member "
            + ", ".join(f"{name} {_num(value)}" for name, value in boards.items())
            + f"; dedupe {_num(held.get('dedupe_bytes_per_event'))} bytes per event "
            f"({fmt_int(held.get('dedupe_ids'))} ids kept).",
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.steady", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--players", type=int, default=DEFAULT_PLAYERS)
    parser.add_argument("--rates", type=parse_rate, nargs="+", default=[20_000, 50_000, MAX])
    parser.add_argument("--seconds", type=float, default=20.0, help="per fixed-rate run")
    parser.add_argument("--events", type=int, default=600_000, help="per max run")
    parser.add_argument("--bounds", type=int, nargs="+", default=[MAX_UPDATES])
    parser.add_argument(
        "--paces",
        type=int,
        nargs="+",
        default=[1],
        help="LB_WRITES_IN_FLIGHT per max run (0: unpaced); the default is the job's",
    )
    parser.add_argument("--read-rate", type=float, default=200.0)
    parser.add_argument("--deep-offset", type=int, default=100_000)
    parser.add_argument("--askers", type=int, default=1000)
    parser.add_argument("--friends", type=int, default=50)
    parser.add_argument("--probe-rate", type=float, default=20.0)
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--drain-seconds", type=float, default=90.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--job-timeout", type=float, default=900.0)
    parser.add_argument(
        "--pin",
        action="store_true",
        help=(
            "Redis, the reader and the poller alone on the first CPU: every other process "
            "in a cpuset of the others for the run (bench/isolation.py; needs root)"
        ),
    )
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    if args.players < 1000 or args.seconds <= 0 or args.events <= 0 or args.read_rate <= 0:
        parser.error("--players (at least 1000), --seconds, --events, --read-rate must be positive")
    if args.probe_rate <= 0 or any(n < 0 for n in [*args.bounds, *args.paces]):
        parser.error("--probe-rate must be positive and --bounds and --paces at least 0")
    return args


def run_all(scratch: Scratch, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """Load the game, run every planned run, then the idle reads."""
    client = scratch.redis
    namespace = scratch.namespace(f"{scratch.prefix}-game")
    loaded_s = preload(client, namespace, the_game(), args.players, int(time.time() * 1000))
    load_friends(client, namespace, args.players, min(args.askers, args.players), args.friends)
    log(f"loaded {args.players:,} players (and friend sets) in {loaded_s:.1f} s")
    bench = Bench(
        scratch,
        settings,
        namespace,
        args,
        ReadPlan(
            args.players,
            min(args.askers, args.players),
            min(args.deep_offset, args.players - 100),
            args.read_rate,
        ),
        next_new=args.players,
    )
    runs = []
    for index, (rate, bound, pace) in enumerate(plan(args.rates, args.bounds, args.paces)):
        if rate == MAX:
            runs.append(run_max(bench, index, bound, pace))
        else:
            runs.append(run_rate(bench, index, int(rate), bound, pace))
    log(f"idle reads for {args.idle_s:g} s")
    idle, idle_steal = idle_reads(bench)
    scratch.drop_namespace(namespace)
    return {"load_s": round(loaded_s, 1), "runs": runs, "idle": idle, "idle_steal_pct": idle_steal}


def main(argv: list[str] | None = None) -> int:
    """Load, run every rate (and bound), then the idle reads; the exit code."""
    args = parse_args(argv)
    started = time.monotonic()
    settings = Settings.from_env()
    info = machine()  # before --pin narrows this process to fewer CPUs
    with Scratch(settings, f"steady-{run_id()}") as scratch:
        client = redis_client(settings)
        redis_pid = int(client.info("server")["process_id"])
        slowlog = client.config_get("slowlog-*")
        slowlog.update(client.config_get("latency-monitor-threshold"))
        client.config_set("latency-monitor-threshold", 1)
        client.config_set("slowlog-log-slower-than", 1000)
        client.config_set("slowlog-max-len", 100_000)
        try:
            with contextlib.ExitStack() as stack:
                args.isolation = stack.enter_context(isolated(redis_pid)) if args.pin else None
                stack.enter_context(raised(redis_pid, PRIORITY))
                results = run_all(scratch, settings, args)
        finally:
            for name, value in slowlog.items():
                client.config_set(str(name), str(value))
    isolation = args.isolation
    args.isolation = isolation.describe() if isolation is not None else None
    summary: dict[str, Any] = {
        "section": section_of(args.players),
        "command": " ".join(["python -m bench.steady", *(sys.argv[1:] if argv is None else argv)]),
        "machine": info,
        "params": {k: v for k, v in vars(args).items() if k != "no_doc"},
        **results,
        # Quoted from the checkout's own page, wherever this run's section goes.
        "rebuild_s": (
            rebuild_seconds(PUBLISHED_DOC.read_text()) if PUBLISHED_DOC.exists() else None
        ),
        "total_s": round(time.monotonic() - started, 1),
    }
    summary["goals"] = goals(summary)
    return publish(summary["section"], summary, markdown, verified=True, write_doc=not args.no_doc)


if __name__ == "__main__":
    raise SystemExit(main())
