"""Freshness: produce-to-visible latency of the tailing job, steady or through a spike.

Usage (from the repository root)::

    .venv/bin/python -m bench.freshness [--rate 20000] [--seconds 30] [--probe-rate 50]
    .venv/bin/python -m bench.freshness --rate 10000 --seconds 40 --spike-factor 3

Starts ``python -m lb.cli run`` (tailing, with its recovery store, in a fresh
topic / namespace / state directory), waits until it applies a first event,
then produces ``--rate`` events/s for ``--seconds`` from the load generator
(game ``g1``, Zipf players, 1% duplicates, 1% bad records) and interleaves
``--probe-rate`` probe events/s through the same producer. Probes belong to
dedicated players (``probe-000`` ...) in the same game and carry strictly
increasing scores, so a probe is visible once the player's all-time member
holds at least its score.

A separate poller *process* (so the producer's GIL cannot delay it) keeps one
Redis connection and ``ZMSCORE``s every in-flight probe player on the all-time
board every ``--poll-ms``; a probe's latency is (reply time of the first poll
that sees it) - (time ``produce()`` was called), both ``time.monotonic`` (one
system-wide clock). It is an upper bound, coarse by about one poll period. The
Kafka view splits it at the broker acknowledgement (``Message.latency()`` of
the delivery report: produce() -> ack as librdkafka measured it).

At the end the producer is flushed, the job gets up to ``--drain-seconds`` to
count every valid and duplicate record (its lag must reach 0), and is stopped
with SIGTERM. The job *kept up* when its lag (sampled every second and at the
end of producing) never reached one second of input and the final lag is 0.
With ``--spike-factor`` the rate is multiplied for ``--spike-seconds`` from
``--spike-at`` (see :mod:`bench.schedule`); the report adds latency per phase,
the peak lag and the time from the spike's end until the lag is back to its
pre-spike level (the second command: 3x for 10 s from 10 s in). Every topic,
key and directory is deleted afterwards. Progress on stderr, JSON on stdout;
the results replace the ``bench.freshness.<rate>[.p<processes>]`` (or
``bench.freshness.spike.<rate>x<factor>``) section of ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from bench.common import (
    GAME,
    Job,
    Scratch,
    base_settings,
    counted,
    cpu_delta,
    emit,
    job_env,
    log,
    machine,
    machine_line,
    percentile,
    run_id,
    self_cpu_s,
    service_cpu_s,
    session_cpu_s,
    table,
    write_section,
)
from bench.formatting import fmt_int
from bench.schedule import RateSchedule, drain_seconds
from config.clients import redis_client
from config.settings import Settings
from domain.games import GameConfig
from domain.signing import parse_keyring, signed_event
from domain.windows import WindowKind, window_for
from jobs.dead_letter_reader import count_letters
from producer.loadgen import LoadConfig, LoadGenerator
from producer.score_producer import ScoreProducer
from schemas.codec import ScoreEventCodec

PARTITIONS = 8
PROBE_PREFIX = "probe-"
SLICE_S = 5.0


class _AckTrackingProducer(ScoreProducer):
    """The project's producer, also noting when the broker acknowledged each probe."""

    def __init__(self, bootstrap: str, topic: str, extra: Any) -> None:
        super().__init__(bootstrap, topic, extra)
        #: Probe value bytes -> probe sequence number, until acknowledged.
        self.probe_values: dict[bytes, int] = {}
        #: Probe sequence number -> produce() to ack, seconds (librdkafka's measure).
        self.ack_latency: dict[int, float] = {}

    def _on_delivery(self, error: Any, message: Any) -> None:
        super()._on_delivery(error, message)
        if error is None and self.probe_values:
            key = message.key()
            if key is not None and key.startswith(PROBE_PREFIX.encode()):
                seq = self.probe_values.pop(message.value(), None)
                latency = message.latency()
                if seq is not None and latency is not None:
                    self.ack_latency[seq] = latency


