"""Read latency at 1M and 10M players: this project's Redis readers against PostgreSQL.

Usage (from the repository root, services up with ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.reads                      # 1M and 10M players (~15 min)
    .venv/bin/python -m bench.reads --players 1000000 --calls 500
    .venv/bin/python -m bench.reads --no-postgres        # Redis only

Issue #5 asks how the Redis sorted sets compare with "a database and an
index", which design articles say needs ~10 s for a rank at 10M players.
For each player count N this draws one all-time board of game ``g1``
(log-normal scores; achievement times on whole seconds within the last day,
the game's tie resolution; players 2-4 tied exactly) and loads the *same*
rows into both stores:

* Redis: ``ZADD`` of the game codec's composites, 20,000 members per command,
  into a throwaway namespace; read through :mod:`readers` (``top`` 10,
  ``rank``, ``around`` k=5, and the friends board of a player following 200
  others, a cache miss including the ``DEL`` that forces it, plus a cache hit);
* PostgreSQL (:mod:`bench.postgres`, a fresh server on 127.0.0.1): ``COPY`` into
  ``scores(player text collate "C" primary key, score bigint, achieved_ms
  bigint)``, a btree index on ``(score DESC, achieved_ms, player DESC)`` (the
  board's order: higher score, then earlier, then the greater playerId, as
  ``ZREVRANGE`` breaks exact ties), ``VACUUM ANALYZE`` so counts are
  index-only scans. The obvious SQL: ``ORDER BY ... LIMIT 10`` for the top,
  ``count(*)`` of the rows ahead of the player's row for a rank, that count
  plus the nearest rows on each side (keyset, ``LIMIT k``) for around, and
  ``player = ANY(...)`` for friends; prepared statements. Each answer is
  shaped like the reader's (rank, playerId, score lines).

Both sides run one call at a time on one connection from this process, on
the same random players, each read timed on Redis and then right away on
PostgreSQL so that both see about the same load of the shared machine.
PostgreSQL's calls per read stop at ``--calls`` or after ``--pg-seconds``
(a rank at 10M players is slow) and the report says how many were timed.

Before timing, PostgreSQL's answers must equal the readers' for sample
players (the top, random players, the last one, the tie group): top-10,
rank and score, around, friends board, and the row count; a mismatch skips
the timing and fails the run, so no comparison of different answers is ever
published. Also reported: load time of each store, and bytes per player
(``MEMORY USAGE`` of the Redis key; ``pg_total_relation_size`` of the table
with both indexes). Results replace the ``bench.reads`` section of
``docs/BENCHMARKS.md`` (unless ``--no-doc``); a JSON summary goes to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import signal
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from adapters.redis import RedisClient
from bench.common import (
    GAME,
    log,
    machine,
    machine_line,
    percentile,
    publish,
    run_id,
    table,
)
from bench.formatting import fmt_int, fmt_ratio
from bench.postgres import PORT, postgres_server
from config.clients import redis_client
from config.settings import Settings
from domain.games import GameCatalog, GameConfig
from domain.ranking import Entry
from domain.scoring import TieCodec
from domain.windows import WindowKind, window_for
from readers.boards import BoardReader
from readers.friends import FriendsReader, friends_cache_key

SECTION = "bench.reads"
#: Members per ``ZADD`` and rows per ``COPY`` write while loading.
CHUNK = 20_000
#: The player whose friends board is read, and how many players they follow.
OWNER = "p00000001"
FRIENDS = 200
#: Friends-board calls per size: a cache miss also writes the cache, so fewer.
FRIEND_CALLS = 500
#: Neighbours on each side for ``around``.
K = 5
#: Random players whose answers are compared between the stores (plus edge cases).
CHECKS = 20
#: Players 2..4 get player 2's score and time: an exact tie, ordered by playerId.
TIED = ("p00000002", "p00000003", "p00000004")
#: Time range of the drawn achievements (whole seconds back from now).
SPREAD_S = 86_400

#: (rank, playerId, score): one line of any answer, as both stores are compared.
Line = tuple[int | None, str, int]

# -- PostgreSQL: the table, the index a leaderboard needs, the obvious queries ----------

TABLE_SQL = """
CREATE TABLE scores (
  player text COLLATE "C" PRIMARY KEY,
  score bigint NOT NULL,
  achieved_ms bigint NOT NULL
)"""
#: Board order: higher score first, then the earlier achiever, then (an exact tie)
#: the greater playerId, byte order (collation "C"), as Redis orders equal scores.
INDEX_SQL = "CREATE INDEX scores_rank ON scores (score DESC, achieved_ms, player DESC)"
BOARD_ORDER = "s.score DESC, s.achieved_ms, s.player DESC"
UPWARD_ORDER = "s.score, s.achieved_ms DESC, s.player"
#: Rows strictly ahead of / behind ``me``. The first conjunct is the index range
#: (an index-only scan from the top, or from ``me``'s score down); the rest only
#: sorts out players with the same score.
AHEAD = (
    "s.score >= me.score AND (s.score > me.score OR s.achieved_ms < me.achieved_ms"
    " OR (s.achieved_ms = me.achieved_ms AND s.player > me.player))"
)
BEHIND = (
    "s.score <= me.score AND (s.score < me.score OR s.achieved_ms > me.achieved_ms"
    " OR (s.achieved_ms = me.achieved_ms AND s.player < me.player))"
)
TOP_SQL = f"SELECT s.player, s.score FROM scores s ORDER BY {BOARD_ORDER} LIMIT 10"
#: ``me`` is the player's row; LATERAL lets the inner query use it as an index bound.
_ME = "FROM scores me CROSS JOIN LATERAL ({}) x WHERE me.player = %(p)s"
_COUNT_AHEAD = f"SELECT count(*) AS ahead FROM scores s WHERE {AHEAD}"
RANK_SQL = "SELECT x.ahead + 1, me.score " + _ME.format(_COUNT_AHEAD)
_NEAREST_ABOVE = (
    f"SELECT s.player, s.score FROM scores s WHERE {AHEAD} ORDER BY {UPWARD_ORDER} LIMIT %(k)s"
)
_NEAREST_BELOW = (
    f"SELECT s.player, s.score FROM scores s WHERE {BEHIND} ORDER BY {BOARD_ORDER} LIMIT %(k)s"
)
#: Tagged rows: 0 = the player with their rank, -1 = above (nearest first), 1 = below.
AROUND_SQL = (
    f"SELECT 0, me.player, me.score, x.ahead + 1 {_ME.format(_COUNT_AHEAD)}"
    f" UNION ALL SELECT -1, x.player, x.score, NULL {_ME.format(_NEAREST_ABOVE)}"
    f" UNION ALL SELECT 1, x.player, x.score, NULL {_ME.format(_NEAREST_BELOW)}"
)
FRIENDS_SQL = (
    f"SELECT s.player, s.score FROM scores s WHERE s.player = ANY(%(ids)s) ORDER BY {BOARD_ORDER}"
)
FIRST_SQL = f"SELECT s.player FROM scores s ORDER BY {BOARD_ORDER} LIMIT 1"
LAST_SQL = f"SELECT s.player FROM scores s ORDER BY {UPWARD_ORDER} LIMIT 1"

Conn = psycopg.Connection[Any]


def pg_top(conn: Conn) -> list[Line]:
    """The first 10 lines of the board."""
    rows = conn.execute(TOP_SQL).fetchall()
    return [(i + 1, player, score) for i, (player, score) in enumerate(rows)]


def pg_rank(conn: Conn, player: str) -> tuple[int, int] | None:
    """(rank, score) of ``player``; None without a row."""
    row = conn.execute(RANK_SQL, {"p": player}).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def pg_around(conn: Conn, player: str, k: int) -> tuple[list[Line], Line, list[Line]] | None:
    """(above best first, the player, below) with ranks; None without a row."""
    rows = conn.execute(AROUND_SQL, {"p": player, "k": k}).fetchall()
    me = next((row for row in rows if row[0] == 0), None)
    if me is None:
        return None
    rank = int(me[3])
    up = [row for row in rows if row[0] == -1]
    down = [row for row in rows if row[0] == 1]
    above: list[Line] = [(rank - 1 - i, str(row[1]), int(row[2])) for i, row in enumerate(up)]
    below: list[Line] = [(rank + 1 + i, str(row[1]), int(row[2])) for i, row in enumerate(down)]
    return above[::-1], (rank, str(me[1]), int(me[2])), below


def pg_friends(conn: Conn, members: list[str]) -> list[Line]:
    """``members`` (the player and their friends) ranked among themselves."""
    rows = conn.execute(FRIENDS_SQL, {"ids": members}).fetchall()
    return [(i + 1, player, score) for i, (player, score) in enumerate(rows)]


def lines(entries: Sequence[Entry]) -> list[Line]:
    """A reader's entries as comparable lines."""
    return [(e["rank"], e["playerId"], e["score"]) for e in entries]


