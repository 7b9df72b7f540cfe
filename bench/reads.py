"""Read latency at 1M and 10M players: this project's Redis readers against PostgreSQL.

Usage (from the repository root)::

    .venv/bin/python -m bench.reads [--players 1000000 10000000] [--calls 2000]
    .venv/bin/python -m bench.reads --no-postgres      # Redis only

For each player count N it generates one all-time board (log-normal scores,
composites from the game's codec, so ties break by time as in the job) and
loads the *same* rows into both stores:

* Redis: pipelined ``ZADD`` into a throwaway namespace, read through
  :mod:`readers` (``top`` 10, ``rank``, ``around`` k=5, the friends board of a
  player with 200 friends, cache miss and hit);
* PostgreSQL (:mod:`bench.postgres`, a fresh local server): ``COPY`` into
  ``board(player text collate "C" primary key, composite bigint)`` with a btree
  index on ``(composite, player)`` (the sorted set's order: composite, then
  player, both descending), then ``VACUUM ANALYZE`` so counts can be answered
  from the index alone. The obvious SQL: ``ORDER BY ... LIMIT`` for the top,
  ``count(*)`` of the rows ahead for a rank, the rank plus keyset pages for
  around, ``player = ANY(...)`` for friends; prepared statements.

Both sides are timed one call at a time on one connection from this Python
process, on the same random players. PostgreSQL's calls per read are bounded
by ``--calls`` and ``--pg-seconds`` (a rank at 10M players is slow), and the
report says how many were timed. Before publishing, PostgreSQL's answers are
checked against Redis for sample players (top-10, rank, around, friends);
a mismatch fails the run. Storage per player: ``MEMORY USAGE`` of the Redis
key, ``pg_total_relation_size`` of the table with its indexes. Results
replace the ``bench.reads`` section of ``docs/BENCHMARKS.md``; JSON on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from array import array
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.common import (
    GAME,
    fmt_int,
    fmt_ratio,
    log,
    machine,
    machine_line,
    percentile,
    publish,
    run_id,
    table,
)
from bench.postgres import postgres_server
from domain.games import GameCatalog, GameConfig
from domain.windows import WindowKind, window_for
from lb.clients import redis_client
from lb.settings import Settings
from readers.boards import BoardReader
from readers.friends import FriendsReader

CHUNK = 20_000
FRIENDS = 200
K = 5
CHECKS = 20
SECTION = "bench.reads"
#: Reads compared with PostgreSQL, and the Redis-only extra.
COMPARED = ("top-10", "rank", "around k=5", "friends 200")

TOP_SQL = "SELECT player FROM board ORDER BY composite DESC, player DESC LIMIT 10"
#: The player's own (composite, player): the row every rank and page is keyed on.
_ME = "((SELECT composite FROM board WHERE player = %(p)s), %(p)s)"
RANK_SQL = f"SELECT count(*) + 1 FROM board WHERE (composite, player) > {_ME}"
AROUND_SQL = f"""
SELECT
  (SELECT count(*) FROM board WHERE (composite, player) > {_ME}) + 1,
  ARRAY(SELECT player FROM board WHERE (composite, player) > {_ME}
        ORDER BY composite, player LIMIT %(k)s),
  ARRAY(SELECT player FROM board WHERE (composite, player) < {_ME}
        ORDER BY composite DESC, player DESC LIMIT %(k)s)
"""
FRIENDS_SQL = """
SELECT player, composite FROM board WHERE player = ANY(%s)
ORDER BY composite DESC, player DESC
"""


def _player(i: int) -> str:
    return f"p{i:08d}"


def _board_values(players: int, codec: Any, now_ms: int) -> array[int]:
    """Every player's composite (index = player number), drawn once for both stores."""
    rng = random.Random(players)
    values = array("q")
    for _ in range(players):
        score = min(9_999_999, int(rng.lognormvariate(7.0, 1.5)))
        values.append(codec.encode(score, now_ms - rng.randrange(86_400_000)))
    return values


def _fill_redis(client: Any, key: str, values: array[int]) -> float:
    started = time.monotonic()
    for at in range(0, len(values), CHUNK):
        client.zadd(key, {_player(i): values[i] for i in range(at, min(len(values), at + CHUNK))})
    return time.monotonic() - started


def _fill_postgres(conn: psycopg.Connection[Any], values: array[int]) -> float:
    started = time.monotonic()
    conn.execute("DROP TABLE IF EXISTS board")
    conn.execute(
        'CREATE TABLE board (player text COLLATE "C" PRIMARY KEY, composite bigint NOT NULL)'
    )
    with conn.cursor() as cur, cur.copy("COPY board (player, composite) FROM STDIN") as copy:
        for at in range(0, len(values), CHUNK):
            end = min(len(values), at + CHUNK)
            copy.write("".join(f"{_player(i)}\t{values[i]}\n" for i in range(at, end)))
    conn.execute("CREATE INDEX board_rank ON board (composite, player)")
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE board")
    conn.autocommit = False
    return time.monotonic() - started


