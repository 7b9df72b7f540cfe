"""How Redis' cost of adding a member grows with the sorted set: why rebuilds scale superlinearly.

A rebuild writes every player as a new member of three boards, so its speed is
bounded by what one new member costs Redis, and that cost is not constant: a
sorted set is a skip list plus a hash table, and past a few million members
nearly every insert misses the CPU caches. This script measures it in one run,
as a ratio: the same number of new members (random composites, pipelined
multi-element ``ZADD`` like the job's writes) added to a small set and to a
large one, alternately, a few rounds.

Usage (the services up: ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.zadd_scaling                  # 0.5M vs 9.5M members, ~3 min
    .venv/bin/python -m bench.zadd_scaling --large 2000000  # a smaller large set

Prints progress on stderr and a JSON summary on stdout; writes no doc section
(docs/BENCHMARKS.md quotes it by hand, with this command). Its keys live in a
throwaway namespace, deleted at the end or on SIGTERM.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid

from adapters.redis import RedisClient
from bench.common import Scratch, base_settings, emit, log, machine

#: Members per ZADD and ZADDs per pipelined round trip (the shape of a load).
CHUNK = 5_000
PER_TRIP = 20


def _add(client: RedisClient, key: str, prefix: str, count: int, rng: random.Random) -> float:
    """Add ``count`` new members to ``key``; Redis-side and client time in us per member.

    The commands are built before the clock starts, so only sending them and
    Redis' work are timed.
    """
    chunks = [
        {f"{prefix}{j}": rng.randrange(1, 2**50) for j in range(i, min(count, i + CHUNK))}
        for i in range(0, count, CHUNK)
    ]
    started = time.perf_counter()
    for first in range(0, len(chunks), PER_TRIP):
        pipe = client.pipeline(transaction=False)
        for chunk in chunks[first : first + PER_TRIP]:
            pipe.zadd(key, chunk)
        pipe.execute()
    return (time.perf_counter() - started) / count * 1e6


def main(argv: list[str] | None = None) -> int:
    """Fill both sets, then time the same inserts into each, alternately."""
    parser = argparse.ArgumentParser(prog="python -m bench.zadd_scaling", description=__doc__)
    parser.add_argument("--small", type=int, default=500_000, help="members of the small set")
    parser.add_argument("--large", type=int, default=9_500_000, help="members of the large set")
    parser.add_argument("--insert", type=int, default=500_000, help="new members per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    if not 0 < args.small < args.large or args.insert <= 0 or args.rounds <= 0:
        parser.error("need 0 < --small < --large and positive --insert and --rounds")
    rng = random.Random(args.seed)
    info = machine()
    with Scratch(base_settings(), f"bench-zadd-{uuid.uuid4().hex[:10]}") as scratch:
        ns = scratch.namespace(scratch.prefix)
        small, large = f"{ns}:small", f"{ns}:large"
        client = scratch.redis
        log(f"filling {small} with {args.small:,} and {large} with {args.large:,} members")
        _add(client, small, "s", args.small, rng)
        _add(client, large, "l", args.large, rng)
        rounds = []
        for n in range(args.rounds):
            # Alternate which goes first, so drift on a shared machine hits both.
            order = [(small, "small"), (large, "large")]
            if n % 2:
                order.reverse()
            costs = {name: _add(client, key, f"r{n}", args.insert, rng) for key, name in order}
            # Put the small set back to its size, so every round compares the same sizes.
            client.zremrangebyrank(small, 0, args.insert - 1)
            costs["ratio"] = costs["large"] / costs["small"]
            rounds.append({k: round(v, 2) for k, v in costs.items()})
            log(
                f"round {n + 1}: us per new member: {args.small:,}-member set "
                f"{costs['small']:.2f}, {args.large:,}-member set {costs['large']:.2f} "
                f"({costs['ratio']:.2f}x)"
            )
        median = statistics.median(r["ratio"] for r in rounds)
        log(f"median ratio {median:.2f}x")
    emit(
        {
            "benchmark": "zadd_scaling",
            "command": ".venv/bin/python -m bench.zadd_scaling "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": info,
            "args": vars(args),
            "rounds": rounds,
            "median_ratio": round(median, 2),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
