"""Where one process's time goes per event, stage by stage, for each workload shape.

Usage (from the repository root, with ``lb up`` running)::

    .venv/bin/python -m bench.cpu [--workload zipf|new-players|history|all]
                                  [--events 200000] [--profile 25]
                                  [--decoder python,native]

The job's own per-batch work (the same ``Validator``, ``BoardPlanner`` and
``RedisBoardStore`` as ``lb run``) in one thread, fed straight from the load
generator (no Kafka, no Bytewax), against the real Redis under a throwaway
namespace: batches of ``LB_BATCH_MAX`` records of one partition, one read
and one write round trip each. It reports microseconds per record for each
stage and, with ``--profile N``, the N functions with the most own time from
``cProfile`` (which inflates many-small-call code, so read its shares, not
its totals). Progress on stderr, a JSON summary on stdout.

``--decoder`` lists the decode + verify engines to run (``schemas/decode_verify.py``;
default: both when ``lb_native`` is built): each shape's same records go
through each engine in turn, into a fresh namespace, and the summary puts
them side by side with the ratio python / native of the validate stage and
of the process CPU per record.

What it does not include: consuming from Kafka (``bench.ingest``'s ceiling
measures it), Bytewax's own per-item cost and the dead-letter producer.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import time
import zlib
from collections import defaultdict
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import COUNTED, Scratch, base_settings, counted, emit, log, run_id
from bench.workloads import WORKLOADS, shape
from config.clients import redis_client
from config.heap import collector_paused, tune_for_streaming
from config.settings import Settings
from domain.games import GameCatalog
from domain.planner import BoardPlanner, LookupResults, PlanRound
from domain.records import RecordBatch, SourceRecord
from domain.signing import parse_keyring
from domain.validation import Validator
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import decode_verifier, native_module
from sinks.boards import RedisBoardStore

PARTITIONS = 4

STAGES = (
    "validate (decode, verify, windows)",
    "plan: lookups",
    "Redis read round trip",
    "plan: fold",
    "Redis write round trip (encode + Lua)",
    "plan: commit",
)


def _batches(
    records: list[SourceRecord], keys: list[int], batch_max: int
) -> list[tuple[int, list[SourceRecord]]]:
    """Records split by partition in log order, then cut into batches, round-robin."""
    by_partition: dict[int, list[SourceRecord]] = defaultdict(list)
    for record, partition in zip(records, keys, strict=True):
        by_partition[partition].append(record)
    out: list[tuple[int, list[SourceRecord]]] = []
    cursors = {p: 0 for p in by_partition}
    while cursors:
        for partition in sorted(cursors):
            at = cursors[partition]
            chunk = by_partition[partition][at : at + batch_max]
            out.append((partition, chunk))
            if at + batch_max >= len(by_partition[partition]):
                del cursors[partition]
            else:
                cursors[partition] = at + batch_max
    return out


def measure(
    workload: str,
    events: int,
    players: int,
    profile: int,
    engines: list[str],
    paused: bool = True,
) -> list[dict[str, Any]]:
    """One shape's stage times (and profile) over ``events`` records, once per engine.

    ``paused``: each batch's planning and writing run with the collector
    paused, as in the job (``config.heap.collector_paused``).
    """
    settings = base_settings()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    codec = ScoreEventCodec.from_registry()
    start_ms = (datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    log(f"{workload}: generating {events:,} records")
    generated = list(shape(workload).records(keyring, codec, start_ms, events, players))
    offsets: dict[int, int] = defaultdict(int)
    records: list[SourceRecord] = []
    partitions: list[int] = []
    for item in generated:
        partition = zlib.crc32(item.key) % PARTITIONS
        offset = offsets[partition]
        offsets[partition] = offset + 1
        records.append(SourceRecord(offset, item.timestamp_ms, item.key, item.value))
        partitions.append(partition)
    expected = sum(1 for item in generated if item.expected in ("ok", "duplicate"))
    batches = _batches(records, partitions, settings.batch_max)
    del generated
    return [
        _run(workload, engine, len(records), batches, expected, profile, settings, paused)
        for engine in engines
    ]


def _run(
    workload: str,
    engine: str,
    n: int,
    batches: list[tuple[int, list[SourceRecord]]],
    expected: int,
    profile: int,
    settings: Settings,
    paused: bool = True,
) -> dict[str, Any]:
    """The stages over ``batches`` with the decode + verify engine ``engine``."""
    keyring = parse_keyring(settings.hmac_keys.reveal())
    prefix = f"bench-cpu-{run_id()}"
    with Scratch(settings, prefix) as scratch:
        namespace = scratch.namespace(prefix)
        validator = Validator(GameCatalog.builtin(), decode_verifier(keyring, engine=engine))
        store = RedisBoardStore(redis_client(settings))
        planner = BoardPlanner(namespace, settings.dedupe_horizon_s * 1000, settings.cache_players)
        times = dict.fromkeys(STAGES, 0.0)
        clock = time.perf_counter
        profiler = cProfile.Profile() if profile else None
        log(
            f"{workload} [{engine}]: {len(batches)} batches of up to {settings.batch_max:,} records"
        )
        if profiler is not None:
            profiler.enable()
        cpu0 = time.process_time()
        wall0 = clock()
        for partition, chunk in batches:
            with collector_paused() if paused else nullcontext():
                t0 = clock()
                checked = validator.check_batch(RecordBatch("t", partition, tuple(chunk)))
                t1 = clock()
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
                # Freed here, as the sink's round ends with its call: the collection
                # after the block then walks only what the batch left alive.
                del checked, round_, got, plans
            for name, spent in zip(
                STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5), strict=True
            ):
                times[name] += spent
        wall = clock() - wall0
        cpu = time.process_time() - cpu0
        if profiler is not None:
            profiler.disable()
        total, stats = counted(scratch.redis, namespace)
    verified = total == expected
    result: dict[str, Any] = {
        "workload": workload,
        "decoder": engine,
        "records": n,
        "verified": verified,
        "counted": {name: stats.get(name, 0) for name in COUNTED},
        "seconds": round(wall, 2),
        "records_per_s": round(n / wall),
        "process_cpu_us_per_record": round(1e6 * cpu / n, 2),
        "stages_us_per_record": {name: round(1e6 * t / n, 2) for name, t in times.items()},
    }
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(profile)
        result["profile"] = out.getvalue()
    log(
        f"{workload} [{engine}]: {n:,} records in {wall:.2f} s = {n / wall:,.0f}/s, "
        f"{1e6 * cpu / n:.1f} us CPU/record; "
        + ", ".join(f"{k} {1e6 * v / n:.1f}" for k, v in times.items())
        + ("" if verified else f"; COUNTED {total} != {expected}")
    )
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the shapes asked for; JSON on stdout, exit 1 if a count does not check out."""
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__)
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--decoder",
        default=None,
        metavar="ENGINES",
        help="comma-separated engines among python,native (default: both when native is built)",
    )
    parser.add_argument(
        "--collector",
        choices=("tuned", "unpaused", "default"),
        default="tuned",
        help="the garbage collector as the job sets it (config/heap.py: a higher young "
        "threshold, paused within each batch), the threshold without the pause, or "
        "CPython's defaults",
    )
    args = parser.parse_args(argv)
    if args.decoder is None:
        engines = ["python", "native"] if native_module() is not None else ["python"]
    else:
        engines = [e.strip() for e in args.decoder.split(",") if e.strip()]
    if not engines or any(e not in ("python", "native") for e in engines):
        print(f"--decoder: expected python and/or native, got {args.decoder!r}", file=sys.stderr)
        return 2
    if "native" in engines and native_module() is None:
        print("--decoder native: lb_native is not built (scripts/bootstrap.sh)", file=sys.stderr)
        return 2
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    if args.collector != "default":
        tune_for_streaming()
    paused = args.collector == "tuned"
    results = [
        result
        for name in names
        for result in measure(name, args.events, args.players, args.profile, engines, paused)
    ]
    for result in results:
        if "profile" in result:
            print(
                f"--- {result['workload']} [{result['decoder']}]\n{result['profile']}",
                file=sys.stderr,
            )
    summary: dict[str, Any] = {
        "benchmark": "cpu",
        "collector": args.collector,
        "gc_threshold": list(gc.get_threshold()),
        "results": results,
    }
    if len(engines) > 1:
        summary["engines"] = _side_by_side(results, engines)
    emit(summary)
    return 0 if all(r["verified"] for r in results) else 1


def _side_by_side(results: list[dict[str, Any]], engines: list[str]) -> dict[str, Any]:
    """Per shape, each engine's validate stage and process CPU per record, and their ratio."""
    out: dict[str, Any] = {}
    for workload in dict.fromkeys(r["workload"] for r in results):
        by_engine = {r["decoder"]: r for r in results if r["workload"] == workload}
        row: dict[str, Any] = {}
        for label, path in (
            ("validate_us_per_record", ("stages_us_per_record", STAGES[0])),
            ("process_cpu_us_per_record", ("process_cpu_us_per_record",)),
        ):
            figures: dict[str, float | None] = {}
            for engine in engines:
                value: Any = by_engine[engine]
                for key in path:
                    value = value[key]
                figures[engine] = value
            first, last = figures[engines[0]], figures[engines[-1]]
            ratio = round(first / last, 2) if first is not None and last else None
            figures[f"{engines[0]}/{engines[-1]}"] = ratio
            row[label] = figures
        out[workload] = row
        log(
            f"{workload}: validate {row['validate_us_per_record']}, "
            f"process CPU {row['process_cpu_us_per_record']} (us per record)"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