def _time(calls: int, budget_s: float, fn: Callable[[int], Any]) -> dict[str, Any]:
    """p50/p99 ms of up to ``calls`` calls, stopping early once ``budget_s`` is spent."""
    samples = []
    deadline = time.monotonic() + budget_s
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1000)
        if time.monotonic() > deadline:
            break
    samples.sort()
    return {
        "p50": percentile(samples, 50),
        "p99": percentile(samples, 99),
        "calls": len(samples),
    }


def _check(
    conn: psycopg.Connection[Any],
    client: Any,
    boards: BoardReader,
    key: str,
    sample: list[str],
    friends_of: list[str],
    now_ms: int,
) -> list[str]:
    """Where PostgreSQL and Redis disagree (empty: they agree)."""
    wrong = []
    redis_top = [m.decode() for m in client.zrevrange(key, 0, 9)]
    if [row[0] for row in conn.execute(TOP_SQL)] != redis_top:
        wrong.append("top-10")
    reader_top = [e["playerId"] for e in boards.top(GAME, "alltime", 10, now_ms=now_ms)["entries"]]
    if reader_top != redis_top:
        wrong.append("top-10 (reader)")
    for player in sample:
        rank = conn.execute(RANK_SQL, {"p": player}).fetchone()
        if rank is None or rank[0] != int(client.zrevrank(key, player)) + 1:
            wrong.append(f"rank of {player}")
        row = conn.execute(AROUND_SQL, {"p": player, "k": K}).fetchone()
        around = boards.around(GAME, player, "alltime", K, now_ms=now_ms)
        above = [e["playerId"] for e in around["above"]]
        below = [e["playerId"] for e in around["below"]]
        if row is None or (list(reversed(row[1])), list(row[2])) != (above, below):
            wrong.append(f"around {player}")
    scores = client.zmscore(key, friends_of)
    expected = [
        p
        for p, _ in sorted(
            ((p, int(s)) for p, s in zip(friends_of, scores, strict=True) if s is not None),
            key=lambda item: (item[1], item[0]),
            reverse=True,
        )
    ]
    if [row[0] for row in conn.execute(FRIENDS_SQL, (friends_of,))] != expected:
        wrong.append("friends")
    return wrong


