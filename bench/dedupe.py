"""Redis memory and CPU of the dedupe ids, per layout, in one run.

Usage (from the repository root; ``lb up`` need not run)::

    .venv/bin/python -m bench.dedupe                       # 384,000 events, 3 rounds
    .venv/bin/python -m bench.dedupe --events 100000 --rounds 1 --no-doc

The Zipf shape (``bench.workloads``: Zipf s=1.1 over 1M players, live record
times, 1% duplicates, 1% bad records), decoded and verified once, then written
by the job's own per-batch path (``BoardPlanner``, ``RedisBoardStore``, its Lua
group write; one read and one write round trip per batch of ``LB_BATCH_MAX``
records of one partition, as ``bench.cpu``) into a private ``redis-server``
(``lb up``'s configuration: AOF ``everysec``; a free loopback port; stopped
after), flushed before each pass, once per layout and round, the layouts
alternating:

* ``full ids``: one hash per record-time bucket, event id -> record time
  (``SeenLayout`` with ``split`` 0; what the job wrote before fingerprints);
* ``fingerprints, default split``: the default layout, sized for 20,000
  events/s per group (262,144 bags per 300 s bucket): this run's ids spread
  over as many bags as the planned rate's would, but each bag holds only
  this run's one or two ids (the memory of a group far below its planned
  rate);
* ``fingerprints, planned fill``: bags sized as the default sizing would for
  a group whose horizon holds this run's ids (16,384 bags, ~23 ids each with
  the default ``--events``, as 20,000 events/s fill the default layout's):
  the steady state at the planned rate, whose memory per id depends only on
  that fill.

Every record time lies in one 300 s bucket. Per pass: the job's CPU per event
(this process: plan, encode, both round trips, commit; not decode + verify),
Redis' CPU per event (``INFO cpu``), Redis' commands per event by name
(``INFO commandstats``, the Lua script's own calls included), and the bytes
per stored id: ``used_memory`` before minus after deleting the dedupe keys
(everything they cost: keys, expiries, allocator rounding), and ``MEMORY
USAGE`` summed over them. The median of the rounds is reported, with the
ratio of each layout to full ids; the counters must equal the stream's
expected outcomes. JSON on stdout; the table replaces the ``bench.dedupe``
section of docs/BENCHMARKS.md (unless ``--no-doc``).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    base_settings,
    counted,
    log,
    machine,
    machine_line,
    publish,
    table,
)
from bench.workloads import shape
from config.heap import collector_paused, tune_for_streaming
from domain.games import GameCatalog
from domain.planner import BoardPlanner, LookupResults, PlanRound
from domain.planner.dedupe import BAG_FILL, SeenLayout, split_for
from domain.records import CheckedBatch, RecordBatch, SourceRecord
from domain.signing import parse_keyring
from domain.validation import Validator
from infra.process import stop_pid
from infra.redis import RedisNode, start_node
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import decode_verifier, native_module
from sinks.boards import RedisBoardStore

SECTION = "bench.dedupe"
PARTITIONS = 4
HORIZON_MS = 300_000
PLAYERS = 1_000_000
#: Commands reported per event (``INFO commandstats`` names).
COMMANDS = ("evalsha", "hmget", "hset", "expire", "zmscore", "zadd")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def checked_batches(events: int, batch_max: int) -> tuple[list[CheckedBatch], int]:
    """The Zipf stream's batches, decoded and verified; and the records the counters must total."""
    settings = base_settings()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    now = (datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    start = now // HORIZON_MS * HORIZON_MS - HORIZON_MS + 1_000  # one whole bucket ahead
    log(f"zipf: generating {events:,} records")
    generated = list(
        shape("zipf").records(keyring, ScoreEventCodec.from_registry(), start, events, PLAYERS)
    )
    expected = sum(1 for item in generated if item.expected in ("ok", "duplicate"))
    by_partition: dict[int, list[SourceRecord]] = defaultdict(list)
    for item in generated:
        records = by_partition[zlib.crc32(item.key) % PARTITIONS]
        records.append(SourceRecord(len(records), item.timestamp_ms, item.key, item.value))
    engine = "native" if native_module() is not None else "python"
    validator = Validator(GameCatalog.builtin(), decode_verifier(keyring, engine=engine))
    out: list[CheckedBatch] = []
    longest = max(len(records) for records in by_partition.values())
    for at in range(0, longest, batch_max):
        for partition in sorted(by_partition):
            chunk = by_partition[partition][at : at + batch_max]
            if chunk:
                batch = validator.check_batch(RecordBatch("t", partition, tuple(chunk)))
                if batch.accepted:
                    out.append(batch)
    return out, expected


def _commandstats(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in COMMANDS}


def _redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _seen_memory(client: redis.Redis, namespace: str, ids: int) -> dict[str, Any]:
    """The dedupe keys' bytes per id kept, by MEMORY USAGE and by ``used_memory`` freed."""
    keys = list(client.scan_iter(match=f"{namespace}:*meta:seen:*", count=10_000))
    fields = usage = 0
    encodings: dict[str, int] = defaultdict(int)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hlen(key)
        pipe.memory_usage(key, samples=0)
        pipe.object("encoding", key)
    answers = pipe.execute()
    for at in range(0, len(answers), 3):
        fields += int(answers[at])
        usage += int(answers[at + 1] or 0)
        encodings[answers[at + 2].decode()] += 1
    before = int(client.info("memory")["used_memory"])
    for at in range(0, len(keys), 1000):
        client.delete(*keys[at : at + 1000])
    freed = before - int(client.info("memory")["used_memory"])
    return {
        "keys": len(keys),
        "fields": fields,
        "ids": ids,
        "encodings": dict(encodings),
        "bytes_per_id_used_memory": round(freed / ids, 1) if ids else None,
        "bytes_per_id_memory_usage": round(usage / ids, 1) if ids else None,
    }


def one_pass(
    client: redis.Redis, batches: list[CheckedBatch], layout: SeenLayout, expected: int
) -> dict[str, Any]:
    """The batches into a flushed Redis with ``layout``: CPU, commands and memory per event."""
    client.flushall()
    namespace = "bench-dedupe"
    planner = BoardPlanner(namespace, HORIZON_MS, 2_000_000, dedupe_layout=layout)
    store = RedisBoardStore(client)
    calls0, redis0 = _commandstats(client), _redis_cpu_s(client)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for batch in batches:
        with collector_paused():  # as the job's board sink
            round_ = PlanRound(planner, [batch])
            got = store.read_many(round_.lookups) if round_.lookups[0] else [LookupResults()]
            plans = round_.plan(got)
            store.apply_many(plans)
            round_.commit()
            del round_, got, plans  # freed inside, as the sink's round (bench/cpu.py)
    job_s, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    redis_s = _redis_cpu_s(client) - redis0
    calls1 = _commandstats(client)
    total, stats = counted(client, namespace)
    n = sum(len(batch.accepted) for batch in batches)
    kept = stats.get("applied", 0) + stats.get("noop", 0)  # each keeps its id
    return {
        "events": n,
        "verified": total == expected,
        "duplicates": stats.get("duplicate", 0),
        "seconds": round(wall, 2),
        "job_cpu_us_per_event": round(1e6 * job_s / n, 2),
        "redis_cpu_us_per_event": round(1e6 * redis_s / n, 2),
        "commands_per_event": {
            name: round((calls1[name] - calls0[name]) / n, 3) for name in COMMANDS
        },
        "memory": _seen_memory(client, namespace, kept),
    }


def _median(passes: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for one in passes:
        value: Any = one
        for name in path:
            value = value[name]
        if value is not None:
            values.append(float(value))
    return round(statistics.median(values), 2) if values else None


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per layout: the median of its rounds, and the ratio to full ids."""
    out: dict[str, Any] = {}
    for name, passes in runs.items():
        out[name] = {
            "job_cpu_us_per_event": _median(passes, "job_cpu_us_per_event"),
            "redis_cpu_us_per_event": _median(passes, "redis_cpu_us_per_event"),
            "bytes_per_id_used_memory": _median(passes, "memory", "bytes_per_id_used_memory"),
            "bytes_per_id_memory_usage": _median(passes, "memory", "bytes_per_id_memory_usage"),
            "commands_per_event": {
                cmd: _median(passes, "commands_per_event", cmd) for cmd in COMMANDS
            },
            "keys": passes[-1]["memory"]["keys"],
            "ids": passes[-1]["memory"]["ids"],
            "encodings": passes[-1]["memory"]["encodings"],
        }
    base = out[next(iter(out))]
    for row in out.values():
        for metric in ("job_cpu_us_per_event", "redis_cpu_us_per_event"):
            if base[metric] and row[metric] is not None:
                row[metric.replace("_us_per_event", "_ratio")] = round(
                    row[metric] / base[metric], 2
                )
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The section of docs/BENCHMARKS.md."""
    rows = []
    for name, row in summary["layouts"].items():
        calls = row["commands_per_event"]
        rows.append(
            [
                name,
                f"{row['split']:,}" if row["split"] else "-",
                f"{row['keys']:,}",
                f"{row['bytes_per_id_used_memory']}",
                f"{row['bytes_per_id_memory_usage']}",
                f"{row['job_cpu_us_per_event']} ({row.get('job_cpu_ratio')}x)",
                f"{row['redis_cpu_us_per_event']} ({row.get('redis_cpu_ratio')}x)",
                " / ".join(f"{calls[c]}" for c in ("hmget", "hset", "expire")),
            ]
        )
    return "\n".join(
        [
            "## Dedupe ids: memory and CPU per layout (`bench.dedupe`)",
            "",
            machine_line(summary["machine"]),
            "",
            f"`python -m bench.dedupe --events {summary['events']} --rounds {summary['rounds']}`: "
            f"{summary['accepted']:,} accepted Zipf events (1% duplicates) in one 300 s bucket, "
            "written by the job's per-batch path into a private Redis (AOF everysec), "
            f"each layout {summary['rounds']} times alternating, medians. Bytes per id: "
            "`used_memory` freed by deleting the dedupe keys / ids (and `MEMORY USAGE`). "
            "CPU: this process's plan + encode + round trips + commit (not decode) and "
            "Redis' `INFO cpu`, per event, with the ratio to full ids.",
            "",
            table(
                [
                    "layout",
                    "bags per bucket",
                    "keys",
                    "B per id (used_memory)",
                    "B per id (MEMORY USAGE)",
                    "job CPU us/event",
                    "Redis CPU us/event",
                    "HMGET / HSET / EXPIRE per event",
                ],
                rows,
            ),
            "",
            "The planned-fill row is the steady state at the planned rate (20,000 events/s per "
            f"group put ~23 ids in each bag, at most {BAG_FILL}); the default-split row "
            "spreads this run's ids over as many bags as that rate would, each holding only "
            "one or two. The CPU the fingerprints add: BLAKE2b of each id in Python, the bags "
            "read whole (~200 bytes at the planned fill) and searched by the job, and "
            "rewritten whole by the Lua write (an `HMGET` and an `HSET` per hash).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Every layout, ``--rounds`` times alternating; JSON on stdout, exit 1 if unverified."""
    parser = argparse.ArgumentParser(prog="python -m bench.dedupe", description=__doc__)
    parser.add_argument("--events", type=int, default=384_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.events < 1000 or args.rounds < 1:
        print("--events must be at least 1000 and --rounds at least 1", file=sys.stderr)
        return 2
    tune_for_streaming()
    batches, expected = checked_batches(args.events, base_settings().batch_max)
    accepted = sum(len(batch.accepted) for batch in batches)
    layouts = {
        "full ids": SeenLayout.sized(HORIZON_MS, 0),
        "fingerprints, default split": SeenLayout.sized(HORIZON_MS),
        # Sized as if this run's ids were one horizon of a group's events.
        "fingerprints, planned fill": SeenLayout(
            HORIZON_MS, split_for(accepted * 1000 // HORIZON_MS, HORIZON_MS)
        ),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory(prefix="bench-dedupe-") as home:
        node = RedisNode(Path(home), _free_port())
        pid = start_node(node)
        try:
            client = redis.Redis(port=node.port)
            for round_no in range(args.rounds):
                for name, layout in layouts.items():
                    one = one_pass(client, batches, layout, expected)
                    log(
                        f"round {round_no + 1} {name}: job {one['job_cpu_us_per_event']} us, "
                        f"Redis {one['redis_cpu_us_per_event']} us per event, "
                        f"{one['memory']['bytes_per_id_used_memory']} B per id"
                        + ("" if one["verified"] else " UNVERIFIED")
                    )
                    runs[name].append(one)
            client.close()
        finally:
            stop_pid(pid)
    layouts_out = summarize(runs)
    for name, layout in layouts.items():
        layouts_out[name]["split"] = layout.split
    summary: dict[str, Any] = {
        "benchmark": "dedupe",
        "events": args.events,
        "accepted": accepted,
        "rounds": args.rounds,
        "machine": machine(),
        "layouts": layouts_out,
        "passes": runs,
    }
    verified = all(one["verified"] for passes in runs.values() for one in passes)
    return publish(SECTION, summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    raise SystemExit(main())
