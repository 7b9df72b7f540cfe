"""Reads of lowest-wins boards, competition ranks and seasons, on real Redis.

The oracle orders players by hand (lowest score first on an ``asc`` board,
the earlier slot at equal score, then the greater playerId, as ZREVRANGE
does) and computes competition ranks as "1 + players with a strictly better
score". Boards are written as the job writes them (``GameConfig.codec``), on
one key and split over shards (the merge must honour the order too).
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

from domain.errors import QueryError
from domain.games import GameCatalog
from domain.planner import shard_of
from jobs.archiver import Archiver, archive_path
from readers.boards import BoardReader
from readers.friends import FriendsReader

pytestmark = pytest.mark.integration

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


def write(client: Any, catalog: GameCatalog, ns: str, game: str, window: str, board: Board) -> None:
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
    client: Any, catalog: GameCatalog, namespace: str, game: str
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


def test_rank_mode_is_checked_before_any_io(catalog: GameCatalog, redis_client: Any) -> None:
    reader = BoardReader(redis_client, catalog, "nothing")
    with pytest.raises(QueryError, match="rank_mode"):
        reader.top("race", "alltime", 5, now_ms=NOW_MS, ranks="dense")


def test_a_season_is_its_own_board(client: Any, catalog: GameCatalog, namespace: str) -> None:
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
    client: Any, catalog: GameCatalog, namespace: str, tmp_path: Path
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