# -- the board --------------------------------------------------------------------------


def player_id(i: int) -> str:
    """The id of player number ``i`` (fixed width, so byte order = number order)."""
    return f"p{i:08d}"


@dataclass(frozen=True)
class Board:
    """One drawn board: per player number, the best score and when it was reached."""

    scores: array[int]
    achieved_ms: array[int]

    def __len__(self) -> int:
        return len(self.scores)


def draw_board(players: int, now_ms: int) -> Board:
    """Log-normal scores, times on whole seconds of the last day; seeded by ``players``.

    Whole seconds because the game breaks ties at second resolution: then equal
    ``achieved_ms`` in PostgreSQL means equal tie slot in Redis, and both
    stores order every pair of players the same way.
    """
    rng = random.Random(players)
    now_s = now_ms // 1000
    scores = array("q")
    achieved = array("q")
    for _ in range(players):
        scores.append(min(9_999_999, int(rng.lognormvariate(7.0, 1.5))))
        achieved.append((now_s - rng.randrange(SPREAD_S)) * 1000)
    first = int(TIED[0][1:])
    for tied in TIED[1:]:
        if int(tied[1:]) < players:
            scores[int(tied[1:])] = scores[first]
            achieved[int(tied[1:])] = achieved[first]
    return Board(scores, achieved)


