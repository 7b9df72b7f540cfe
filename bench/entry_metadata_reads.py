"""What entry metadata costs the reads: metadata off, a board without it, a board with it, same run.

Three games of one namespace hold the same 100,000-member all-time board:
one with ``metadata_max_bytes = 0`` (the readers never look for metadata),
one with the default and no metadata hash, one with the default and
metadata on the top 1,000 entries. ``top`` (10), ``rank`` and ``around``
(k = 5) are called in turn on each, several rounds alternating the order, and
the median and p99 latency per read and game are printed with the ratio of
each to the metadata-off game. Loopback Redis from ``lb up``; nothing is
asserted on timings.

    .venv/bin/python -m bench.entry_metadata_reads            # 3 rounds x 2,000 calls
    .venv/bin/python -m bench.entry_metadata_reads --calls 500 --rounds 1
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import redis

from config.settings import Settings
from domain.games import GameCatalog
from readers.boards import BoardReader

MEMBERS = 100_000
WITH_METADATA = 1_000
GAMES = {"off": "mdoff", "none": "mdnone", "some": "mdsome"}
CATALOG = '[games."mdoff"]\nmetadata_max_bytes = 0\n[games."mdnone"]\n[games."mdsome"]\n'


def _timings(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median and p99 of ``calls`` calls, in microseconds."""
    spent = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    spent.sort()
    return spent[calls // 2] * 1e6, spent[int(0.99 * calls)] * 1e6


def main(argv: list[str] | None = None) -> int:
    """Fill the three boards, time the reads, print the table; the keys are deleted after."""
    parser = argparse.ArgumentParser(prog="python -m bench.entry_metadata_reads")
    parser.add_argument("--calls", type=int, default=2000, help="calls per read, game and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(Settings.from_env().redis_url.reveal())
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    reader = BoardReader(client, GameCatalog.from_toml(CATALOG), namespace)
    reads: dict[str, Callable[[str], object]] = {
        "top 10": lambda g: reader.top(g, "alltime", 10, now_ms=0),
        "rank": lambda g: reader.rank(g, "p99995", "alltime", now_ms=0),
        "around 5": lambda g: reader.around(g, "p99995", "alltime", 5, now_ms=0),
    }
    try:
        board = {f"p{i}": i * 1000 for i in range(MEMBERS)}
        for game in GAMES.values():
            client.zadd(f"{namespace}:{{{game}}}:alltime", board)
        top = range(MEMBERS - WITH_METADATA, MEMBERS)
        client.hset(
            f"{namespace}:{{{GAMES['some']}}}:meta:entry:alltime",
            mapping={f"p{i}": f"car-{i}" for i in top},
        )
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            order = list(GAMES.items())
            if round_ % 2:
                order.reverse()
            for name, read in reads.items():
                for kind, game in order:
                    results.setdefault((name, kind), []).append(
                        _timings(lambda r=read, g=game: r(g), args.calls)  # type: ignore[misc]
                    )
        print(f"{'read':10s} {'metadata':26s} {'median us':>10s} {'p99 us':>9s} {'ratio':>6s}")
        labels = {
            "off": "off (max_bytes 0)",
            "none": "on, board has none",
            "some": "on, entries have it",
        }
        for name in reads:
            base = min(m for m, _ in results[(name, "off")])
            for kind in GAMES:
                median = min(m for m, _ in results[(name, kind)])
                p99 = min(p for _, p in results[(name, kind)])
                print(
                    f"{name:10s} {labels[kind]:26s} {median:10.0f} {p99:9.0f} {median / base:6.2f}"
                )
    finally:
        for key in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.delete(key)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