def poll_probes(
    settings: Settings, board: str, slots: int, conn: Connection, poll_s: float
) -> None:
    """Child process: note when each in-flight probe becomes visible on ``board``."""
    client = redis_client(settings)
    pending: dict[str, list[tuple[int, int]]] = {}  # player -> [(score, seq)]
    visible: dict[int, float] = {}
    polls = 0
    poll_time = 0.0
    finishing = False
    deadline = 0.0
    while True:
        while conn.poll():
            message = conn.recv()
            if message is None:
                finishing = True
                deadline = time.monotonic() + float(conn.recv())
                continue
            seq, player, score = message
            pending.setdefault(player, []).append((score, seq))
        if pending:
            players = list(pending)
            sent = time.monotonic()
            answers = client.zmscore(board, players)
            now = time.monotonic()
            polls += 1
            poll_time += now - sent
            for player, answer in zip(players, answers, strict=True):
                if answer is None:
                    continue
                best = int(answer) // slots
                waiting = pending[player]
                left = []
                for score, seq in waiting:
                    if score <= best:
                        visible[seq] = now
                    else:
                        left.append((score, seq))
                if left:
                    pending[player] = left
                else:
                    del pending[player]
        if finishing and (not pending or time.monotonic() > deadline):
            break
        time.sleep(poll_s)
    conn.send(
        {
            "visible": visible,
            "polls": polls,
            "mean_poll_rtt_ms": round(1000 * poll_time / polls, 3) if polls else None,
            "unseen": sum(len(v) for v in pending.values()),
        }
    )


def _ms(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)

    def at(q: float) -> float | None:
        found = percentile(ordered, q)
        return None if found is None else round(found * 1000, 1)

    return {
        "p50": at(50),
        "p90": at(90),
        "p99": at(99),
        "max": None if not ordered else round(ordered[-1] * 1000, 1),
        "count": len(ordered),
    }


