"""The read side against real Redis (standalone and cluster) and an independent oracle.

Boards are written directly with ZADD of composites computed here from first
principles (``score * slots + (slots - 1 - slot)`` with the slot counts worked
out from calendar spans, shard = CRC-32 % shards), then every answer of
``BoardReader`` / ``FriendsReader`` is compared with a brute-force ranking.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.redis import RedisClient
from domain.errors import QueryError
from domain.games import GameCatalog
from domain.ranking import Cursor
from readers.boards import BoardReader, UnknownGameError
from readers.friends import FriendsReader, friends_cache_key, friends_key

GAMES = """
[games."g"]
[games."tier"]
exact_tier = 5
[games."none"]
tie_resolution = "none"
[games."sh"]
shards = 3
[games."shnone"]
shards = 4
tie_resolution = "none"
[games."day"]
windows = ["daily"]
"""
SHARDS = {"sh": 3, "shnone": 4}
NONE_GAMES = {"none", "shnone"}
SPAN_S = {
    "alltime": int((datetime(2040, 1, 1, tzinfo=UTC) - datetime(2020, 1, 1, tzinfo=UTC)).days)
    * 86_400,
    "daily": 86_400,
    "weekly": 7 * 86_400,
}
NOW_MS = int(datetime(2026, 5, 6, 12, 0, tzinfo=UTC).timestamp() * 1000)  # a Wednesday


def slots_of(game: str, window_id: str) -> int:
    return 1 if game in NONE_GAMES else SPAN_S[window_id.split(":")[0]]


def key_of(ns: str, game: str, window_id: str, player: str) -> str:
    shards = SHARDS.get(game, 1)
    tag = game if shards == 1 else f"{game}/{zlib.crc32(player.encode()) % shards}"
    return f"{ns}:{{{tag}}}:{window_id}"


Board = dict[str, tuple[int, int]]  # playerId -> (score, slot)


def composite(score: int, slot: int, slots: int) -> int:
    """The board value, written out; with one slot ("none") time cannot break ties."""
    slot = slot if slots > 1 else 0
    return score * slots + (slots - 1 - slot)


def write(client: RedisClient, ns: str, game: str, window_id: str, board: Board) -> None:
    slots = slots_of(game, window_id)
    by_key: dict[str, dict[str, int]] = {}
    for player, (score, slot) in board.items():
        key = key_of(ns, game, window_id, player)
        by_key.setdefault(key, {})[player] = composite(score, slot, slots)
    pipe = client.pipeline(transaction=False)
    for key, mapping in by_key.items():
        items = list(mapping.items())
        for i in range(0, len(items), 5000):
            pipe.zadd(key, dict(items[i : i + 5000]))
    pipe.execute()


def oracle(game: str, window_id: str, board: Board) -> list[tuple[str, int]]:
    """(playerId, score) in ZREVRANGE order: composite desc, then id bytes desc."""
    slots = slots_of(game, window_id)
    rows = [(composite(s, slot, slots), p.encode(), p, s) for p, (s, slot) in board.items()]
    rows.sort(reverse=True)
    return [(p, s) for _, _, p, s in rows]


def expected_entries(
    ranked: list[tuple[str, int]], start: int, stop: int, tier: int = 10**9
) -> list[dict[str, Any]]:
    return [
        {"rank": i + 1 if i + 1 <= tier else None, "playerId": p, "score": s}
        for i, (p, s) in enumerate(ranked)
    ][start:stop]


def random_board(seed: int, n: int, max_score: int = 30, max_slot: int = 4) -> Board:
    """Many ties: few scores and slots, ids including non-ASCII ones (byte order)."""
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(n - 6)] + ["é", "e", "z", "Z", "ü1", "ü"]
    return {p: (rng.randint(0, max_score), rng.randint(0, max_slot)) for p in names}


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    """The same reads on the standalone Redis and on the Redis Cluster."""
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


@pytest.fixture
def reader(client: RedisClient, catalog: GameCatalog, namespace: str) -> BoardReader:
    return BoardReader(client, catalog, namespace)


# --- top ---------------------------------------------------------------------------------


@pytest.mark.parametrize("game", ["g", "none", "sh", "shnone"])
def test_top_pages_by_offset_and_by_cursor(
    client: RedisClient, reader: BoardReader, namespace: str, game: str
) -> None:
    board = random_board(1, 250)
    write(client, namespace, game, "alltime", board)
    ranked = oracle(game, "alltime", board)

    for offset in range(0, 260, 37):
        page = reader.top(game, "alltime", 37, offset, now_ms=NOW_MS)
        assert page["window"] == "alltime"
        assert page["entries"] == expected_entries(ranked, offset, offset + 37)
        assert (page["nextCursor"] is None) == (offset + 37 >= len(ranked))

    served: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        page = reader.top(game, "alltime", 23, cursor=cursor, now_ms=NOW_MS)
        served += page["entries"]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert served == expected_entries(ranked, 0, len(ranked))
    assert pages == -(-len(ranked) // 23)

    # An offset page's cursor continues where it ended.
    first = reader.top(game, "alltime", 10, 40, now_ms=NOW_MS)
    assert first["nextCursor"] is not None
    after = reader.top(game, "alltime", 10, cursor=first["nextCursor"], now_ms=NOW_MS)
    assert after["entries"] == expected_entries(ranked, 50, 60)


@pytest.mark.parametrize("game", ["g", "sh"])
def test_cursor_paging_survives_rising_scores(
    client: RedisClient, reader: BoardReader, namespace: str, game: str
) -> None:
    """Players gaining points between pages: nobody twice, unchanged players once, in order."""
    board = random_board(2, 200, max_score=40)
    write(client, namespace, game, "alltime", board)
    rng = random.Random(3)
    start = dict(board)
    touched: set[str] = set()
    names: list[str] = []
    cursor = None
    while True:
        page = reader.top(game, "alltime", 15, cursor=cursor, now_ms=NOW_MS)
        names += [e["playerId"] for e in page["entries"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
        rising = {}
        for player in rng.sample(sorted(board), 5):
            score, slot = board[player]
            board[player] = rising[player] = (score + rng.randint(1, 30), slot)
            touched.add(player)
        write(client, namespace, game, "alltime", rising)
    assert len(names) == len(set(names))
    stable = {p: v for p, v in start.items() if p not in touched}
    assert [n for n in names if n in stable] == [p for p, _ in oracle(game, "alltime", stable)]


# --- rank ----------------------------------------------------------------------------------


@pytest.mark.parametrize("game", ["g", "none", "sh"])
def test_rank_score_and_percentile_of_every_player(
    client: RedisClient, reader: BoardReader, namespace: str, game: str
) -> None:
    board = random_board(4, 120, max_score=12, max_slot=3)
    # Deliberate ties: same score earlier/later, and same score *and* slot.
    board.update({"tieA": (7, 0), "tieB": (7, 3), "tieC": (7, 3), "solo": (100, 0)})
    write(client, namespace, game, "alltime", board)
    ranked = oracle(game, "alltime", board)
    total = len(board)
    for position, (player, score) in enumerate(ranked, start=1):
        lower = sum(1 for s, _ in board.values() if s < score)
        answer = reader.rank(game, player, "alltime", now_ms=NOW_MS)
        assert answer == {
            "window": "alltime",
            "playerId": player,
            "rank": position,
            "score": score,
            "percentile": (10_000 * lower // total) / 100,
        }
    ties = {p: reader.rank(game, p, "alltime", now_ms=NOW_MS) for p in ("tieA", "tieB", "tieC")}
    assert len({a["percentile"] for a in ties.values()}) == 1  # same score, same percentile
    if game not in NONE_GAMES:
        assert ties["tieA"]["rank"] < ties["tieC"]["rank"] < ties["tieB"]["rank"]  # type: ignore[operator]


def test_rank_is_null_beyond_the_exact_tier(
    client: RedisClient, reader: BoardReader, namespace: str
) -> None:
    board = {f"p{i}": (100 - i, 0) for i in range(12)}
    write(client, namespace, "tier", "alltime", board)
    for i in range(12):
        answer = reader.rank("tier", f"p{i}", "alltime", now_ms=NOW_MS)
        assert answer["rank"] == (i + 1 if i < 5 else None)
        assert answer["score"] == 100 - i
        assert answer["percentile"] == (10_000 * (11 - i) // 12) / 100
    page = reader.top("tier", "alltime", 8, 0, now_ms=NOW_MS)
    assert [e["rank"] for e in page["entries"]] == [1, 2, 3, 4, 5, None, None, None]
    around = reader.around("tier", "p5", "alltime", 1, now_ms=NOW_MS)
    assert around["player"] is not None
    assert [e["rank"] for e in (*around["above"], around["player"], *around["below"])] == [
        5,
        None,
        None,
    ]


@pytest.mark.parametrize("game", ["g", "sh"])
def test_absent_player_answers_nulls(
    client: RedisClient, reader: BoardReader, namespace: str, game: str
) -> None:
    write(client, namespace, game, "alltime", {"a": (1, 0)})
    assert reader.rank(game, "ghost", "alltime", now_ms=NOW_MS) == {
        "window": "alltime",
        "playerId": "ghost",
        "rank": None,
        "score": None,
        "percentile": None,
    }
    assert reader.around(game, "ghost", "alltime", 3, now_ms=NOW_MS) == {
        "window": "alltime",
        "above": [],
        "player": None,
        "below": [],
    }
    # An empty (or never written) board is no error either.
    assert reader.top(game, "daily:2020-01-01", 5, now_ms=NOW_MS) == {
        "window": "daily:2020-01-01",
        "entries": [],
        "nextCursor": None,
    }


# --- around --------------------------------------------------------------------------------


@pytest.mark.parametrize("game", ["g", "none", "sh", "shnone"])
def test_around_matches_the_oracle_including_the_edges(
    client: RedisClient, reader: BoardReader, namespace: str, game: str
) -> None:
    board = random_board(5, 60, max_score=8, max_slot=2)
    write(client, namespace, game, "alltime", board)
    ranked = oracle(game, "alltime", board)
    entries = expected_entries(ranked, 0, len(ranked))
    picks = [0, 1, 2, len(ranked) // 2, len(ranked) - 2, len(ranked) - 1]
    for at in picks:
        player = ranked[at][0]
        for k in (0, 1, 3, 100):
            answer = reader.around(game, player, "alltime", k, now_ms=NOW_MS)
            assert answer == {
                "window": "alltime",
                "above": entries[max(0, at - k) : at],
                "player": entries[at],
                "below": entries[at + 1 : at + 1 + k],
            }, (player, k)


# --- windows -------------------------------------------------------------------------------


def test_current_windows_resolve_from_now_ms(
    client: RedisClient, reader: BoardReader, namespace: str
) -> None:
    day = datetime.fromtimestamp(NOW_MS / 1000, tz=UTC)
    iso = day.isocalendar()
    daily_id = f"daily:{day:%Y-%m-%d}"
    weekly_id = f"weekly:{iso.year}-W{iso.week:02d}"
    assert (daily_id, weekly_id) == ("daily:2026-05-06", "weekly:2026-W19")
    write(client, namespace, "g", daily_id, {"d1": (5, 10), "d2": (6, 0)})
    write(client, namespace, "g", weekly_id, {"w1": (9, 99)})
    write(client, namespace, "g", "daily:2026-05-05", {"old": (1, 0)})

    assert reader.top("g", "daily", 5, now_ms=NOW_MS) == {
        "window": daily_id,
        "entries": [
            {"rank": 1, "playerId": "d2", "score": 6},
            {"rank": 2, "playerId": "d1", "score": 5},
        ],
        "nextCursor": None,
    }
    assert reader.top("g", "weekly", 5, now_ms=NOW_MS)["entries"] == [
        {"rank": 1, "playerId": "w1", "score": 9}
    ]
    assert reader.top("g", "daily:2026-05-05", 5, now_ms=NOW_MS)["entries"][0]["playerId"] == "old"
    yesterday = NOW_MS - 86_400_000
    assert reader.rank("g", "old", "daily", now_ms=yesterday)["rank"] == 1
    with pytest.raises(QueryError, match="keeps no weekly board"):
        reader.top("day", "weekly", 5, now_ms=NOW_MS)


def test_a_cursor_keeps_its_week_when_a_new_week_starts(
    client: RedisClient, reader: BoardReader, namespace: str
) -> None:
    write(client, namespace, "g", "weekly:2026-W19", {f"p{i}": (i, 0) for i in range(6)})
    page = reader.top("g", "weekly", 3, now_ms=NOW_MS)
    next_week = NOW_MS + 7 * 86_400_000
    rest = reader.top("g", "weekly", 3, cursor=page["nextCursor"], now_ms=next_week)
    assert rest["window"] == "weekly:2026-W19"
    assert [e["playerId"] for e in rest["entries"]] == ["p2", "p1", "p0"]
    with pytest.raises(QueryError, match="another window"):
        reader.top("g", "daily", 3, cursor=page["nextCursor"], now_ms=NOW_MS)
    with pytest.raises(QueryError, match="another window"):
        reader.top("g", "weekly:2026-W20", 3, cursor=page["nextCursor"], now_ms=NOW_MS)
    with pytest.raises(QueryError, match="another game"):
        reader.top("sh", "weekly", 3, cursor=page["nextCursor"], now_ms=NOW_MS)


# --- bad input -----------------------------------------------------------------------------


def test_bad_queries_are_refused_before_any_io(reader: BoardReader) -> None:
    with pytest.raises(UnknownGameError):
        reader.top("nope", "alltime", 5, now_ms=NOW_MS)
    with pytest.raises(UnknownGameError):
        reader.rank("bad{tag}", "p", "alltime", now_ms=NOW_MS)
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
        with pytest.raises(QueryError):
            reader.top("g", "alltime", now_ms=NOW_MS, **kwargs)
    with pytest.raises(QueryError, match="either cursor or offset"):
        reader.top("g", "alltime", 1, 5, Cursor("g", "alltime", 1, "p").encode(), now_ms=NOW_MS)
    for window in ("monthly", "daily:2026-02-30", "weekly:2026-W54", ""):
        with pytest.raises(QueryError):
            reader.top("g", window, 5, now_ms=NOW_MS)
    with pytest.raises(QueryError, match="invalid cursor"):
        reader.top("g", "alltime", 5, cursor="garbage", now_ms=NOW_MS)
    with pytest.raises(QueryError):
        reader.rank("g", "", "alltime", now_ms=NOW_MS)
    with pytest.raises(QueryError):
        reader.rank("g", "x" * 129, "alltime", now_ms=NOW_MS)
    with pytest.raises(QueryError):
        reader.around("g", "p", "alltime", 101, now_ms=NOW_MS)


# --- friends -------------------------------------------------------------------------------


@pytest.mark.parametrize("game", ["g", "sh"])
def test_friends_board_with_5000_friends(
    client: RedisClient, catalog: GameCatalog, namespace: str, game: str
) -> None:
    rng = random.Random(6)
    board = {f"p{i}": (rng.randint(0, 5000), rng.randint(0, 50)) for i in range(20_000)}
    board["me"] = (2500, 7)
    write(client, namespace, game, "alltime", board)
    friends = [f"p{i}" for i in range(0, 15_000, 3)]  # 5,000 with scores
    ghosts = [f"ghost{i}" for i in range(50)]  # friends without a score
    reader = FriendsReader(client, catalog, namespace, rng=random.Random(7))
    assert reader.add(game, "me", friends + ghosts) == 5_050
    assert reader.add(game, "me", friends[:10]) == 0
    assert len(reader.list_friends(game, "me")) == 5_050

    expected = expected_entries(
        oracle(game, "alltime", {p: board[p] for p in [*friends, "me"]}), 0, 5_001
    )
    first = reader.board(game, "me", "alltime", now_ms=NOW_MS)
    assert first["window"] == "alltime"
    assert first["cached"] is False
    assert first["entries"] == expected
    assert 4 <= first["ttl"] <= 6
    pttl = client.pttl(friends_cache_key(namespace, game, "me"))
    assert 3_900 <= pttl <= 6_000

    second = reader.board(game, "me", "alltime", now_ms=NOW_MS)
    assert second["cached"] is True and second["entries"] == expected
    assert 1 <= second["ttl"] <= 6

    # Changing the friend set drops the cache at once.
    assert reader.remove(game, "me", [friends[0], "ghost0", "stranger"]) == 2
    third = reader.board(game, "me", "alltime", now_ms=NOW_MS)
    assert third["cached"] is False
    assert friends[0] not in {e["playerId"] for e in third["entries"]}
    assert len(third["entries"]) == 5_000


@pytest.mark.parametrize("game", ["g", "sh"])
def test_friends_board_competition_and_dense_ranks_equal_an_oracle_with_many_ties(
    client: RedisClient, catalog: GameCatalog, namespace: str, game: str
) -> None:
    rng = random.Random(26)
    board = {f"p{i}": (rng.randint(0, 6), rng.randint(0, 50)) for i in range(600)}
    write(client, namespace, game, "alltime", board)
    friends = [f"p{i}" for i in range(1, 600, 2)]  # 300 friends on 7 scores
    reader = FriendsReader(client, catalog, namespace, rng=random.Random(7))
    reader.add(game, "p0", friends)
    order = oracle(game, "alltime", {p: board[p] for p in ["p0", *friends]})
    # Independent of the reader: count the strictly better players / distinct scores.
    scores = [s for _, s in order]
    competition = [1 + sum(1 for other in scores if other > s) for s in scores]
    dense = [1 + len({other for other in scores if other > s}) for s in scores]
    assert max(dense) <= 7 < max(competition)  # many ties
    for mode, want in (
        ("unique", list(range(1, 302))),
        ("competition", competition),
        ("dense", dense),
    ):
        for _ in range(2):  # fresh, then from the cache
            got = reader.board(game, "p0", "alltime", now_ms=NOW_MS, ranks=mode)
            assert [(e["playerId"], e["score"]) for e in got["entries"]] == order, mode
            assert [e["rank"] for e in got["entries"]] == want, mode
    with pytest.raises(QueryError):
        reader.board(game, "p0", "alltime", now_ms=NOW_MS, ranks="olympic")


def test_friends_keys_share_the_game_slot_and_validate(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    assert friends_key(namespace, "sh", "me") == f"{namespace}:{{sh}}:friends:me"
    assert friends_cache_key(namespace, "sh", "me") == f"{namespace}:{{sh}}:friendsboard:me"
    reader = FriendsReader(client, catalog, namespace, rng=random.Random(1))
    write(client, namespace, "g", "alltime", {"a": (3, 0), "b": (3, 0), "me": (1, 0)})
    reader.add("g", "me", ["a", "b", "c"])
    board = reader.board("g", "me", "alltime", now_ms=NOW_MS)
    assert board["entries"] == [
        {"rank": 1, "playerId": "b", "score": 3},
        {"rank": 2, "playerId": "a", "score": 3},
        {"rank": 3, "playerId": "me", "score": 1},
    ]
    with pytest.raises(QueryError):
        reader.add("g", "me", ["me"])
    with pytest.raises(QueryError):
        reader.add("g", "me", [])
    with pytest.raises(UnknownGameError):
        reader.add("nope", "me", ["a"])
    # A lonely player without a score has an empty board.
    assert reader.board("g", "nobody", "alltime", now_ms=NOW_MS)["entries"] == []


@pytest.mark.parametrize("game", ["g", "sh"])
def test_friends_board_survives_a_corrupt_cache_and_a_self_follow(
    client: RedisClient, catalog: GameCatalog, namespace: str, game: str
) -> None:
    """State the API never writes (a self-follow, a cache value that is not a board)."""
    write(client, namespace, game, "alltime", {"a": (4, 1), "me": (2, 0), "z": (9, 0)})
    reader = FriendsReader(client, catalog, namespace, rng=random.Random(2))
    reader.add(game, "me", ["a", "ghost"])
    client.sadd(friends_key(namespace, game, "me"), "me")  # written behind the API's back
    expected = [
        {"rank": 1, "playerId": "a", "score": 4},
        {"rank": 2, "playerId": "me", "score": 2},
    ]
    assert reader.board(game, "me", "alltime", now_ms=NOW_MS)["entries"] == expected
    client.hset(friends_cache_key(namespace, game, "me"), "alltime", "{not json")
    again = reader.board(game, "me", "alltime", now_ms=NOW_MS)
    assert again["cached"] is False and again["entries"] == expected
    assert reader.board(game, "me", "alltime", now_ms=NOW_MS)["cached"] is True
