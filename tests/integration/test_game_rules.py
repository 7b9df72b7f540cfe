"""Reads of lowest-wins boards, competition ranks, seasons and tournaments, on real Redis.

The oracle orders players by hand (lowest score first on an ``asc`` board,
the earlier slot at equal score, then the greater playerId, as ZREVRANGE
does) and computes competition ranks as "1 + players with a strictly better
score". Boards are written as the job writes them (``GameConfig.codec``), on
one key and split over shards (the merge must honour the order too).
Tournaments are written by the job's own write path (planner, board store and
its Lua script) so their attempts and seats are real.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.keys import shard_of
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from jobs.archiver import Archiver, archive_path
from readers.boards import BoardReader
from readers.friends import FriendsReader
from sinks.boards import RedisBoardStore

GAMES = """
[games."race"]
order = "asc"
max_score = 1000
[games."racesh"]
order = "asc"
max_score = 1000
shards = 3
[games."g"]
max_score = 1000
[games."seasoned"]
max_score = 1000
windows = ["alltime"]
[games."seasoned".seasons]
s3 = { start = 2026-05-01, end = 2026-06-01 }
[games."raceseason"]
order = "asc"
max_score = 1000
windows = ["alltime"]
[games."raceseason".seasons]
spring = { start = 2026-03-01, end = 2026-06-01 }
[games."cups"]
max_score = 1000
windows = ["alltime"]
[games."cups".tournaments]
cup = { start = 2026-05-02T00:00:00Z, end = 2026-05-03, max_entries = 3, max_attempts = 2 }
marathon = { start = 2026-05-01, end = 2026-05-31 }
[games."cupssh"]
max_score = 1000
windows = ["alltime"]
shards = 2
[games."cupssh".tournaments]
cup = { start = 2026-05-02T00:00:00Z, end = 2026-05-03, max_entries = 4, max_attempts = 2 }
"""
NOW_MS = int(datetime(2026, 5, 6, 12, 0, tzinfo=UTC).timestamp() * 1000)
T0 = int(datetime(2026, 5, 2, tzinfo=UTC).timestamp() * 1000)

Board = dict[str, tuple[int, int]]  # playerId -> (score, seconds after T0)


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


def write(
    client: RedisClient, catalog: GameCatalog, ns: str, game: str, window: str, board: Board
) -> None:
    config = catalog.lookup(game)
    assert config is not None
    codec = config.codec(config.window(window))
    pipe = client.pipeline(transaction=False)
    for player, (score, second) in board.items():
        shard = shard_of(player, config.shards)
        tag = game if shard is None else f"{game}/{shard}"
        pipe.zadd(f"{ns}:{{{tag}}}:{window}", {player: codec.encode(score, T0 + second * 1000)})
    pipe.execute()


def ranked(board: Board, asc: bool) -> list[tuple[str, int]]:
    """Board order by hand: better score, then earlier time, then greater playerId."""
    rows = sorted(
        board.items(),
        key=lambda item: (
            item[1][0] if asc else -item[1][0],
            item[1][1],
            [-b for b in item[0].encode()] + [1],
        ),
    )
    return [(player, score) for player, (score, _) in rows]


def competition(order: list[tuple[str, int]], asc: bool) -> dict[str, int]:
    better = {
        player: 1 + sum(1 for _, s in order if (s < score if asc else s > score))
        for player, score in order
    }
    return better


def random_board(seed: int, n: int) -> Board:
    rng = random.Random(seed)
    return {f"p{i}": (rng.randint(0, 9), rng.randint(0, 3)) for i in range(n)}


@pytest.mark.parametrize("game", ["race", "racesh", "g"])
def test_every_read_honours_the_order_and_both_rank_modes(
    client: RedisClient, catalog: GameCatalog, namespace: str, game: str
) -> None:
    asc = game != "g"
    board = random_board(7, 80)
    write(client, catalog, namespace, game, "alltime", board)
    reader = BoardReader(client, catalog, namespace)
    order = ranked(board, asc)
    shared = competition(order, asc)
    # top, by offset and by cursor, in both rank modes
    lines = reader.top(game, "alltime", 1000, now_ms=NOW_MS)["entries"]
    assert [(e["playerId"], e["score"]) for e in lines] == order
    assert [e["rank"] for e in lines] == list(range(1, len(order) + 1))
    for offset in (0, 7, 33):
        page = reader.top(game, "alltime", 9, offset, now_ms=NOW_MS, ranks="competition")
        assert [(e["playerId"], e["rank"]) for e in page["entries"]] == [
            (p, shared[p]) for p, _ in order[offset : offset + 9]
        ]
    cursor = reader.top(game, "alltime", 10, now_ms=NOW_MS)["nextCursor"]
    after = reader.top(game, "alltime", 5, cursor=cursor, now_ms=NOW_MS, ranks="competition")
    assert [(e["playerId"], e["rank"]) for e in after["entries"]] == [
        (p, shared[p]) for p, _ in order[10:15]
    ]
    # rank and percentile: the share of players ranked below on score
    for position, (player, score) in enumerate(order, start=1):
        worse = sum(1 for s, _ in board.values() if (s > score if asc else s < score))
        unique = reader.rank(game, player, "alltime", now_ms=NOW_MS)
        assert (unique["rank"], unique["score"]) == (position, score)
        assert unique["percentile"] == (10_000 * worse // len(board)) / 100
        assert (
            reader.rank(game, player, "alltime", now_ms=NOW_MS, ranks="competition")["rank"]
            == shared[player]
        )
    # around, in competition mode
    player = order[40][0]
    around = reader.around(game, player, "alltime", 3, now_ms=NOW_MS, ranks="competition")
    got = [*around["above"], around["player"], *around["below"]]
    assert [(e["playerId"], e["rank"]) for e in got if e] == [
        (p, shared[p]) for p, _ in order[37:44]
    ]
    # friends board: the same order among friends
    friends = FriendsReader(client, catalog, namespace, rng=random.Random(1))
    me, mates = order[5][0], [order[0][0], order[60][0], order[20][0]]
    friends.add(game, me, mates)
    entries = friends.board(game, me, "alltime", now_ms=NOW_MS)["entries"]
    assert [e["playerId"] for e in entries] == [p for p, _ in order if p in {me, *mates}]


def test_rank_mode_is_checked_before_any_io(
    catalog: GameCatalog, redis_client: RedisClient
) -> None:
    reader = BoardReader(redis_client, catalog, "nothing")
    with pytest.raises(QueryError, match="rank_mode"):
        reader.top("race", "alltime", 5, now_ms=NOW_MS, ranks="dense")


def test_a_season_is_its_own_board(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    write(client, catalog, namespace, "seasoned", "season:s3", {"a": (5, 0), "b": (7, 1)})
    reader = BoardReader(client, catalog, namespace)
    page = reader.top("seasoned", "season:s3", 5, now_ms=NOW_MS)
    assert [(e["playerId"], e["score"]) for e in page["entries"]] == [("b", 7), ("a", 5)]
    assert reader.rank("seasoned", "a", "season:s3", now_ms=NOW_MS)["rank"] == 2
    with pytest.raises(QueryError, match="unknown season"):
        reader.top("seasoned", "season:s9", 5, now_ms=NOW_MS)
    with pytest.raises(QueryError, match="season"):
        reader.top("race", "season:s3", 5, now_ms=NOW_MS)


def test_a_finished_asc_season_is_archived_lowest_first(
    client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    board = random_board(3, 40)
    write(client, catalog, namespace, "raceseason", "season:spring", board)
    client.sadd(f"{namespace}:{{raceseason}}:meta:boards", "season:spring")
    now = int(time.time() * 1000)
    report = Archiver(client, catalog, namespace, tmp_path).run_once(now)
    assert [(a["game"], a["window"]) for a in report.archived] == [("raceseason", "season:spring")]
    path = archive_path(tmp_path, "raceseason", "season:spring")
    rows = pq.read_table(path).to_pylist()
    assert [(r["rank"], r["playerId"], r["score"]) for r in rows] == [
        (i, p, s) for i, (p, s) in enumerate(ranked(board, asc=True), start=1)
    ]


# --- tournaments ---------------------------------------------------------------------------

TOPIC = "score-events"


def play(
    client: RedisClient,
    catalog: GameCatalog,
    ns: str,
    game: str,
    events: list[tuple[str, int, int]],
) -> None:
    """``(player, score, seconds after T0)`` SCORE events, one partition, through the job's
    write path: planner lookups, one read, plan, the Lua write, commit."""
    config = catalog.lookup(game)
    assert config is not None
    planner = BoardPlanner(ns, 300_000, partitions={TOPIC: 1})
    store = RedisBoardStore(client)
    for offset, (player, score, second) in enumerate(events):
        ts = T0 + second * 1000
        event = ScoreEvent(f"e{offset}", game, player, score, ts, EventKind.SCORE, "k1", b"")
        rec = Accepted(offset, ts, event, config, config.windows_at(ts))
        batch = CheckedBatch(TOPIC, 0, (rec,), (), offset)
        need = planner.lookups(batch)
        got = store.read(need)
        plan = planner.plan(batch, got, need)
        assert store.apply(plan) == [1] * len(plan.groups)
        planner.commit(plan)


def test_a_tournament_board_and_a_players_tournaments(
    client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    # cup: 3 seats (one partition), 2 attempts; marathon: uncapped, all May.
    play(
        client,
        catalog,
        namespace,
        "cups",
        [
            ("a", 10, 60),
            ("b", 30, 120),
            ("a", 50, 180),
            ("a", 90, 240),  # a's third attempt: refused on the cup board only
            ("c", 20, 300),
            ("d", 99, 360),  # the fourth player: no seat left
            ("b", 5, 400),  # worse, but b's second attempt all the same
            ("d", 40, 86_400 + 60),  # after the cup: the marathon only
        ],
    )
    reader = BoardReader(client, catalog, namespace)
    page = reader.top("cups", "tournament:cup", 10, now_ms=NOW_MS)
    assert [(e["playerId"], e["score"]) for e in page["entries"]] == [
        ("a", 50),
        ("b", 30),
        ("c", 20),
    ]
    assert reader.rank("cups", "d", "tournament:cup", now_ms=NOW_MS)["score"] is None
    assert [e["playerId"] for e in reader.top("cups", "alltime", 10, now_ms=NOW_MS)["entries"]] == [
        "d",
        "a",
        "b",
        "c",
    ]
    mine = reader.player_tournaments("cups", "a", now_ms=NOW_MS)
    assert mine["gameId"] == "cups" and mine["playerId"] == "a"
    marathon, cup = mine["tournaments"]  # earliest start first
    assert cup == {
        "tournament": "cup",
        "window": "tournament:cup",
        "startMs": T0,
        "endMs": T0 + 86_400_000,
        "status": "ended",
        "rank": 1,
        "score": 50,
        "percentile": 66.66,
        "attempts": 2,
        "maxAttempts": 2,
        "maxEntries": 3,
    }
    # The marathon counts every event of a in its range (no cap): 90 is its best,
    # second to d's 99 (d had no cup seat, but the marathon has no cap).
    assert (marathon["tournament"], marathon["status"], marathon["score"]) == (
        "marathon",
        "running",
        90,
    )
    assert marathon["rank"] == 2
    assert (marathon["attempts"], marathon["maxAttempts"], marathon["maxEntries"]) == (
        3,
        None,
        None,
    )
    # d never got a cup seat: only the marathon lists d.
    assert [
        t["tournament"]
        for t in reader.player_tournaments("cups", "d", now_ms=NOW_MS)["tournaments"]
    ] == ["marathon"]
    assert reader.player_tournaments("cups", "nobody", now_ms=NOW_MS)["tournaments"] == []
    assert reader.player_tournaments("g", "a", now_ms=NOW_MS)["tournaments"] == []
    with pytest.raises(QueryError, match="unknown tournament"):
        reader.top("cups", "tournament:nope", 5, now_ms=NOW_MS)
    with pytest.raises(QueryError, match="tournament"):
        reader.top("g", "tournament:cup", 5, now_ms=NOW_MS)
    stats = {text(k): int(v) for k, v in client.hgetall(f"{namespace}:{{cups}}:meta:stats").items()}
    assert stats == {"applied": 8, "tournament_full": 1, "attempts_used_up": 1}

    # Archived once it is final (end + lateness), with its rules in the file's metadata.
    report = Archiver(client, catalog, namespace, tmp_path).run_once(NOW_MS)
    assert [(a["game"], a["window"]) for a in report.archived] == [("cups", "tournament:cup")]
    path = archive_path(tmp_path, "cups", "tournament:cup")
    assert path == tmp_path / "cups" / "tournament" / "cup.parquet"
    table = pq.read_table(path)
    assert [(r["rank"], r["playerId"], r["score"]) for r in table.to_pylist()] == [
        (1, "a", 50),
        (2, "b", 30),
        (3, "c", 20),
    ]
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    assert meta["leaderboard.tournament.max_entries"] == "3"
    assert meta["leaderboard.tournament.max_attempts"] == "2"
    assert meta["leaderboard.tournament.end_ms"] == str(T0 + 86_400_000)


def test_a_sharded_tournament_gives_each_shard_its_seats(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    players = [f"p{i}" for i in range(20)]
    play(client, catalog, namespace, "cupssh", [(p, i, 60 + i) for i, p in enumerate(players)])
    reader = BoardReader(client, catalog, namespace)
    entries = reader.top("cupssh", "tournament:cup", 50, now_ms=NOW_MS)["entries"]
    # One partition x two shards: two seats per shard, taken by each shard's first players.
    first = {0: [], 1: []}  # type: dict[int, list[str]]
    for p in players:
        first[shard_of(p, 2) or 0].append(p)
    assert sorted(e["playerId"] for e in entries) == sorted(first[0][:2] + first[1][:2])
    listed = reader.player_tournaments("cupssh", first[1][0], now_ms=NOW_MS)["tournaments"]
    assert [(t["tournament"], t["attempts"]) for t in listed] == [("cup", 1)]