def _run(args: argparse.Namespace, scratch: Scratch, settings: Settings) -> dict[str, Any]:
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = keyring.key_ids[0]
    codec = ScoreEventCodec.from_registry()
    alltime = window_for(WindowKind.ALLTIME, 0)
    slots = GameConfig().codec(alltime).slots
    prefix = scratch.prefix
    topic = scratch.topic(prefix, PARTITIONS)
    dlq = scratch.own_topic(f"{topic}.dlq")
    namespace = scratch.namespace(prefix)
    board = f"{namespace}:{{{GAME}}}:{alltime.id}"
    client = scratch.redis

    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    poller = context.Process(
        target=poll_probes, args=(settings, board, slots, theirs, args.poll_ms / 1000), daemon=True
    )
    poller.start()

    flags = [] if args.processes <= 1 else ["--processes", str(args.processes)]
    if args.no_recovery:
        flags.append("--no-recovery")
    job = Job(
        flags,
        job_env(settings, topic, dlq, namespace, scratch.state_dir),
        scratch.state_dir / "job.log",
    )
    scratch.jobs.append(job)
    log(f"started `{job.command}` on {topic} (namespace {namespace})")

    producer = _AckTrackingProducer(settings.kafka_bootstrap, topic, settings.kafka_extra)
    expected: Counter[str] = Counter()
    produced_at: dict[int, float] = {}
    seq = 0

    def probe(player: str, track: bool) -> None:
        nonlocal seq
        seq += 1
        ts_ms = int(time.time() * 1000)
        event = signed_event(
            keyring,
            key_id,
            event_id=f"{prefix}-probe-{seq}",
            game_id=GAME,
            player_id=player,
            score=seq,
            ts_ms=ts_ms,
        )
        value = codec.encode(event)
        if track:
            producer.probe_values[value] = seq
            ours.send((seq, player, seq))
        expected["ok"] += 1
        now = time.monotonic()
        producer.produce_record(player.encode(), value, ts_ms)
        if track:
            produced_at[seq] = now

    # Warm-up: the job is up once it has counted a first event.
    warm_deadline = time.monotonic() + args.startup_timeout
    while True:
        probe(f"{PROBE_PREFIX}warmup", track=False)
        producer.poll(0.2)
        if counted(client, namespace)[0] > 0:
            break
        if job.poll() is not None or time.monotonic() > warm_deadline:
            raise SystemExit(f"the job did not start (exit {job.poll()}):\n{job.tail()}")
    startup_s = time.monotonic() - job.started
    log(f"job applies events {startup_s:.1f} s after start; producing {args.rate:,.0f}/s")

    # Idle cost: the tailing job, and the broker serving its fetches, with no input.
    idle: dict[str, float | None] = {}
    if args.idle_seconds > 0:
        producer.flush(30.0)
        services_idle = service_cpu_s(settings, client)
        job_idle = session_cpu_s(job.proc.pid)
        idle_start = time.monotonic()
        time.sleep(args.idle_seconds)
        idle_s = time.monotonic() - idle_start
        idle = {
            "job": round((session_cpu_s(job.proc.pid) - job_idle) / idle_s, 2),
            **cpu_delta(services_idle, service_cpu_s(settings, client), idle_s),
        }
        log(f"idle for {idle_s:.1f} s: cores {idle}")

    schedule = _schedule(args)
    total = schedule.total
    start_ms = int(time.time() * 1000)
    generator = LoadGenerator(
        LoadConfig(
            start_ms=start_ms,
            rate=args.rate,
            seed=args.seed,
            players=args.players,
            zipf_s=args.zipf,
            games=(GAME,),
            dup_ratio=args.dup_ratio,
            bad_ratio=args.bad_ratio,
        ),
        keyring,
        codec,
    )
    check_every = max(1, int(args.rate / 1000))  # pace every ~1 ms of target time
    probe_period = 1.0 / args.probe_rate if args.probe_rate > 0 else float("inf")
    lag_samples: list[tuple[float, int]] = []
    services_before = service_cpu_s(settings, client)
    job_cpu_before = session_cpu_s(job.proc.pid)
    self_cpu_before = self_cpu_s()
    started = time.monotonic()
    next_probe = started
    deadline = started + args.seconds
    next_sample = started + args.sample_s
    probes = 0
    last_done = 0
    for index, record in enumerate(generator.records(total)):
        producer.produce_record(record.key, record.value, record.timestamp_ms)
        expected[record.expected] += 1
        if index % check_every:
            continue
        now = time.monotonic()
        while now >= next_probe and next_probe < deadline:
            probe(f"{PROBE_PREFIX}{probes % args.probe_players:03d}", track=True)
            probes += 1
            next_probe += probe_period
        if now >= next_sample:
            next_sample += args.sample_s
            done, _ = counted(client, namespace)
            if done < last_done:
                raise SystemExit(
                    f"the counters went back from {last_done:,} to {done:,}: someone else "
                    "deleted this run's Redis keys (a shared Redis); run the benchmark again"
                )
            last_done = done
            lag = expected["ok"] + expected["duplicate"] - done
            lag_samples.append((round(now - started, 1), lag))
            if len(lag_samples) % round(5 / args.sample_s) == 0:
                log(
                    f"{index + 1:,} produced ({(index + 1) / (now - started):,.0f}/s), "
                    f"{probes} probes, job lag {lag:,} events"
                )
            if job.poll() is not None:
                raise SystemExit(f"the job exited (code {job.poll()}):\n{job.tail()}")
        producer.poll(0)  # serve delivery reports now: probes' ack times stay sharp
        due = started + schedule.due(index)
        while (ahead := due - time.monotonic()) > 0:
            # librdkafka's poll() takes whole ms: below 1 ms it would spin.
            if ahead >= 0.001:
                producer.poll(ahead)
            else:
                time.sleep(ahead)
    produce_s = time.monotonic() - started
    job_cpu = session_cpu_s(job.proc.pid) - job_cpu_before
    self_cpu = self_cpu_s() - self_cpu_before
    services_after = service_cpu_s(settings, client)
    producer.flush(60.0)
    flushed = time.monotonic()
    counted_target = expected["ok"] + expected["duplicate"]
    done, _ = counted(client, namespace)
    lag_end = counted_target - done
    log(f"produced {total:,} in {produce_s:.1f} s; lag at the end {lag_end:,} events; draining")
    while done < counted_target and time.monotonic() - flushed < args.drain_seconds:
        time.sleep(0.01)
        done, _ = counted(client, namespace)
    drain_s = time.monotonic() - started - produce_s
    final_lag = counted_target - done

    ours.send(None)
    ours.send(5.0)
    seen: dict[str, Any] = ours.recv() if ours.poll(30) else {"visible": {}, "polls": 0}
    poller.join(10)
    code = job.stop(60)
    log(f"job stopped (exit {code})")
    stats_total, stats = counted(client, namespace)
    dead = count_letters(settings.kafka_config(), dlq)
    expected_dead = sum(v for k, v in expected.items() if k not in ("ok", "duplicate"))

    visible: dict[int, float] = seen["visible"]
    latencies: list[float] = []
    acks: list[float] = []
    after_ack: list[float] = []
    slices: dict[int, list[float]] = {}
    phases: dict[str, list[float]] = {phase.name: [] for phase in schedule.phases}
    for number, at in produced_at.items():
        shown = visible.get(number)
        if shown is None:
            continue
        latency = shown - at
        latencies.append(latency)
        slices.setdefault(int((at - started) // SLICE_S), []).append(latency)
        phases[schedule.phase_at(at - started).name].append(latency)
        ack = producer.ack_latency.get(number)
        if ack is not None:
            acks.append(ack)
            after_ack.append(latency - ack)
    # Kept up: the lag never reached one second of input and was 0 at the end.
    max_lag = max([lag_end, *(lag for _, lag in lag_samples)])
    kept_up = final_lag == 0 and max_lag < args.rate
    spike: dict[str, Any] | None = None
    if len(schedule.phases) > 1:
        spike = _spike_report(schedule, lag_samples, lag_end, produce_s, drain_s, final_lag)
    verified = code == 0 and stats_total == counted_target and dead == expected_dead
    cores: dict[str, float | None] = {
        "job": round(job_cpu / produce_s, 2),
        "producer": round(self_cpu / produce_s, 2),
        **cpu_delta(services_before, services_after, produce_s),
    }
    if cores["machine"] is not None:
        known = sum(v or 0.0 for k, v in cores.items() if k != "machine")
        cores["other"] = round(max(0.0, cores["machine"] - known), 2)
    return {
        "job_command": job.command,
        "job_exit_code": code,
        "startup_s": round(startup_s, 2),
        "target_rate": args.rate,
        "produced": total,
        "produce_s": round(produce_s, 2),
        "achieved_rate": round(total / produce_s),
        "expected": dict(expected),
        "probes": len(produced_at),
        "probes_visible": len(latencies),
        "latency_ms": _ms(latencies),
        "ack_ms": _ms(acks),
        "visible_after_ack_ms": _ms(after_ack),
        "schedule": [
            {"phase": p.name, "seconds": p.seconds, "rate": p.rate, "events": p.events}
            for p in schedule.phases
        ],
        "latency_ms_by_phase": {name: _ms(v) for name, v in phases.items()},
        "spike": spike,
        "latency_ms_by_slice": {
            f"{int(k * SLICE_S)}-{int((k + 1) * SLICE_S)}s": _ms(v)
            for k, v in sorted(slices.items())
        },
        "poller": {k: v for k, v in seen.items() if k != "visible"},
        "lag_samples": lag_samples,
        "max_lag": max_lag,
        "lag_at_end_of_produce": lag_end,
        "drain_s": round(drain_s, 2),
        "final_lag": final_lag,
        "kept_up": kept_up,
        "stats": stats,
        "dead_letters": dead,
        "expected_dead_letters": expected_dead,
        "verified": verified,
        "cpu_cores_while_producing": cores,
        "cpu_cores_idle": idle,
    }


def _schedule(args: argparse.Namespace) -> RateSchedule:
    if args.spike_factor <= 1:
        return RateSchedule.steady(args.rate, args.seconds)
    return RateSchedule.spike(
        args.rate, args.seconds, args.spike_factor, args.spike_at, args.spike_seconds
    )


def _spike_report(
    schedule: RateSchedule,
    lag_samples: list[tuple[float, int]],
    lag_end: int,
    produce_s: float,
    drain_s: float,
    final_lag: int,
) -> dict[str, Any]:
    """Peak lag of the spike and how long it took to drain back to normal.

    *Normal* is the highest lag sampled before the spike: the steady state's own
    jitter (records in the producer, the broker and the 50 ms micro-batch).
    """
    start, end = schedule.window("spike")
    samples = [*lag_samples, (round(produce_s, 1), lag_end)]
    before = [lag for at, lag in samples if at < start]
    normal = max(before, default=0)
    peak_at, peak = max(
        ((at, lag) for at, lag in samples if at >= start), key=lambda s: s[1], default=(end, 0)
    )
    drained = drain_seconds(samples, end, normal)
    if drained is None and final_lag == 0:
        # Still behind when producing stopped: it drained during the final wait.
        drained = round(produce_s + drain_s - end, 2)
    return {
        "window_s": [start, end],
        "spike_rate": schedule.phases[1].rate,
        "normal_lag": normal,
        "peak_lag": peak,
        "peak_lag_at_s": peak_at,
        "peak_lag_s_of_input": round(peak / schedule.phases[1].rate, 2),
        "drain_s_after_spike": drained,
    }


def section_of(args: Mapping[str, Any]) -> str:
    """The doc section of one run: rate, spike and process count make it distinct."""
    section = f"bench.freshness.{int(args['rate'])}"
    if args["spike_factor"] > 1:
        section = f"bench.freshness.spike.{int(args['rate'])}x{args['spike_factor']:g}"
    if args["processes"] > 1:
        section += f".p{args['processes']}"
    return section


def markdown(summary: dict[str, Any]) -> str:
    """The benchmark's section of docs/BENCHMARKS.md, from its JSON summary."""
    r = summary["result"]
    args = summary["args"]
    lat, ack, after = r["latency_ms"], r["ack_ms"], r["visible_after_ack_ms"]

    def cells(d: dict[str, Any]) -> list[str]:
        return [str(d[k]) for k in ("p50", "p90", "p99", "max")]

    main = table(
        ["measure", "p50 ms", "p90 ms", "p99 ms", "max ms", "probes"],
        [
            ["produce() -> visible in `ZMSCORE` (all-time)", *cells(lat), str(lat["count"])],
            ["produce() -> broker ack (Kafka view)", *cells(ack), str(ack["count"])],
            ["broker ack -> visible", *cells(after), str(after["count"])],
        ],
    )
    slices = table(
        ["produced during", "p50 ms", "p99 ms", "max ms"],
        [
            [name, str(d["p50"]), str(d["p99"]), str(d["max"])]
            for name, d in r["latency_ms_by_slice"].items()
        ],
    )
    cpu = r["cpu_cores_while_producing"]
    samples = [lag for _, lag in r["lag_samples"]]
    lags = ", ".join(f"{lag:,}" for lag in samples)
    worst = max(samples, default=0)
    rate = r["achieved_rate"] or 1
    verdict = "yes" if r["kept_up"] else "**no**"
    idle = r.get("cpu_cores_idle") or {}
    idle_line = (
        f"Before the load, with no input for {args['idle_seconds']:g} s, the tailing job used "
        f"{idle.get('job')} cores and the Kafka broker {idle.get('kafka')} (the whole machine "
        f"{idle.get('machine')})."
        if idle
        else ""
    )
    scale = "" if args["processes"] <= 1 else f", {args['processes']} processes"
    target = f"{args['rate']:,.0f}/s"
    if r.get("spike"):
        target += f", {r['spike']['spike_rate']:,.0f}/s during the spike"
    title = f"{args['rate']:,.0f} events/s"
    spike_block = ""
    if r.get("spike"):
        sp = r["spike"]
        title += f" with a {args['spike_factor']:g}x spike"
        phase_rows = []
        for phase in r["schedule"]:
            d = r["latency_ms_by_phase"][phase["phase"]]
            phase_rows.append(
                [
                    phase["phase"],
                    f"{phase['seconds']:g}",
                    fmt_int(phase["rate"]),
                    str(d["p50"]),
                    str(d["p99"]),
                    str(d["max"]),
                    str(d["count"]),
                ]
            )
        drained = sp["drain_s_after_spike"]
        spike_block = (
            "A tournament: the rate goes from "
            f"{fmt_int(args['rate'])}/s to {fmt_int(sp['spike_rate'])}/s from "
            f"{sp['window_s'][0]:g} s to {sp['window_s'][1]:g} s and back. The lag peaked at "
            f"{sp['peak_lag']:,} events ({sp['peak_lag_s_of_input']} s of spike input) at "
            f"{sp['peak_lag_at_s']} s and was back to normal (at most {sp['normal_lag']:,}, "
            "the highest lag sampled before the spike) "
            + (
                f"**{drained} s after the spike ended**."
                if drained is not None
                else "**never** within the run."
            )
            + "\n\n"
            + table(
                [
                    "phase (by produce time)",
                    "seconds",
                    "events/s",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "probes",
                ],
                phase_rows,
            )
            + "\n"
        )
    return f"""## Freshness at {title}{scale} (`bench/freshness.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

Job: `{r["job_command"]}` (tailing, recovery store on, 8 input partitions), first event
applied {r["startup_s"]} s after start. Load: {r["produced"]:,} events over
{r["produce_s"]} s = **{r["achieved_rate"]:,}/s achieved** (target {target}; Zipf
{args["zipf"]} over {args["players"]:,} players, {args["dup_ratio"]:.0%} duplicates,
{args["bad_ratio"]:.0%} bad records) plus {r["probes"]:,} probes ({args["probe_rate"]:g}/s,
{args["probe_players"]} probe players, strictly increasing scores), polled every
{args["poll_ms"]:g} ms ({r["poller"].get("mean_poll_rtt_ms")} ms per `ZMSCORE` round trip).

{main}

{spike_block}
Kept up (lag always under 1 s of input, 0 at the end): {verdict}. Job lag (valid +
duplicate records produced minus counted, so it includes records still in the producer
and the broker) peaked at {worst:,} events
({worst / rate:.2f} s of input); {r["lag_at_end_of_produce"]:,} at the end of producing,
drained in {r["drain_s"]} s, final lag {fmt_int(r["final_lag"])}. Sampled every
{args["sample_s"]:g} s:
{lags}. Counters and dead letters checked:
{"ok" if r["verified"] else "**MISMATCH**"}.

CPU while producing (cores): job {cpu["job"]}, producer (this script) {cpu["producer"]},
Redis {cpu["redis"]}, Kafka broker {cpu["kafka"]}, other processes {cpu.get("other")}; whole
machine {cpu["machine"]} of {summary["machine"]["nproc"]} (Redis and Kafka are shared: context).
{idle_line}

Latency by when the probe was produced:

{slices}

Latency = reply time of the first poll that sees the probe's score minus the time
`produce()` was called (`time.monotonic`, one clock across processes): an upper bound,
coarse by about one poll period. Part of every latency is by design: the producer's
`linger.ms` (10 ms) and the source's micro-batch (`LB_BATCH_MS` = 50 ms counted from a
batch's first record, so a record waits 0-50 ms in it).
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__)
    parser.add_argument("--rate", type=float, default=20_000.0, help="background events/s")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--probe-rate", type=float, default=50.0, help="probe events/s")
    parser.add_argument("--probe-players", type=int, default=50)
    parser.add_argument("--poll-ms", type=float, default=2.0)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--dup-ratio", type=float, default=0.01)
    parser.add_argument("--bad-ratio", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=20260504)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--spike-factor",
        type=float,
        default=1.0,
        help="a tournament: multiply the rate by this for --spike-seconds (1 = steady)",
    )
    parser.add_argument("--spike-at", type=float, default=10.0, help="seconds into the run")
    parser.add_argument("--spike-seconds", type=float, default=10.0)
    parser.add_argument(
        "--sample-s", type=float, default=0.5, help="how often the job's lag is sampled"
    )
    parser.add_argument("--no-recovery", action="store_true")
    parser.add_argument(
        "--idle-seconds", type=float, default=5.0, help="measure the idle job's CPU first"
    )
    parser.add_argument("--startup-timeout", type=float, default=90.0)
    parser.add_argument("--drain-seconds", type=float, default=60.0)
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.probe_players < 1:
        parser.error("--rate, --seconds and --probe-players must be positive")

    settings = base_settings()
    info = machine()
    with Scratch(settings, f"bench-fresh-{run_id()}") as scratch:
        result = _run(args, scratch, settings)
    summary: dict[str, Any] = {
        "benchmark": "freshness",
        "command": (
            ".venv/bin/python -m bench.freshness "
            + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "machine": info,
        "args": vars(args),
        "result": result,
    }
    if result["verified"] and not args.no_doc:
        write_section(section_of(summary["args"]), markdown(summary))
        log("wrote docs/BENCHMARKS.md")
    emit(summary)
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