def composites(board: Board, codec: TieCodec) -> array[int]:
    """Every player's Redis value, computed before the load is timed.

    The codec costs a few microseconds per player in Python: the job's work,
    not the store's. Kept out of the timed load, both loads hold the same
    client work: formatting the rows (members for ``ZADD``, text for ``COPY``).
    """
    return array("q", map(codec.encode, board.scores, board.achieved_ms))


def load_redis(client: RedisClient, key: str, values: array[int]) -> float:
    """Write every player's composite into ``key``; seconds taken."""
    started = time.monotonic()
    for at in range(0, len(values), CHUNK):
        end = min(len(values), at + CHUNK)
        client.zadd(key, {player_id(i): values[i] for i in range(at, end)})
    return time.monotonic() - started


def load_postgres(conn: Conn, board: Board) -> dict[str, float]:
    """``COPY`` the rows, build the rank index, ``VACUUM ANALYZE``; seconds per step.

    Refuses to go on when the visibility map is not complete afterwards:
    counts would then read the table as well as the index, and the comparison
    would be against a badly set up PostgreSQL.
    """
    steps: dict[str, float] = {}
    started = time.monotonic()
    conn.execute("DROP TABLE IF EXISTS scores")
    conn.execute(TABLE_SQL)
    with (
        conn.cursor() as cur,
        cur.copy("COPY scores (player, score, achieved_ms) FROM STDIN") as copy,
    ):
        for at in range(0, len(board), CHUNK):
            end = min(len(board), at + CHUNK)
            copy.write(
                "".join(
                    f"{player_id(i)}\t{board.scores[i]}\t{board.achieved_ms[i]}\n"
                    for i in range(at, end)
                )
            )
    steps["copy"] = time.monotonic() - started
    mark = time.monotonic()
    conn.execute(INDEX_SQL)
    steps["index"] = time.monotonic() - mark
    mark = time.monotonic()
    conn.execute("VACUUM ANALYZE scores")
    steps["vacuum_analyze"] = time.monotonic() - mark
    row = conn.execute(
        "SELECT relpages, relallvisible FROM pg_class WHERE relname = 'scores'"
    ).fetchone()
    if row is None or row[1] < row[0]:
        raise SystemExit(f"VACUUM left the visibility map incomplete (pages, all-visible): {row}")
    return steps


