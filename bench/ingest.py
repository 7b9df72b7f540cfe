"""Ingest throughput: ``lb run --until-end`` (1 and 2 processes) against two baselines.

Usage (from the repository root)::

    .venv/bin/python -m bench.ingest [--workload zipf|new-players|history]
                                     [--events 1000000] [--players 1000000] [--repeat 2]

1. Pre-produces ``--events`` records of one workload shape (``bench.workloads``:
   the load generator and the idempotent producer, 8 partitions, game ``g1``
   with the built-in three windows, 1% duplicates, 1% bad records) into a
   fresh topic. ``python -m bench`` runs every shape, and the headline shows
   the worst next to the best.
2. Baseline *ceiling*: one thread consumes the topic and decodes and verifies
   every record; no Redis. The most a single Python process can hope for.
   Then the *Redis ceiling*: the same loop sends every valid event's three
   window updates, uncoalesced, as pipelined multi-element ``ZADD GT`` (one
   pipeline per ``LB_BATCH_MAX`` events): the most "write every event" can do.
   Then the *Redis floor*: the whole topic, and per ``LB_BATCH_MAX`` valid events
   only the members whose value rises, once, as plain ``ZADD`` (``bench.board_floor``):
   Redis' own time for the least a job could send it, beside each job run's.
3. *Stages*: the job's per-batch work (the same ``Validator``, ``BoardPlanner``
   and ``RedisBoardStore``) in one thread without Bytewax, timed stage by stage
   over the first ``--stage-events`` records, with a ``cProfile`` of the same
   work (the ``--profile`` functions with the most own time): where a
   process's time goes.
4. ``--repeat`` rounds of:

   a. Baseline *reference updater* (the design articles' shape): the ceiling's
      loop plus, for every valid event, one ``MULTI``/``EXEC`` with a
      ``ZADD GT`` per window (all-time, weekly, daily), bounded to
      ``--ref-seconds`` or ``--ref-events``, whichever comes first;
   b. the real job, ``python -m lb.cli run --until-end --no-recovery`` with 1
      and then 2 processes, each into a fresh namespace and dead-letter topic.
      Wall clock from process start to exit (end to end) and, by polling the
      game's ``meta:stats`` hash every 10 ms, from the first visible progress to
      the moment every record was counted (steady state).

   Rounds put every contender through the same busy spells of a shared machine;
   the report takes medians over rounds.

After each job run the boards' counters (applied + noop + duplicate) must
equal the valid + duplicate records produced and the dead-letter topic must
hold exactly the bad records; otherwise the run is reported as failed, the
script exits 1 and ``docs/BENCHMARKS.md`` is left alone. CPU use of the job,
Redis, Kafka and everything else on the machine is recorded per measurement,
and the job's CPU per event (all its processes' user + system time over the
records it read) for each job run.

Progress goes to stderr, the JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from adapters.redis import RedisClient
from bench.board_floor import BestBoards, Updates
from bench.common import (
    ROOT,
    CpuWindow,
    Job,
    Scratch,
    base_settings,
    children_cpu_s,
    counted,
    cpu_delta,
    job_env,
    log,
    machine,
    machine_line,
    publish,
    redis_spent,
    redis_time,
    run_id,
    self_cpu_s,
    service_cpu_s,
    session_cpu_s,
    table,
)
from bench.formatting import fmt_int, fmt_ratio
from bench.workloads import WORKLOADS, shape
from config.clients import redis_client
from config.heap import collector_paused, tune_for_streaming
from config.settings import Settings
from domain.errors import CodecError, EncodingError
from domain.games import GameCatalog, GameConfig
from domain.planner import BoardPlanner, LookupResults, PlanRound
from domain.records import RecordBatch, SourceRecord
from domain.scoring import TieCodec
from domain.signing import Keyring, Verdict, parse_keyring, verify
from domain.validation import Validator
from domain.windows import WindowKind, window_for
from jobs.dead_letter_reader import count_letters
from producer.score_producer import ScoreProducer
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import decode_verifier
from sinks.boards import RedisBoardStore

PARTITIONS = 8
#: Event-time spacing of the pre-produced records (``lb produce --rate 0``'s default).
POLL_S = 0.01
SECTION = "bench.ingest"


def section_of(workload: str) -> str:
    """Each shape has its own section; the project's Zipf shape keeps the historic name."""
    return SECTION if workload == "zipf" else f"{SECTION}.{workload}"


