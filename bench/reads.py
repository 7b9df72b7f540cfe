"""Read latency through the Python API at 1M and 10M players.

Usage (from the repository root)::

    .venv/bin/python -m bench.reads [--players 1000000 10000000] [--calls 2000]

Writes an all-time board of N players (log-normal scores, composites computed
with the game's codec, pipelined ZADD) into a throwaway namespace, gives one
player 200 friends, then times ``top`` (10), ``rank``, ``around`` (k=5) and the
friends board (cache miss and hit) through :mod:`readers`, one call at a time
on one connection, and deletes the namespace. Reports p50/p99 in ms.
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    fmt_int,
    log,
    machine,
    machine_line,
    percentile,
    run_id,
    table,
    write_section,
)
from domain.games import GameCatalog, GameConfig
from domain.windows import WindowKind, window_for
from lb.clients import redis_client
from lb.settings import Settings
from readers.boards import BoardReader
from readers.friends import FriendsReader

GAME = "g1"
CHUNK = 20_000


def _fill(client: Any, key: str, players: int, rng: random.Random, codec: Any, ts_ms: int) -> None:
    started = time.monotonic()
    for at in range(0, players, CHUNK):
        members = {}
        for i in range(at, min(players, at + CHUNK)):
            score = min(9_999_999, int(rng.lognormvariate(7.0, 1.5)))
            members[f"p{i:08d}"] = codec.encode(score, ts_ms - rng.randrange(86_400_000))
        client.zadd(key, members)
        if at % 1_000_000 == 0 and at:
            log(f"  {at:,} players written ({time.monotonic() - started:.0f}s)")


def _time(calls: int, fn: Any) -> dict[str, float | None]:
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99)}


def measure(players: int, calls: int, settings: Settings) -> dict[str, Any]:
    """Latencies of every read on a board of ``players``."""
    namespace = f"bench-reads-{run_id()}"
    client = redis_client(settings)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    window = window_for(WindowKind.ALLTIME, now_ms)
    game = GameConfig()
    key = f"{namespace}:{{{GAME}}}:{window.id}"
    rng = random.Random(players)
    try:
        log(f"writing {players:,} players into {key}")
        _fill(client, key, players, rng, game.codec(window), now_ms)
        catalog = GameCatalog.builtin()
        boards = BoardReader(client, catalog, namespace)
        friends = FriendsReader(client, catalog, namespace, rng=random.Random(1))
        friends.add(GAME, "p00000001", [f"p{rng.randrange(players):08d}" for _ in range(200)])
        pick = [f"p{rng.randrange(players):08d}" for _ in range(calls)]
        out = {
            "top-10": _time(calls, lambda i: boards.top(GAME, "alltime", 10, now_ms=now_ms)),
            "rank": _time(calls, lambda i: boards.rank(GAME, pick[i], "alltime", now_ms=now_ms)),
            "around k=5": _time(
                calls, lambda i: boards.around(GAME, pick[i], "alltime", 5, now_ms=now_ms)
            ),
        }
        cache = f"{namespace}:{{{GAME}}}:friendsboard:p00000001"

        def miss(i: int) -> None:
            client.delete(cache)
            friends.board(GAME, "p00000001", "alltime", now_ms=now_ms)

        out["friends 200, cache miss (incl. a DEL)"] = _time(min(calls, 500), miss)
        out["friends 200, cache hit"] = _time(
            calls, lambda i: friends.board(GAME, "p00000001", "alltime", now_ms=now_ms)
        )
        out["redis_bytes_per_player"] = client.memory_usage(key, samples=0) / players
        return out
    finally:
        for stale in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.unlink(stale)  # a 10M-member set frees in the background


def main() -> None:
    """Run and write the ``bench.reads`` section of docs/BENCHMARKS.md."""
    parser = argparse.ArgumentParser(prog="python -m bench.reads")
    parser.add_argument("--players", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    settings = Settings.from_env()
    info = machine()
    results = {n: measure(n, args.calls, settings) for n in args.players}
    names = [k for k in next(iter(results.values())) if k != "redis_bytes_per_player"]
    rows = []
    for name in names:
        cells = [name]
        for n in args.players:
            r = results[n][name]
            cells += [f"{r['p50']:.2f}", f"{r['p99']:.2f}"]
        rows.append(cells)
    header = ["read"] + [f"{h} @ {fmt_int(n)}" for n in args.players for h in ("p50 ms", "p99 ms")]
    body = "\n".join(
        [
            "## Read latency through the Python API (`bench/reads.py`)",
            "",
            f"Command: `python -m bench.reads --players {' '.join(map(str, args.players))}"
            f" --calls {args.calls}`",
            "",
            f"Machine: {machine_line(info)}",
            "",
            "One call at a time on one connection to the local standalone Redis; the board is",
            "an all-time board of log-normal scores; `rank`/`around` pick random players.",
            "",
            table(header, rows),
            "",
            "Redis memory per player on the board (`MEMORY USAGE`): "
            + ", ".join(
                f"{fmt_int(n)}: {results[n]['redis_bytes_per_player']:.0f} B" for n in args.players
            ),
        ]
    )
    print(body)
    if not args.no_doc:
        write_section("bench.reads", body)


if __name__ == "__main__":
    main()