def postgres_sizes(conn: Conn) -> dict[str, int]:
    """Bytes on disk of the table, each index and everything together."""
    row = conn.execute(
        "SELECT pg_relation_size('scores'), pg_relation_size('scores_pkey'),"
        " pg_relation_size('scores_rank'), pg_total_relation_size('scores')"
    ).fetchone()
    assert row is not None
    return dict(zip(("table", "primary_key", "rank_index", "total"), map(int, row), strict=True))


def rank_plan(conn: Conn, player: str) -> str:
    """How PostgreSQL counts the rows ahead (the scan node of one rank), for the report."""
    plan = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {RANK_SQL}", {"p": player})
    rows = [str(r[0]).strip().removeprefix("->  ") for r in plan.fetchall()]
    scans = [r for r in rows if "Scan" in r and "scores s" in r]
    fetches = [r for r in rows if r.startswith("Heap Fetches")]
    return "; ".join(scans + fetches)


# -- checks and timing --------------------------------------------------------------------


def check_answers(
    conn: Conn,
    client: RedisClient,
    key: str,
    boards: BoardReader,
    friends: FriendsReader,
    sample: Sequence[str],
    members: list[str],
    now_ms: int,
) -> list[str]:
    """Where PostgreSQL and the Redis readers disagree (empty: they agree)."""
    wrong = []
    count = conn.execute("SELECT count(*) FROM scores").fetchone()
    if count is None or count[0] != client.zcard(key):
        wrong.append(f"row count {count} != ZCARD {client.zcard(key)}")
    top = lines(boards.top(GAME, "alltime", 10, now_ms=now_ms)["entries"])
    if pg_top(conn) != top:
        wrong.append(f"top-10: {pg_top(conn)} != {top}")
    for player in sample:
        answer = boards.rank(GAME, player, "alltime", now_ms=now_ms)
        mine = pg_rank(conn, player)
        if mine != (answer["rank"], answer["score"]):
            wrong.append(f"rank of {player}: {mine} != {answer}")
        near = boards.around(GAME, player, "alltime", K, now_ms=now_ms)
        found = pg_around(conn, player, K)
        me = near["player"]
        expected = None
        if me is not None:
            expected = (lines(near["above"]), lines([me])[0], lines(near["below"]))
        if found != expected:
            wrong.append(f"around {player}: {found} != {expected}")
    client.delete(friends_cache_key(friends.namespace, GAME, OWNER))
    board = friends.board(GAME, OWNER, "alltime", now_ms=now_ms)
    if board["cached"] or pg_friends(conn, members) != lines(board["entries"]):
        wrong.append(f"friends: {pg_friends(conn, members)} != {lines(board['entries'])}")
    return wrong


def timed(calls: int, budget_s: float, fn: Callable[[int], object]) -> dict[str, Any]:
    """p50/p99 ms of up to ``calls`` calls of ``fn(i)``, stopping once ``budget_s`` is spent."""
    samples = []
    deadline = time.monotonic() + budget_s
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1000)
        if time.monotonic() > deadline:
            break
    samples.sort()
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "calls": len(samples)}


