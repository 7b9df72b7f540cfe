"""The least Redis work a rebuild of N players costs on one node: its floor.

A rebuild (``lb rebuild``, one record per player as ``bench.rebuild`` makes
them) must at least add every player as a new member of each of the game's
boards. Redis is single-threaded, so the seconds it spends executing exactly
those inserts (``INFO commandstats``), with nothing else (no Lua, no dedupe ids, no counters, no
watermarks), bound what any replay can reach on one node, however fast the
replayer. This script measures that: ``--boards`` fresh sorted sets filled
with N members each, in pipelined multi-element ``ZADD`` calls of
``CHUNK`` members (the shape of the job's writes), counting Redis' own
time in ``ZADD`` and the wall time. Compare it with the Redis CPU and the time of
a real rebuild of the same N (``bench.backfill``'s table).

Usage (the services up: ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.redis_floor                      # 1M and 10M players
    .venv/bin/python -m bench.redis_floor --players 1000000 --order random sorted
    .venv/bin/python -m bench.redis_floor --players 10000000 --scores rebuild --order random

Progress on stderr, a JSON summary on stdout; writes no doc section
(docs/BENCHMARKS.md quotes it with this command). Its keys live in a
throwaway namespace, deleted at the end or on SIGTERM.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid

from adapters.redis import RedisClient
from bench.common import Scratch, base_settings, emit, log, machine
from bench.rebuild import SPREAD_MS, player_scores
from domain.games import GameConfig
from domain.windows import Window, WindowKind

#: Members per ZADD, and ZADDs per pipelined round trip.
CHUNK = 5_000
PER_TRIP = 10


def _redis_cpu_s(client: RedisClient) -> float:
    """Seconds Redis spent executing ZADD (``INFO commandstats``).

    Not ``used_cpu_*``: that counts the whole process, its lazy-free thread
    too, which may still be freeing another run's boards. Run it on a Redis
    no one else writes sorted sets to.
    """
    stats = client.info("commandstats").get("cmdstat_zadd", {})
    return float(stats.get("usec", 0)) / 1e6


def _rebuild_values(players: int, seed: int) -> list[int]:
    """The all-time board values of ``bench.rebuild``'s input, in its log order.

    Scores and event times drawn as ``bench.rebuild`` draws them
    (:func:`bench.rebuild.player_scores`), packed by the built-in game's codec
    as the job packs them: clustered, tied scores with a time tie-break, not
    uniform numbers.
    """
    codec = GameConfig().codec(Window(WindowKind.ALLTIME, "alltime", None, None))
    start_ms = int(time.time() * 1000) - SPREAD_MS
    return [codec.encode(score, ts_ms) for score, ts_ms in player_scores(players, seed, start_ms)]


def _members(players: int, seed: int, order: str, scores: str = "uniform") -> list[tuple[str, int]]:
    """Every (player, value), in the insert order asked for.

    ``random``: as drawn; ``chunk-sorted``: ascending within each ``ZADD`` (what a
    writer that sorts each call's members sends); ``sorted``: ascending overall (a
    replay that could order the whole log first). ``scores``: ``uniform`` values
    below 2**50, or ``rebuild``: what ``bench.rebuild``'s input puts on a board.
    """
    if scores == "rebuild":
        values = _rebuild_values(players, seed)
    else:
        rng = random.Random(seed)
        values = [rng.randrange(1, 2**50) for _ in range(players)]
    members = [(f"p{i:08d}", value) for i, value in enumerate(values)]
    if order == "sorted":
        members.sort(key=lambda m: m[1])
    elif order == "chunk-sorted":
        for start in range(0, players, CHUNK):
            members[start : start + CHUNK] = sorted(
                members[start : start + CHUNK], key=lambda m: m[1]
            )
    return members


def fill(
    client: RedisClient,
    keys: list[str],
    players: int,
    seed: int,
    order: str = "random",
    scores: str = "uniform",
) -> dict[str, float]:
    """Every player into every key, in ``order`` of score; Redis CPU and wall seconds."""
    members = _members(players, seed, order, scores)
    cpu0, wall0 = _redis_cpu_s(client), time.perf_counter()
    step = max(CHUNK * PER_TRIP, players // 10)
    for first in range(0, players, CHUNK * PER_TRIP):
        pipe = client.pipeline(transaction=False)
        for start in range(first, min(players, first + CHUNK * PER_TRIP), CHUNK):
            chunk = dict(members[start : min(players, start + CHUNK)])
            for key in keys:
                pipe.zadd(key, chunk)
        pipe.execute()
        if (first + CHUNK * PER_TRIP) % step == 0:
            log(f"{min(players, first + CHUNK * PER_TRIP):,}/{players:,} players")
    return {
        "redis_cpu_s": round(_redis_cpu_s(client) - cpu0, 2),
        "wall_s": round(time.perf_counter() - wall0, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure the floor for each player count; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.redis_floor", description=__doc__)
    parser.add_argument("--players", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--boards", type=int, default=3, help="boards per player (default 3)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--order",
        nargs="+",
        choices=("random", "chunk-sorted", "sorted"),
        default=["random"],
        help="insert order of scores: as a replay meets them, ascending within each ZADD, "
        "or ascending overall (default random)",
    )
    parser.add_argument(
        "--scores",
        choices=("uniform", "rebuild"),
        default="uniform",
        help="uniform values below 2**50, or the values bench.rebuild's input puts on a "
        "board (log-normal scores, ties broken by time; default uniform)",
    )
    args = parser.parse_args(argv)
    if min(args.players) <= 0 or args.boards <= 0:
        parser.error("--players and --boards must be positive")
    info = machine()
    sizes = []
    with Scratch(base_settings(), f"bench-floor-{uuid.uuid4().hex[:10]}") as scratch:
        ns = scratch.namespace(scratch.prefix)
        for players in args.players:
            for order in args.order:
                keys = [f"{ns}:{{g}}:board{b}:{players}" for b in range(args.boards)]
                log(f"{players:,} players into {args.boards} fresh sorted sets, {order} order")
                got = fill(scratch.redis, keys, players, args.seed, order, args.scores)
                per = got["redis_cpu_s"] / players * 1e6
                log(f"{players:,} {order}: Redis CPU {got['redis_cpu_s']} s ({per:.2f} us/player)")
                sizes.append(
                    {
                        "players": players,
                        "order": order,
                        "scores": args.scores,
                        **got,
                        "redis_cpu_us_per_player": round(per, 2),
                    }
                )
                scratch.redis.unlink(*keys)  # freed in the background: DEL of 10M blocks
    emit(
        {
            "benchmark": "redis_floor",
            "command": ".venv/bin/python -m bench.redis_floor "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": info,
            "args": vars(args),
            "sizes": sizes,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