def measure(
    players: int, args: argparse.Namespace, settings: Settings, dsn: str | None
) -> dict[str, Any]:
    """Both stores' latencies for every read on a board of ``players``."""
    namespace = f"bench-reads-{run_id()}"
    client = redis_client(settings)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    window = window_for(WindowKind.ALLTIME, now_ms)
    key = f"{namespace}:{{{GAME}}}:{window.id}"
    rng = random.Random(players + 1)
    log(f"{players:,} players: drawing the board")
    values = _board_values(players, GameConfig().codec(window), now_ms)
    friends_of = [_player(rng.randrange(players)) for _ in range(FRIENDS)]
    pick = [_player(rng.randrange(players)) for _ in range(args.calls)]
    result: dict[str, Any] = {"players": players, "load_s": {}}
    try:
        log(f"{players:,} players: loading Redis ({key})")
        result["load_s"]["redis"] = round(_fill_redis(client, key, values), 1)
        catalog = GameCatalog.builtin()
        boards = BoardReader(client, catalog, namespace)
        friends = FriendsReader(client, catalog, namespace, rng=random.Random(1))
        friends.add(GAME, "p00000001", friends_of)
        cache = f"{namespace}:{{{GAME}}}:friendsboard:p00000001"

        def miss(i: int) -> None:
            client.delete(cache)
            friends.board(GAME, "p00000001", "alltime", now_ms=now_ms)

        budget = float("inf")
        result["redis"] = {
            "top-10": _time(
                args.calls, budget, lambda i: boards.top(GAME, "alltime", 10, now_ms=now_ms)
            ),
            "rank": _time(
                args.calls,
                budget,
                lambda i: boards.rank(GAME, pick[i], "alltime", now_ms=now_ms),
            ),
            "around k=5": _time(
                args.calls,
                budget,
                lambda i: boards.around(GAME, pick[i], "alltime", K, now_ms=now_ms),
            ),
            "friends 200": _time(min(args.calls, 500), budget, miss),
            "friends 200, cache hit": _time(
                args.calls,
                budget,
                lambda i: friends.board(GAME, "p00000001", "alltime", now_ms=now_ms),
            ),
        }
        result["redis_bytes_per_player"] = round(
            int(client.memory_usage(key, samples=0)) / players, 1
        )
        log(f"{players:,} players: Redis {result['redis']}")
        if dsn is not None:
            with psycopg.connect(dsn, prepare_threshold=0) as conn:
                log(f"{players:,} players: loading PostgreSQL")
                result["load_s"]["postgres"] = round(_fill_postgres(conn, values), 1)
                size = conn.execute("SELECT pg_total_relation_size('board')").fetchone()
                result["postgres_bytes_per_player"] = round((size[0] if size else 0) / players, 1)
                wrong = _check(conn, client, boards, key, pick[:CHECKS], friends_of, now_ms)
                result["mismatches"] = wrong
                cap = args.pg_seconds
                result["postgres"] = {
                    "top-10": _time(args.calls, cap, lambda i: conn.execute(TOP_SQL).fetchall()),
                    "rank": _time(
                        args.calls, cap, lambda i: conn.execute(RANK_SQL, {"p": pick[i]}).fetchone()
                    ),
                    "around k=5": _time(
                        args.calls,
                        cap,
                        lambda i: conn.execute(AROUND_SQL, {"p": pick[i], "k": K}).fetchone(),
                    ),
                    "friends 200": _time(
                        min(args.calls, 500),
                        cap,
                        lambda i: conn.execute(FRIENDS_SQL, (friends_of,)).fetchall(),
                    ),
                }
                conn.execute("DROP TABLE board")
                conn.commit()
                log(f"{players:,} players: PostgreSQL {result['postgres']}")
        return result
    finally:
        for stale in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.unlink(stale)  # a 10M-member set frees in the background


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _markdown(summary: dict[str, Any]) -> str:
    rows = []
    for size in summary["sizes"]:
        pg = size.get("postgres") or {}
        for op, r in size["redis"].items():
            p = pg.get(op)
            rows.append(
                [
                    op,
                    fmt_int(size["players"]),
                    _ms(r["p50"]),
                    _ms(r["p99"]),
                    _ms(p["p50"]) if p else "-",
                    _ms(p["p99"]) if p else "-",
                    str(p["calls"]) if p else "-",
                    fmt_ratio(p["p50"] / r["p50"]) if p and r["p50"] else "-",
                ]
            )
    storage = "; ".join(
        f"{fmt_int(s['players'])} players: Redis {s['redis_bytes_per_player']:.0f} B"
        + (
            f", PostgreSQL {s['postgres_bytes_per_player']:.0f} B"
            if "postgres_bytes_per_player" in s
            else ""
        )
        + f" (load: Redis {s['load_s'].get('redis')} s"
        + (f", PostgreSQL {s['load_s']['postgres']} s" if "postgres" in s["load_s"] else "")
        + ")"
        for s in summary["sizes"]
    )
    header = [
        "read",
        "players",
        "Redis p50 ms",
        "Redis p99 ms",
        "PostgreSQL p50 ms",
        "PostgreSQL p99 ms",
        "PostgreSQL calls",
        "PostgreSQL / Redis (p50)",
    ]
    return f"""## Reads: Redis sorted sets against PostgreSQL with an index (`bench/reads.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

The same all-time board (log-normal scores, ties broken by time) in both stores;
one call at a time on one connection from Python, the same random players for
both. Redis is read through this project's readers (`rank` also computes the
player's percentile, `friends 200` is a cache miss including one `DEL`);
PostgreSQL runs the obvious SQL on a btree index over `(composite, player)` after
`VACUUM ANALYZE` (index-only scans), its calls bounded to {summary["args"]["calls"]:,}
or {summary["args"]["pg_seconds"]:g} s per read. PostgreSQL's top-10, ranks, around
pages and friends order were checked equal to Redis for {CHECKS} players first.

{table(header, rows)}

Bytes per player on one board — {storage}.

A rank in PostgreSQL counts the index entries ahead of the player, so it grows
with the player's position; `ZREVRANK` walks the skip list in O(log N).
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.reads", description=__doc__)
    parser.add_argument("--players", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--calls", type=int, default=2000, help="calls per read and size")
    parser.add_argument(
        "--pg-seconds", type=float, default=30.0, help="time budget per PostgreSQL read"
    )
    parser.add_argument("--no-postgres", action="store_true", help="Redis only")
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    info = machine()
    server: contextlib.AbstractContextManager[str | None] = (
        contextlib.nullcontext(None) if args.no_postgres else postgres_server()
    )
    with server as dsn:
        sizes = [measure(n, args, settings, dsn) for n in sorted(args.players)]
    summary: dict[str, Any] = {
        "benchmark": "reads",
        "command": (
            ".venv/bin/python -m bench.reads "
            + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "machine": info,
        "args": vars(args),
        "sizes": sizes,
    }
    verified = all(not size.get("mismatches") for size in sizes)
    for size in sizes:
        if size.get("mismatches"):
            log(f"{size['players']:,} players: PostgreSQL disagrees: {size['mismatches']}")
    return publish(SECTION, summary, _markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