def _produce(
    settings: Settings, topic: str, args: argparse.Namespace, keyring: Keyring
) -> dict[str, Any]:
    start_ms = (datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    stream = shape(args.workload).records(
        keyring,
        ScoreEventCodec.from_registry(),
        start_ms,
        args.events,
        args.players,
        seed=args.seed,
        dup=args.dup_ratio,
        bad=args.bad_ratio,
    )
    expected: Counter[str] = Counter()
    started = time.monotonic()
    step = max(1, args.events // 10)
    with ScoreProducer(settings.kafka_bootstrap, topic, settings.kafka_extra) as producer:
        for index, record in enumerate(stream):
            producer.produce_record(record.key, record.value, record.timestamp_ms)
            expected[record.expected] += 1
            if (index + 1) % step == 0:
                elapsed = time.monotonic() - started
                log(f"produced {index + 1:,} ({(index + 1) / elapsed:,.0f}/s)")
        producer.flush(120.0)
        delivered, failed = producer.delivered, producer.failed
    seconds = time.monotonic() - started
    if delivered != args.events or failed:
        raise SystemExit(f"producing failed: {delivered} delivered, {failed} failed")
    return {
        "seconds": round(seconds, 2),
        "rate": round(args.events / seconds),
        "expected": dict(expected),
        "counted": expected["ok"] + expected["duplicate"],
        "dead": args.events - expected["ok"] - expected["duplicate"],
    }


# -- baselines --------------------------------------------------------------------------


def _consume(
    settings: Settings,
    client: RedisClient,
    topic: str,
    limit: int,
    max_seconds: float,
    handle: Callable[[bytes], None],
    label: str,
) -> dict[str, Any]:
    """Feed up to ``limit`` record values to ``handle``; timed from the first record."""
    consumer = Consumer(
        {
            **settings.kafka_config(),
            "group.id": f"bench-{run_id()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    count = 0
    first: float | None = None
    cpu: CpuWindow | None = None
    last_log = time.monotonic()
    idle_since = time.monotonic()
    try:
        while count < limit:
            messages = consumer.consume(num_messages=1000, timeout=0.5)
            now = time.monotonic()
            if not messages:
                if now - idle_since > 15:
                    log(f"{label}: no records for 15 s; stopping at {count:,}")
                    break
                continue
            idle_since = now
            if first is None:
                first = now
                cpu = CpuWindow(settings, client)
            for message in messages:
                if message.error() is not None:
                    continue
                handle(message.value() or b"")
                count += 1
                if count >= limit:
                    break
            now = time.monotonic()
            if now - last_log > 5:
                last_log = now
                log(f"{label}: {count:,} records ({count / (now - first):,.0f}/s)")
            if now - first >= max_seconds:
                break
    finally:
        consumer.close()
    seconds = time.monotonic() - first if first is not None else 0.0
    rate = count / seconds if seconds > 0 else 0.0
    cores = cpu.cores() if cpu is not None else {}
    log(f"{label}: {count:,} records in {seconds:.1f} s = {rate:,.0f}/s; cores {cores}")
    return {"records": count, "seconds": round(seconds, 2), "eps": round(rate), "cpu_cores": cores}


def _ceiling(settings: Settings, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    codec = ScoreEventCodec.from_registry()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    decode = codec.decode
    valid = 0

    def handle(value: bytes) -> None:
        nonlocal valid
        try:
            event = decode(value)
        except CodecError:
            return
        if verify(keyring, event) is Verdict.OK:
            valid += 1

    out = _consume(
        settings,
        redis_client(settings),
        topic,
        args.events,
        args.ceiling_seconds,
        handle,
        "ceiling",
    )
    out["valid"] = valid
    return out


def _window_updates(
    settings: Settings, namespace: str
) -> Callable[[bytes], tuple[str, list[tuple[str, int]]] | None]:
    """The baselines' per-event work: decode, verify, and each window's (key, composite).

    None for a record the baselines skip (undecodable, badly signed, out of
    bounds). No dedupe, no dead letters, no exactly-once bookkeeping.
    """
    decode = ScoreEventCodec.from_registry().decode
    keyring = parse_keyring(settings.hmac_keys.reveal())
    game = GameConfig()
    kinds = (WindowKind.ALLTIME, WindowKind.WEEKLY, WindowKind.DAILY)
    codecs: dict[str, TieCodec] = {}

    def updates(value: bytes) -> tuple[str, list[tuple[str, int]]] | None:
        try:
            event = decode(value)
        except CodecError:
            return None
        if verify(keyring, event) is not Verdict.OK:
            return None
        out = []
        try:
            for kind in kinds:
                window = window_for(kind, event.ts_ms)
                tie = codecs.get(window.id)
                if tie is None:
                    tie = codecs[window.id] = game.codec(window)
                out.append(
                    (
                        f"{namespace}:{{{event.game_id}}}:{window.id}",
                        tie.encode(event.score, event.ts_ms),
                    )
                )
        except EncodingError:
            return None
        return event.player_id, out

    return updates


def _reference(
    scratch: Scratch, settings: Settings, topic: str, args: argparse.Namespace, label: str
) -> dict[str, Any]:
    """One MULTI/EXEC with a ZADD GT per window, for every valid event."""
    namespace = scratch.namespace(f"{scratch.prefix}-{label}")
    updates = _window_updates(settings, namespace)
    client = scratch.redis
    written = 0

    def handle(value: bytes) -> None:
        nonlocal written
        found = updates(value)
        if found is None:
            return
        player, windows = found
        pipe = client.pipeline(transaction=True)
        for key, composite in windows:
            pipe.zadd(key, {player: composite}, gt=True)
        pipe.execute()
        written += 1

    out = _consume(
        settings,
        client,
        topic,
        min(args.events, args.ref_events),
        args.ref_seconds,
        handle,
        f"reference updater ({label})",
    )
    out["transactions"] = written
    scratch.drop_namespace(namespace)
    return out


def _redis_ceiling(
    scratch: Scratch, settings: Settings, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Every valid event's 3 window updates as pipelined multi-element ``ZADD GT``.

    The Redis side's ceiling for "write every event": the ceiling's loop plus,
    per ``LB_BATCH_MAX`` valid events, one pipeline holding one ``ZADD GT``
    per board key with every update of the batch (no coalescing, so Redis
    does the same member work as the reference updater, minus its round trips
    and transactions).
    """
    namespace = scratch.namespace(f"{scratch.prefix}-redis-ceiling")
    updates = _window_updates(settings, namespace)
    client = scratch.redis
    pending: dict[str, list[Any]] = defaultdict(list)
    batched = 0
    written = 0
    commands = 0

    def flush() -> None:
        nonlocal batched, commands
        pipe = client.pipeline(transaction=False)
        for key, flat in pending.items():
            pipe.execute_command("ZADD", key, "GT", *flat)
        pipe.execute()
        commands += len(pending)
        pending.clear()
        batched = 0

    def handle(value: bytes) -> None:
        nonlocal batched, written
        found = updates(value)
        if found is None:
            return
        player, windows = found
        for key, composite in windows:
            pending[key] += (composite, player)
        batched += 1
        written += 1
        if batched >= settings.batch_max:
            flush()

    out = _consume(
        settings,
        client,
        topic,
        args.events,
        args.ceiling_seconds,
        handle,
        "redis ceiling",
    )
    started = time.monotonic()
    if pending:
        flush()
    # The tail flush belongs to the measurement: add it to the timed span.
    out["seconds"] = round(out["seconds"] + time.monotonic() - started, 2)
    out["eps"] = round(out["records"] / out["seconds"]) if out["seconds"] > 0 else 0
    out["events_written"] = written
    out["zadd_commands"] = commands
    scratch.drop_namespace(namespace)
    return out


#: Members per ``ZADD`` of the floor run (the job's own chunk inside its script).
FLOOR_CHUNK = 1000


def _redis_floor(
    scratch: Scratch, settings: Settings, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Redis' own time for the board members the whole stream changes, and nothing else.

    The shape's floor (:mod:`bench.board_floor`): per ``LB_BATCH_MAX`` valid
    events, each changed member once as plain pipelined ``ZADD`` into fresh
    boards, as the job's runs start; no script, dedupe ids, counters or
    watermarks. Read every record (no time bound): inserts cost more as the
    sets grow, so a prefix would understate it. Per event = per record read,
    as the job runs count it.
    """
    namespace = scratch.namespace(f"{scratch.prefix}-redis-floor")
    updates = _window_updates(settings, namespace)
    boards = BestBoards()
    client = scratch.redis
    batch: list[Updates] = []
    sent = {"members": 0, "commands": 0}

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for key, members in boards.changes(batch).items():
            flat = [item for member, value in members.items() for item in (value, member)]
            for at in range(0, len(flat), 2 * FLOOR_CHUNK):
                pipe.execute_command("ZADD", key, *flat[at : at + 2 * FLOOR_CHUNK])
                sent["commands"] += 1
            sent["members"] += len(members)
        pipe.execute()
        batch.clear()

    def handle(value: bytes) -> None:
        found = updates(value)
        if found is not None:
            batch.append(found)
            if len(batch) >= settings.batch_max:
                flush()

    before = redis_time(client)
    out = _consume(settings, client, topic, args.events, float("inf"), handle, "redis floor")
    if batch:
        flush()
    spent = redis_spent(before, redis_time(client))
    records = out["records"] or 1
    out.update(
        batch_max=settings.batch_max,
        members=sent["members"],
        zadd_commands=sent["commands"],
        redis_main_us_per_event=round(1e6 * spent["main_thread_s"] / records, 2),
        redis_zadd_us_per_event=round(1e6 * spent["commands_s"].get("zadd", 0.0) / records, 2),
    )
    log(
        f"redis floor: {sent['members']:,} members; Redis main thread "
        f"{out['redis_main_us_per_event']} us per event ({out['redis_zadd_us_per_event']} in ZADD)"
    )
    scratch.drop_namespace(namespace)
    return out


def _stages(
    scratch: Scratch, settings: Settings, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The job's per-batch work in one thread without Bytewax, timed stage by stage.

    Same classes as the job (``Validator``, ``BoardPlanner``, ``RedisBoardStore``),
    same batch size (``LB_BATCH_MAX`` records of one partition), one read and one
    write round trip per batch; no dead-letter output; the garbage collector
    tuned as in the job's processes (``config/heap.py``).
    """
    tune_for_streaming()
    namespace = scratch.namespace(f"{scratch.prefix}-stages")
    keyring = parse_keyring(settings.hmac_keys.reveal())
    validator = Validator(GameCatalog.builtin(), decode_verifier(keyring, engine=settings.decoder))
    store = RedisBoardStore(redis_client(settings))
    planner = BoardPlanner(namespace, settings.dedupe_horizon_s * 1000, settings.cache_players)
    limit = min(args.events, args.stage_events)
    batch_max = settings.batch_max
    times: dict[str, float] = defaultdict(float)
    accepted = 0
    processed = 0
    clock = time.perf_counter

    profiler = cProfile.Profile()

    def run(partition: int, records: list[SourceRecord]) -> None:
        profiler.enable()
        try:
            with collector_paused():  # as the job's validate step and board sink
                timed(partition, records)
        finally:
            profiler.disable()

    def timed(partition: int, records: list[SourceRecord]) -> None:
        nonlocal accepted, processed
        t0 = clock()
        checked = validator.check_batch(RecordBatch(topic, partition, tuple(records)))
        t1 = clock()
        times["decode + validate + verify"] += t1 - t0
        processed += len(records)
        accepted += len(checked.accepted)
        if not checked.accepted:
            return
        round_ = PlanRound(planner, [checked])
        t2 = clock()
        got = store.read_many(round_.lookups) if round_.lookups[0] else [LookupResults()]
        t3 = clock()
        plans = round_.plan(got)
        t4 = clock()
        store.apply_many(plans)
        t5 = clock()
        round_.commit()
        t6 = clock()
        times["plan (lookups, fold, commit)"] += (t2 - t1) + (t4 - t3) + (t6 - t5)
        times["Redis read round trip"] += t3 - t2
        times["Redis write round trip (encode + Lua)"] += t5 - t4

    consumer = Consumer(
        {
            **settings.kafka_config(),
            "group.id": f"bench-{run_id()}",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    pending: dict[int, list[SourceRecord]] = {p: [] for p in range(PARTITIONS)}
    taken = 0
    started: float | None = None
    cpu: CpuWindow | None = None
    try:
        while taken < limit:
            t0 = clock()
            messages = consumer.consume(num_messages=1000, timeout=0.5)
            if not messages:
                if started is not None and clock() - started > 15:
                    break
                continue
            if started is None:
                started = t0 = clock()
                cpu = CpuWindow(settings, scratch.redis)
            for message in messages[: limit - taken]:
                if message.error() is not None:
                    continue
                offset = message.offset() or 0
                pending[message.partition() or 0].append(
                    SourceRecord(offset, message.timestamp()[1], message.key(), message.value())
                )
                taken += 1
            times["consume (librdkafka -> SourceRecord)"] += clock() - t0
            for partition, records in pending.items():
                if len(records) >= batch_max:
                    run(partition, records)
                    pending[partition] = []
            if clock() - started > args.stage_seconds:
                break
        for partition, records in pending.items():
            if records:
                run(partition, records)
    finally:
        consumer.close()
    wall = clock() - started if started is not None else 0.0
    cores = cpu.cores() if cpu is not None else {}
    total = sum(times.values())
    counted_total, _ = counted(scratch.redis, namespace)
    scratch.drop_namespace(namespace)
    profile = io.StringIO()
    pstats.Stats(profiler, stream=profile).sort_stats("tottime").print_stats(args.profile)
    result: dict[str, Any] = {
        "profile": _profile_table(profile.getvalue()),
        "records": processed,
        "accepted": accepted,
        "counted": counted_total,
        "verified": counted_total == accepted,
        "seconds": round(wall, 2),
        "eps": round(processed / wall) if wall > 0 else 0,
        "batch_max": batch_max,
        "cpu_cores": cores,
        "stages": {
            name: {
                "seconds": round(value, 3),
                "share": round(value / total, 3) if total else None,
                "us_per_record": round(1e6 * value / processed, 2) if processed else None,
            }
            for name, value in sorted(times.items(), key=lambda item: -item[1])
        },
    }
    log(
        f"stages: {processed:,} records in {wall:.1f} s = {result['eps']:,}/s; "
        + ", ".join(f"{k} {v['share']:.0%}" for k, v in result["stages"].items())
    )
    return result


def _profile_markdown(rows: list[list[str]] | None) -> str:
    if not rows:
        return ""
    body = table(
        ["own s", "cumulative s", "calls", "function"],
        [[own, cum, calls, f"`{where}`"] for own, cum, calls, where in rows],
    )
    return (
        "The same work under `cProfile`, the functions with the most own time "
        "(the profiler inflates code made of many small calls; read the order, not the "
        f"totals):\n\n{body}\n\n"
    )


def _profile_table(text: str) -> list[list[str]]:
    """``pstats`` rows (own seconds, cumulative seconds, calls, function), most own time first."""
    rows = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].replace(".", "", 1).isdigit():
            calls, tottime, _, cumtime, _, where = parts
            rows.append([tottime, cumtime, calls, where.replace(str(ROOT) + "/", "")])
    return rows


# -- the job ----------------------------------------------------------------------------


def _job(
    scratch: Scratch,
    settings: Settings,
    topic: str,
    processes: int,
    label: str,
    produced: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    namespace = scratch.namespace(f"{scratch.prefix}-{label}")
    dlq = scratch.own_topic(f"{topic}.dlq-{label}")
    flags = ["--until-end", "--no-recovery"]
    if processes > 1:
        flags += ["--processes", str(processes)]
    env = job_env(settings, topic, dlq, namespace, scratch.state_dir)
    expected = int(produced["counted"])
    client = scratch.redis
    cpu_before = children_cpu_s()
    self_before = self_cpu_s()
    services_before = service_cpu_s(settings, client)
    redis_before = redis_time(client)
    job = Job(flags, env, scratch.state_dir / f"{label}.log")
    scratch.jobs.append(job)
    log(f"{label}: started `{job.command}` (namespace {namespace})")
    t_start = job.started
    t_first: float | None = None
    first_count = 0
    t_done: float | None = None
    # The job's CPU while it processes (start-up excluded), from its processes' /proc stats.
    cpu_first = cpu_done = 0.0
    last_total = 0
    last_log = t_start
    while True:
        code = job.poll()
        now = time.monotonic()
        total, _ = counted(client, namespace)
        if total < last_total:
            job.kill()
            raise SystemExit(
                f"{label}: the counters went back from {last_total:,} to {total:,}: someone "
                "else deleted this run's Redis keys (a shared Redis); run the benchmark again"
            )
        last_total = total
        if total and t_first is None:
            t_first, first_count = now, total
            cpu_first = session_cpu_s(job.proc.pid)
        if total >= expected and t_done is None:
            t_done = now
            cpu_done = session_cpu_s(job.proc.pid)
        if code is not None:
            break
        if now - last_log > 5:
            last_log = now
            log(f"{label}: {total:,} / {expected:,} counted")
        if now - t_start > args.job_timeout:
            job.kill()
            raise SystemExit(f"{label}: no exit within {args.job_timeout} s\n{job.tail()}")
        time.sleep(POLL_S)
    t_exit = time.monotonic()
    code = job.wait()
    wall = t_exit - t_start
    services_after = service_cpu_s(settings, client)
    redis = redis_spent(redis_before, redis_time(client))
    job_cpu = children_cpu_s() - cpu_before
    self_cpu = self_cpu_s() - self_before
    total, stats = counted(client, namespace)
    dead = count_letters(settings.kafka_config(), dlq)
    ok = code == 0 and total == expected and dead == produced["dead"]
    if not ok:
        log(f"{label}: FAILED exit {code}, counted {total} of {expected}, dlq {dead}\n{job.tail()}")
    events = args.events
    steady: float | None = None
    if t_first is not None:
        end = t_done if t_done is not None else t_exit
        if end > t_first:
            steady = events * (expected - first_count) / expected / (end - t_first)
    result: dict[str, Any] = {
        "label": label,
        "processes": processes,
        "command": job.command,
        "exit_code": code,
        "verified": ok,
        "stats": stats,
        "counted": total,
        "expected_counted": expected,
        "dead_letters": dead,
        "expected_dead_letters": produced["dead"],
        "wall_s": round(wall, 2),
        "to_first_progress_s": None if t_first is None else round(t_first - t_start, 2),
        "processing_s": None if t_first is None or t_done is None else round(t_done - t_first, 2),
        "after_done_to_exit_s": None if t_done is None else round(t_exit - t_done, 2),
        "steady_eps": None if steady is None else round(steady),
        "end_to_end_eps": round(events / wall),
        "job_cpu_cores": round(job_cpu / wall, 2),
        "job_cpu_us_per_event": round(1e6 * job_cpu / events, 2),
        # Steady: CPU between first progress and all counted, over the events counted then.
        "job_steady_cpu_us_per_event": (
            round(1e6 * (cpu_done - cpu_first) / (events * (expected - first_count) / expected), 2)
            if t_done is not None and expected > first_count and cpu_done > cpu_first
            else None
        ),
        "service_cpu_cores": cpu_delta(services_before, services_after, wall),
        # Redis' main thread per event, and the commands that took most (a script's
        # commands are counted under their own names and again inside EVALSHA).
        "redis_main_us_per_event": round(1e6 * redis["main_thread_s"] / events, 2),
        "redis_commands_us_per_event": {
            name: round(1e6 * seconds / events, 2) for name, seconds in redis["commands_s"].items()
        },
        "bench_cpu_cores": round(self_cpu / wall, 2),
    }
    machine_cores = result["service_cpu_cores"]["machine"]
    if machine_cores is not None:
        known = job_cpu / wall + self_cpu / wall
        known += sum(v or 0.0 for k, v in result["service_cpu_cores"].items() if k != "machine")
        result["other_cpu_cores"] = round(max(0.0, machine_cores - known), 2)
    log(
        f"{label}: exit {code} in {wall:.1f} s; first progress after "
        f"{result['to_first_progress_s']} s; steady {fmt_int(steady)}/s, end to end "
        f"{events / wall:,.0f}/s; verified={ok}"
    )
    scratch.drop_namespace(namespace)
    scratch.drop_topics([dlq])
    return result


# -- report -------------------------------------------------------------------------------


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if run[key] is not None]
    return statistics.median(values) if values else None


def _others(result: dict[str, Any]) -> str:
    other = result.get("cpu_cores", {}).get("other")
    return "others' CPU unknown" if other is None else f"others used {other} cores"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:g} us"


def _floor_note(floor: dict[str, Any] | None) -> str:
    """What the Redis floor row measures (nothing for a run made before it existed)."""
    if floor is None:
        return ""
    return f"""The *Redis floor* reads the whole topic and sends Redis only what a writer
that already knew every board value would have to: per batch of {floor["batch_max"]:,} valid
events, each member whose value rises, once, as plain `ZADD` into fresh boards (no script, no
dedupe ids, no counters, no watermarks). Its figure is Redis' main thread per record read,
the measure of the job runs' "Redis us per event" column below.
"""


def _vs_floor(value: float | None, floor: float | None) -> str:
    """Redis' time per event of a job run, and how many times the shape's floor it is."""
    if value is None:
        return "-"
    return f"{value:g}" + ("" if not floor else f" ({fmt_ratio(value / floor)})")


def markdown(summary: dict[str, Any]) -> str:
    """The benchmark's section of docs/BENCHMARKS.md, from its JSON summary."""
    args = summary["args"]
    workload = args.get("workload", "zipf")
    produced = summary["produced"]
    ceiling = summary["ceiling"]
    ref = summary["reference"]
    jobs = summary["jobs"]
    ref_eps = ref["eps"] or None
    one, two = jobs["1"], jobs["2"]

    def vs_ref(value: float | None) -> str:
        return fmt_ratio(None if value is None or not ref_eps else value / ref_eps)

    rows = [
        [
            "ceiling: consume + decode + verify, 1 thread, no Redis",
            fmt_int(ceiling["eps"]),
            "-",
            vs_ref(ceiling["eps"]),
            f"{ceiling['records']:,} records in {ceiling['seconds']} s; {_others(ceiling)}",
        ],
        [
            "reference updater: 1 `MULTI`/`EXEC` of 3 `ZADD GT` per event",
            fmt_int(ref_eps),
            "-",
            "1.00x",
            "median of rounds: "
            + ", ".join(
                f"{r['eps']:,}/s ({r['records']:,} records in {r['seconds']} s; {_others(r)})"
                for r in ref["runs"]
            ),
        ],
    ]
    redis_ceiling = summary["redis_ceiling"]
    rows.append(
        [
            "Redis ceiling: the same 3 updates per event as pipelined multi-element `ZADD GT`",
            fmt_int(redis_ceiling["eps"]),
            "-",
            vs_ref(redis_ceiling["eps"]),
            f"{redis_ceiling['records']:,} records in {redis_ceiling['seconds']} s, "
            f"{redis_ceiling['zadd_commands']:,} `ZADD` commands; {_others(redis_ceiling)}",
        ]
    )
    floor = summary.get("redis_floor")
    if floor is not None:
        rows.append(
            [
                "Redis floor: only the members the stream changes, once per batch, plain `ZADD`",
                "-",
                "-",
                "-",
                f"Redis {_us(floor['redis_main_us_per_event'])} per event "
                f"({_us(floor['redis_zadd_us_per_event'])} in `ZADD`): {floor['members']:,} "
                f"members in {floor['zadd_commands']:,} commands for {floor['records']:,} records",
            ]
        )
    stages = summary["stages"]
    rows.append(
        [
            "the job's per-batch work in 1 thread, no Bytewax (see stages below)",
            fmt_int(stages["eps"]),
            "-",
            vs_ref(stages["eps"]),
            f"{stages['records']:,} records in {stages['seconds']} s; {_others(stages)}",
        ]
    )
    for count, name in (("1", "`lb run --until-end`, 1 process"), ("2", "`... --processes 2`")):
        entry = jobs[count]
        note = "median of rounds: " + ", ".join(
            f"{fmt_int(r['steady_eps'])}/s (others used {r.get('other_cpu_cores')} cores)"
            for r in entry["runs"]
        )
        if count == "2":
            note += f"; 2 vs 1 process: steady {fmt_ratio(summary['ratio_2_to_1']['steady'])}, "
            note += f"end to end {fmt_ratio(summary['ratio_2_to_1']['end_to_end'])}"
        rows.append(
            [
                name,
                fmt_int(entry["steady_eps"]),
                fmt_int(entry["end_to_end_eps"]),
                vs_ref(entry["steady_eps"]),
                note,
            ]
        )
    main = table(
        ["what", "events/s steady", "events/s end to end", "x reference (steady)", "notes"],
        rows,
    )
    run_rows = []
    floor_us = floor["redis_main_us_per_event"] if floor is not None else None
    for run in one["runs"] + two["runs"]:
        services = run["service_cpu_cores"]
        run_rows.append(
            [
                run["label"],
                f"{run['wall_s']}",
                f"{run['to_first_progress_s']}",
                f"{run['processing_s']}",
                f"{run['after_done_to_exit_s']}",
                f"{run['job_cpu_cores']}",
                f"{run.get('job_cpu_us_per_event', '-')} / "
                f"{run.get('job_steady_cpu_us_per_event') or '-'}",
                f"{services['redis']}",
                _vs_floor(run.get("redis_main_us_per_event"), floor_us),
                f"{services['kafka']}",
                f"{run.get('other_cpu_cores')}",
                f"{services['machine']}",
                f"{run['counted']:,} = {run['expected_counted']:,}; DLQ {run['dead_letters']:,}"
                + ("" if run["verified"] else " **MISMATCH**"),
            ]
        )
    runs = table(
        [
            "run",
            "wall s",
            "start → first progress s",
            "first progress → all counted s",
            "all counted → exit s",
            "job CPU (cores)",
            "job CPU us per event (whole run / steady)",
            "Redis CPU",
            "Redis us per event (x its floor)",
            "Kafka CPU",
            "other processes' CPU",
            "whole machine",
            "applied+noop+duplicate = valid+dup; dead letters",
        ],
        run_rows,
    )
    stage_table = table(
        ["stage", "seconds", "share", "us per record"],
        [
            [name, f"{v['seconds']}", f"{v['share']:.0%}", f"{v['us_per_record']}"]
            for name, v in stages["stages"].items()
        ],
    )
    expected = produced["expected"]
    mix = ", ".join(f"{name} {value:,}" for name, value in sorted(expected.items()))
    profile = _profile_markdown(stages.get("profile"))
    title = "" if workload == "zipf" else f", workload `{workload}`"
    return f"""## Ingest throughput{title} (`bench/ingest.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

Input: workload `{workload}` ({WORKLOADS[workload].summary}; see `bench/workloads.py`):
{args["events"]:,} records pre-produced into a fresh {PARTITIONS}-partition topic at
{produced["rate"]:,}/s: game `g1` (built-in: best operator; all-time, weekly and daily
boards), {args["players"]:,} player ids, {args["dup_ratio"]:.0%} duplicates,
{args["bad_ratio"]:.0%} bad records ({mix}).

{main}

*Steady* = records / (moment every record was counted - first visible progress), from
polling `<ns>:{{g1}}:meta:stats` every 10 ms; *end to end* = records / (process start →
exit), which adds Python/Bytewax start-up, Kafka metadata and shutdown. Baselines run in
one thread of the benchmark process and are timed from their first record. The benchmark
runs {args["repeat"]} round(s) of (reference updater, 1 process, 2 processes) so that a busy
spell of the shared machine hits every contender of a round; each reference run stops
after {args["ref_seconds"]:g} s or {args["ref_events"]:,} records. The reference updater
does no dedupe, no dead letters and no exactly-once bookkeeping. "Others used N cores" is
the machine's busy time not spent by the benchmark, Redis or Kafka during that measurement.
{_floor_note(floor)}
Where the time goes, per job run (CPU = average cores busy over the run's wall time, of
{summary["machine"]["nproc"]}; Redis and Kafka are shared services, so their figures include
any other load; "other processes" is the machine's busy time minus the job, Redis, Kafka
and this script: work that was competing for the same cores):

{runs}

Stages of the job's work, timed in one thread without Bytewax over the first
{stages["records"]:,} records (same `Validator`, `BoardPlanner` and `RedisBoardStore` as the
job, batches of {stages["batch_max"]:,} records of one partition, one read and one write
round trip per batch; no dead-letter output):

{stage_table}

{profile}Every job run is checked: the game's counters (applied + noop + duplicate)
must equal the valid + duplicate records produced, and its dead-letter topic must hold exactly the
bad records; a mismatch fails the benchmark.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--workload", choices=list(WORKLOADS), default="zipf")
    parser.add_argument(
        "--profile", type=int, default=15, metavar="N", help="profile rows kept (stages run)"
    )
    parser.add_argument("--dup-ratio", type=float, default=0.01)
    parser.add_argument("--bad-ratio", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=20260504)
    parser.add_argument(
        "--repeat", type=int, default=2, help="rounds of (reference, 1 process, 2 processes)"
    )
    parser.add_argument("--ref-seconds", type=float, default=30.0)
    parser.add_argument("--ref-events", type=int, default=200_000)
    parser.add_argument("--ceiling-seconds", type=float, default=60.0)
    parser.add_argument("--stage-events", type=int, default=300_000)
    parser.add_argument("--stage-seconds", type=float, default=30.0)
    parser.add_argument("--job-timeout", type=float, default=240.0)
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)

    settings = base_settings()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    info = machine()
    prefix = f"bench-ingest-{run_id()}"
    with Scratch(settings, prefix) as scratch:
        topic = scratch.topic(prefix, PARTITIONS)
        log(f"producing {args.events:,} records into {topic}")
        produced = _produce(settings, topic, args, keyring)
        log(f"produced in {produced['seconds']} s ({produced['rate']:,}/s): {produced['expected']}")
        ceiling = _ceiling(settings, topic, args)
        redis_ceiling = _redis_ceiling(scratch, settings, topic, args)
        redis_floor = _redis_floor(scratch, settings, topic, args)
        stages = _stages(scratch, settings, topic, args)
        runs: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
        references: list[dict[str, Any]] = []
        # Rounds of (reference, 1 process, 2 processes): a slow spell of the shared
        # machine hits every contender of a round alike.
        for attempt in range(args.repeat):
            references.append(_reference(scratch, settings, topic, args, f"ref-r{attempt + 1}"))
            for processes in (1, 2):
                label = f"p{processes}-r{attempt + 1}"
                runs[str(processes)].append(
                    _job(scratch, settings, topic, processes, label, produced, args)
                )

    jobs: dict[str, dict[str, Any]] = {
        count: {
            "runs": entries,
            "steady_eps": _median(entries, "steady_eps"),
            "end_to_end_eps": _median(entries, "end_to_end_eps"),
        }
        for count, entries in runs.items()
    }

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    reference = {
        "runs": references,
        "eps": _median(references, "eps"),
        "records": sum(r["records"] for r in references),
        "seconds": round(sum(r["seconds"] for r in references), 2),
    }
    ref_eps = reference["eps"] or None
    summary: dict[str, Any] = {
        "benchmark": "ingest",
        "command": ".venv/bin/python -m bench.ingest "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": info,
        "args": vars(args),
        "topic_partitions": PARTITIONS,
        "produced": produced,
        "ceiling": ceiling,
        "redis_ceiling": redis_ceiling,
        "redis_floor": redis_floor,
        "reference": reference,
        "stages": stages,
        "jobs": jobs,
        "ratio_to_reference": {
            "ceiling": ratio(ceiling["eps"], ref_eps),
            "redis_ceiling": ratio(redis_ceiling["eps"], ref_eps),
            "job_1_steady": ratio(jobs["1"]["steady_eps"], ref_eps),
            "job_2_steady": ratio(jobs["2"]["steady_eps"], ref_eps),
            "job_1_end_to_end": ratio(jobs["1"]["end_to_end_eps"], ref_eps),
            "job_2_end_to_end": ratio(jobs["2"]["end_to_end_eps"], ref_eps),
        },
        "ratio_2_to_1": {
            "steady": ratio(jobs["2"]["steady_eps"], jobs["1"]["steady_eps"]),
            "end_to_end": ratio(jobs["2"]["end_to_end_eps"], jobs["1"]["end_to_end_eps"]),
        },
    }
    summary["command"] = summary["command"].strip()
    verified = stages["verified"] and all(
        run["verified"] for entries in runs.values() for run in entries
    )
    return publish(section_of(args.workload), summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