def prepare_postgres(
    conn: Conn,
    board: Board,
    pick: Sequence[str],
    members: list[str],
    check: Callable[[Sequence[str]], list[str]],
    result: dict[str, Any],
) -> dict[str, Callable[[int], object]]:
    """Load and check PostgreSQL (figures into ``result``); its timed reads, none if wrong.

    The players checked: the first ``CHECKS`` timed ones, the board's first and
    last (``around`` at the edges) and the exact tie (the playerId order).
    """
    players = len(board)
    log(f"{players:,} players: loading PostgreSQL")
    steps = load_postgres(conn, board)
    result["load_s"]["postgres"] = round(sum(steps.values()), 1)
    result["postgres_load_steps_s"] = {k: round(v, 1) for k, v in steps.items()}
    sizes = postgres_sizes(conn)
    result["postgres_bytes"] = sizes
    result["postgres_bytes_per_player"] = round(sizes["total"] / players, 1)
    edges = [conn.execute(FIRST_SQL).fetchone(), conn.execute(LAST_SQL).fetchone()]
    sample = [
        *pick[:CHECKS],
        *(str(row[0]) for row in edges if row is not None),
        *(p for p in TIED if int(p[1:]) < players),
    ]
    log(f"{players:,} players: checking answers for {len(sample)} players")
    wrong = check(sample)
    result["mismatches"] = wrong
    result["checked_players"] = len(sample)
    if wrong:
        log(f"{players:,} players: PostgreSQL disagrees; not timing it: {wrong[:3]}")
        return {}
    result["postgres_plan"] = rank_plan(conn, pick[0])
    return {
        "top-10": lambda i: pg_top(conn),
        "rank": lambda i: pg_rank(conn, pick[i]),
        "around k=5": lambda i: pg_around(conn, pick[i], K),
        "friends 200": lambda i: pg_friends(conn, members),
    }


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(
    players: int, args: argparse.Namespace, settings: Settings, dsn: str | None
) -> dict[str, Any]:
    """Load one board into both stores, check they agree, time every read on both."""
    namespace = f"bench-reads-{run_id()}"
    client = redis_client(settings)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    window = window_for(WindowKind.ALLTIME, now_ms)
    # Every rank exact (a rank beyond exact_tier is null in the API), as PostgreSQL's is.
    config = dataclasses.replace(GameConfig(), exact_tier=max(players, GameConfig().exact_tier))
    catalog = GameCatalog({}, config)
    key = f"{namespace}:{{{GAME}}}:{window.id}"
    rng = random.Random(players + 1)
    log(f"{players:,} players: drawing the board")
    board = draw_board(players, now_ms)
    members = [OWNER, *(player_id(i) for i in rng.sample(range(2, players), FRIENDS))]
    pick = [player_id(rng.randrange(players)) for _ in range(args.calls)]
    result: dict[str, Any] = {"players": players, "loadavg": {"start": _loadavg()}}
    try:
        log(f"{players:,} players: loading Redis ({key})")
        values = composites(board, config.codec(window))
        result["load_s"] = {"redis": round(load_redis(client, key, values), 1)}
        del values
        result["redis_bytes_per_player"] = round(
            (client.memory_usage(key, samples=0) or 0) / players, 1
        )
        boards = BoardReader(client, catalog, namespace)
        friends = FriendsReader(client, catalog, namespace, rng=random.Random(1))
        friends.add(GAME, OWNER, members[1:])
        cache = friends_cache_key(namespace, GAME, OWNER)

        def miss(i: int) -> None:
            client.delete(cache)
            friends.board(GAME, OWNER, "alltime", now_ms=now_ms)

        redis_reads: dict[str, tuple[int, Callable[[int], object]]] = {
            "top-10": (args.calls, lambda i: boards.top(GAME, "alltime", 10, now_ms=now_ms)),
            "rank": (args.calls, lambda i: boards.rank(GAME, pick[i], "alltime", now_ms=now_ms)),
            "around k=5": (
                args.calls,
                lambda i: boards.around(GAME, pick[i], "alltime", K, now_ms=now_ms),
            ),
            "friends 200": (min(args.calls, FRIEND_CALLS), miss),
            "friends 200, cache hit": (
                args.calls,
                lambda i: friends.board(GAME, OWNER, "alltime", now_ms=now_ms),
            ),
        }
        with contextlib.ExitStack() as stack:
            pg_reads: dict[str, Callable[[int], object]] = {}
            if dsn is not None:
                conn = stack.enter_context(
                    psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
                )

                def check(sample: Sequence[str]) -> list[str]:
                    return check_answers(
                        conn, client, key, boards, friends, sample, members, now_ms
                    )

                pg_reads = prepare_postgres(conn, board, pick, members, check, result)
            result["redis"] = {}
            result["postgres"] = {}
            result["ratio"] = {}
            for op, (calls, redis_fn) in redis_reads.items():
                r = result["redis"][op] = timed(calls, float("inf"), redis_fn)
                line = f"{players:,} players: {op}: Redis p50 {r['p50']:.3f} ms"
                pg_fn = pg_reads.get(op)
                if pg_fn is not None:
                    p = result["postgres"][op] = timed(calls, args.pg_seconds, pg_fn)
                    result["ratio"][op] = round(p["p50"] / r["p50"], 2) if r["p50"] else None
                    line += f", PostgreSQL p50 {p['p50']:.3f} ms ({p['calls']} calls)"
                log(line)
            if dsn is not None:
                conn.execute("DROP TABLE scores")  # before the next size loads
        result["loadavg"]["end"] = _loadavg()
        return result
    finally:
        for stale in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.unlink(stale)  # a 10M-member set frees in the background


# -- the report ---------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mb(value: int) -> str:
    return f"{value / 1e6:,.0f} MB"


def markdown(summary: dict[str, Any]) -> str:
    """The ``bench.reads`` section of docs/BENCHMARKS.md."""
    args = summary["args"]
    rows = []
    for size in summary["sizes"]:
        pg = size.get("postgres") or {}
        for op, r in size["redis"].items():
            p = pg.get(op)
            ratio = size.get("ratio", {}).get(op)
            rows.append(
                [
                    op,
                    fmt_int(size["players"]),
                    _ms(r["p50"]),
                    _ms(r["p99"]),
                    _ms(p["p50"]) if p else "-",
                    _ms(p["p99"]) if p else "-",
                    fmt_int(p["calls"]) if p else "-",
                    f"**{fmt_ratio(ratio)}**" if ratio is not None else "-",
                ]
            )
    header = [
        "read",
        "players",
        "Redis p50 ms",
        "Redis p99 ms",
        "PostgreSQL p50 ms",
        "PostgreSQL p99 ms",
        "PostgreSQL calls timed",
        "PostgreSQL / Redis (p50)",
    ]
    storage = []
    for size in summary["sizes"]:
        pg_bytes = size.get("postgres_bytes")
        steps = size.get("postgres_load_steps_s")
        storage.append(
            [
                fmt_int(size["players"]),
                f"{size['load_s']['redis']} s",
                (
                    f"{size['load_s']['postgres']} s (COPY {steps['copy']}, index "
                    f"{steps['index']}, VACUUM ANALYZE {steps['vacuum_analyze']})"
                    if steps
                    else "-"
                ),
                f"{size['redis_bytes_per_player']:.0f} B",
                (
                    f"{size['postgres_bytes_per_player']:.0f} B (table {_mb(pg_bytes['table'])}, "
                    f"primary key {_mb(pg_bytes['primary_key'])}, rank index "
                    f"{_mb(pg_bytes['rank_index'])})"
                    if pg_bytes
                    else "-"
                ),
                " → ".join(", ".join(str(x) for x in size["loadavg"][k]) for k in ("start", "end")),
            ]
        )
    storage_header = [
        "players",
        "Redis load",
        "PostgreSQL load",
        "Redis bytes / player",
        "PostgreSQL bytes / player",
        "load average (1, 5, 15 min) start → end",
    ]
    plans = "; ".join(
        f"{fmt_int(s['players'])}: {s['postgres_plan']}"
        for s in summary["sizes"]
        if s.get("postgres_plan")
    )
    checked = ", ".join(
        str(s["checked_players"]) for s in summary["sizes"] if "checked_players" in s
    )
    return f"""## Reads: Redis sorted sets against PostgreSQL with an index (`bench/reads.py`)

Command: `{summary["command"]}`

Machine: {machine_line(summary["machine"])}

The same all-time board (log-normal scores, ties broken by time at 1 s, then by
playerId) in both stores; one call at a time on one connection from Python, the
same random players on both sides, each read timed on Redis and then at once on
PostgreSQL. Redis is read through this project's readers (`rank` also returns the
percentile; `friends 200` is a cache miss, including the `DEL` that forces it).
PostgreSQL 15 runs on loopback in a fresh cluster (`bench/postgres.py`: 2 GB of
shared buffers, so everything is cached; `fsync` off, which only speeds up the
load) with the table `scores(player text primary key, score bigint, achieved_ms
bigint)` and a btree index on `(score DESC, achieved_ms, player DESC)`, after
`VACUUM ANALYZE` (visibility map complete: counts are index-only scans);
prepared statements; answers shaped into the same (rank, player, score) lines as
the readers'. PostgreSQL's calls per read stop at {args["calls"]:,} or after
{args["pg_seconds"]:g} s. Before timing, PostgreSQL's row count, top-10, ranks,
around pages and friends board were checked equal to the readers' answers
(players checked per size: {checked or "-"}: random ones, the first, the last and
an exact tie).

{table(header, rows)}

{table(storage_header, storage)}

The rank query (around adds the {K} nearest rows on each side by keyset, `LIMIT {K}`):

```sql
{RANK_SQL.replace("%(p)s", "$1")}
```

Its plan for one random player, per size: {plans or "-"}.

Reading the ratios: a rank in PostgreSQL counts the index entries ahead of the
player, so it grows with the board (a random player has about half of it ahead),
and `around` needs that rank too; `ZREVRANK` walks the skip list in O(log N)
whatever the size. The top-10 and the friends board touch a handful of entries
in either store, so there the ratio is per-call overhead, and PostgreSQL can come
out ahead: psycopg's one prepared statement against the readers' redis-py calls
(the uncached friends board is three Redis round trips: the `DEL`, the script
that finds and scores the friends, and the `MULTI` that caches the answer; the
cache-hit row is what a repeated request costs). With fewer than 100 calls timed,
"p99" is the slowest call. Bytes per player: Redis `MEMORY USAGE` of the board
key; PostgreSQL `pg_total_relation_size` (table, primary key and rank index).
Load: Redis `ZADD` of {CHUNK:,} members per command (composites computed
beforehand); PostgreSQL `COPY` (which also builds the primary key), the rank index
and `VACUUM ANALYZE`.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 (nothing published) when the stores disagree."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.reads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--players",
        type=int,
        nargs="+",
        default=[1_000_000, 10_000_000],
        help="board sizes (default: 1000000 10000000)",
    )
    parser.add_argument(
        "--calls", type=int, default=2000, help="calls per read and size (default: 2000)"
    )
    parser.add_argument(
        "--pg-seconds",
        type=float,
        default=30.0,
        help="time budget per PostgreSQL read and size (default: 30)",
    )
    parser.add_argument(
        "--pg-port", type=int, default=PORT, help=f"PostgreSQL's loopback port (default: {PORT})"
    )
    parser.add_argument("--no-postgres", action="store_true", help="Redis only, no comparison")
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.calls < 1 or min(args.players) < FRIENDS + 2:
        parser.error(f"need --calls >= 1 and --players >= {FRIENDS + 2}")
    # A SIGTERM (a timeout, a stopped `python -m bench`) unwinds, so the boards are deleted.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    settings = Settings.from_env()
    info = machine()
    server: contextlib.AbstractContextManager[str | None] = (
        contextlib.nullcontext(None) if args.no_postgres else postgres_server(args.pg_port)
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
    return publish(SECTION, summary, markdown, verified, not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
