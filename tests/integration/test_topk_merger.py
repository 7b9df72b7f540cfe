"""The global top-K merger against real Redis (standalone and cluster).

Boards are written straight into the shard keys (shard = CRC-32 % S, computed
here), the merger runs, and the global key and the reader's pages are compared
with the unsharded board sorted by an oracle written out in this file.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import RedisCluster

from adapters.redis import RedisClient, text
from domain.games import GameCatalog
from domain.windows import WindowKind, window_for
from jobs.topk_merger import TopKMerger
from readers.boards import BoardReader

GAMES = """
[games."sh"]
shards = 4
[games."wide"]
shards = 8
[games."flat"]
[games."dayonly"]
shards = 3
windows = ["daily"]
"""
SHARDS = {"sh": 4, "wide": 8, "dayonly": 3, "flat": 1, "anon": 4}
REPO = Path(__file__).resolve().parents[2]


def now_ms() -> int:
    # Real time: the global keys' expiries are judged by the Redis server's clock.
    return time.time_ns() // 1_000_000


def tag(game: str, player: str) -> str:
    shards = SHARDS[game]
    return game if shards == 1 else f"{game}/{zlib.crc32(player.encode()) % shards}"


def board_key(ns: str, game: str, window_id: str, player: str) -> str:
    return f"{ns}:{{{tag(game, player)}}}:{window_id}"


def write(client: RedisClient, ns: str, game: str, window_id: str, board: dict[str, int]) -> None:
    """ZADD the members into their shard keys and register the window in every shard."""
    by_key: dict[str, dict[str, int]] = {}
    for player, composite in board.items():
        by_key.setdefault(board_key(ns, game, window_id, player), {})[player] = composite
    pipe = client.pipeline(transaction=False)
    for key, mapping in by_key.items():
        pipe.zadd(key, mapping)
    for shard in range(SHARDS[game]):
        group = game if SHARDS[game] == 1 else f"{game}/{shard}"
        pipe.sadd(f"{ns}:{{{group}}}:meta:boards", window_id)
    pipe.execute()


def oracle(board: dict[str, int]) -> list[tuple[str, int]]:
    """ZREVRANGE order of the unsharded board: composite, then playerId bytes, descending."""
    return sorted(board.items(), key=lambda pc: (pc[1], pc[0].encode()), reverse=True)


def random_board(seed: int, n: int, spread: int = 400) -> dict[str, int]:
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(n - 4)] + ["é", "e", "ü", "Z"]
    return {p: rng.randrange(spread) * 1000 for p in names}  # many ties at the composite


def stored(client: RedisClient, key: str) -> list[tuple[str, int]]:
    pairs: list[Any] = client.zrevrange(key, 0, -1, withscores=True)
    return [(text(m), int(s)) for m, s in pairs]


def scores(page: dict[str, Any]) -> list[str]:
    return [e["playerId"] for e in page["entries"]]


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


def test_global_key_is_the_unsharded_top_k_and_serves_offset_pages(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    now = now_ms()
    day = window_for(WindowKind.DAILY, now).id
    boards = {"alltime": random_board(1, 3000), day: random_board(2, 500)}
    for window_id, board in boards.items():
        write(client, namespace, "sh", window_id, board)
    merger = TopKMerger(client, catalog, namespace, k=100)
    report = merger.run_once(now, ["sh", "flat"])
    assert (report.games, report.windows, report.written) == (1, 2, 2)
    for window_id, board in boards.items():
        key = f"{namespace}:{{sh}}:top:{window_id}"
        assert stored(client, key) == oracle(board)[:101]
        assert 0 < client.pttl(key) <= merger.ttl_ms

    reader = BoardReader(client, catalog, namespace)
    want = [p for p, _ in oracle(boards["alltime"])]
    page = reader.top("sh", "alltime", 10, now_ms=now)
    assert scores(page) == want[:10]
    assert [e["rank"] for e in page["entries"]] == list(range(1, 11))

    # A new leader written to a shard is not visible through the global key until
    # the next pass (proof the page came from the key) ...
    client.zadd(board_key(namespace, "sh", "alltime", "leader"), {"leader": 10**9})
    assert scores(reader.top("sh", "alltime", 10, now_ms=now)) == want[:10]
    assert scores(reader.top("sh", "alltime", 10, 90, now_ms=now)) == want[90:100]
    # ... while pages deeper than K (and cursor pages) merge the shards live.
    assert scores(reader.top("sh", "alltime", 10, 91, now_ms=now)) == want[90:100]
    cursor = reader.top("sh", "alltime", 5, now_ms=now)["nextCursor"]
    assert scores(reader.top("sh", "alltime", 5, cursor=cursor, now_ms=now)) == want[5:10]
    merger.run_once(now, ["sh"])
    assert scores(reader.top("sh", "alltime", 3, now_ms=now)) == ["leader", *want[:2]]

    # A board shorter than K: the key holds all of it; its last page (no member
    # after it to prove there is no next page) is merged from the shards.
    small = [p for p, _ in oracle(boards[day])]
    assert scores(reader.top("sh", day, 20, 60, now_ms=now)) == small[60:80]
    last = reader.top("sh", day, 20, 490, now_ms=now)
    assert scores(last) == small[490:] and last["nextCursor"] is None


def test_windows_come_from_the_shard_registries(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    now = now_ms()
    day = window_for(WindowKind.DAILY, now).id
    week = window_for(WindowKind.WEEKLY, now).id
    write(client, namespace, "dayonly", day, random_board(3, 50))
    write(client, namespace, "dayonly", "alltime", random_board(4, 50))  # kind not kept
    write(client, namespace, "dayonly", "daily:2020-01-01", random_board(5, 50))  # expired
    client.sadd(f"{namespace}:{{dayonly/1}}:meta:boards", "bogus", week)
    report = TopKMerger(client, catalog, namespace, k=10).run_once(now, ["dayonly"])
    assert report.windows == 1
    keys = {
        w: client.exists(f"{namespace}:{{dayonly}}:top:{w}")
        for w in (day, "alltime", "daily:2020-01-01", week)
    }
    assert keys == {day: 1, "alltime": 0, "daily:2020-01-01": 0, week: 0}


def test_unchanged_tops_are_refreshed_not_rewritten(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    now = now_ms()
    write(client, namespace, "sh", "alltime", random_board(6, 300))
    key = f"{namespace}:{{sh}}:top:alltime"
    merger = TopKMerger(client, catalog, namespace, k=20, ttl_ms=60_000)
    assert merger.run_once(now, ["sh"]).written == 1
    client.pexpire(key, 10_000)
    again = merger.run_once(now_ms(), ["sh"])
    assert (again.written, again.unchanged) == (0, 1)
    assert client.pttl(key) > 50_000  # the freshness guard was extended
    client.delete(key)  # e.g. a rebuild swap dropped it: written again at once
    assert merger.run_once(now_ms(), ["sh"]).written == 1
    assert len(stored(client, key)) == 21
    # Everyone leaves the board: the global key goes too.
    for shard in range(4):
        client.delete(f"{namespace}:{{sh/{shard}}}:alltime")
    assert merger.run_once(now_ms(), ["sh"]).written == 1
    assert not client.exists(key)


def test_a_stopped_merger_lets_readers_fall_back_to_the_shards(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    write(client, namespace, "sh", "alltime", random_board(7, 200))
    TopKMerger(client, catalog, namespace, k=50, ttl_ms=200).run_once(now_ms(), ["sh"])
    client.zadd(board_key(namespace, "sh", "alltime", "late"), {"late": 10**9})
    reader = BoardReader(client, catalog, namespace)
    assert scores(reader.top("sh", "alltime", 1, now_ms=now_ms())) != ["late"]
    time.sleep(0.3)
    assert not client.exists(f"{namespace}:{{sh}}:top:alltime")
    assert scores(reader.top("sh", "alltime", 1, now_ms=now_ms())) == ["late"]


def test_default_served_sharded_games_are_discovered(client: RedisClient, namespace: str) -> None:
    catalog = GameCatalog.from_toml('[default]\nshards = 4\n[games."sh"]\nshards = 4\n')
    write(client, namespace, "sh", "alltime", {"a": 1})
    write(client, namespace, "anon", "alltime", {"b": 2, "c": 3})  # served by [default]
    merger = TopKMerger(client, catalog, namespace, k=5)
    assert merger.discover() == ["anon", "sh"]
    assert merger.run_once(now_ms()).windows == 2
    assert stored(client, f"{namespace}:{{anon}}:top:alltime") == [("c", 3), ("b", 2)]


def test_readers_never_see_a_missing_or_partial_global_key(
    client: RedisClient, catalog: GameCatalog, namespace: str
) -> None:
    """Merges run back to back while scores change; a poller checks every snapshot."""
    k = 200
    board = random_board(8, 2000, spread=100_000)
    write(client, namespace, "wide", "alltime", board)
    merger = TopKMerger(client, catalog, namespace, k=k)
    merger.run_once(now_ms(), ["wide"])
    key = f"{namespace}:{{wide}}:top:alltime"
    reader = BoardReader(client, catalog, namespace)
    stop = threading.Event()
    errors: list[BaseException] = []
    passes = [0]

    def churn() -> None:  # top players keep gaining points
        rng = random.Random(9)
        players = sorted(board, key=board.__getitem__, reverse=True)[:400]
        try:
            while not stop.is_set():
                p = rng.choice(players)
                client.zincrby(board_key(namespace, "wide", "alltime", p), 1000, p)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def merge() -> None:
        try:
            while not stop.is_set():
                merger.run_once(now_ms(), ["wide"])
                passes[0] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn), threading.Thread(target=merge)]
    for thread in threads:
        thread.start()
    seen: set[tuple[tuple[str, int], ...]] = set()
    deadline = time.monotonic() + 3.0
    polls = 0
    try:
        while time.monotonic() < deadline:
            snapshot = stored(client, key)
            assert len(snapshot) == k + 1, f"global key had {len(snapshot)} members"
            assert snapshot == sorted(
                snapshot, key=lambda pc: (pc[1], pc[0].encode()), reverse=True
            )
            assert len({p for p, _ in snapshot}) == k + 1
            seen.add(tuple(snapshot))
            page = reader.top("wide", "alltime", 50, 150, now_ms=now_ms())
            assert len(page["entries"]) == 50 and page["nextCursor"] is not None
            polls += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert passes[0] >= 10 and polls >= 100
    assert len(seen) >= 5  # the key really changed under the poller


@pytest.mark.cluster
def test_on_the_cluster_shards_spread_over_nodes(
    cluster_client: RedisCluster, catalog: GameCatalog, namespace: str
) -> None:
    board = random_board(10, 4000)
    write(cluster_client, namespace, "wide", "alltime", board)
    shard_keys = [f"{namespace}:{{wide/{i}}}:alltime" for i in range(8)]
    nodes = {cluster_client.get_node_from_key(key).name for key in shard_keys}
    assert len(nodes) >= 2, nodes
    report = TopKMerger(cluster_client, catalog, namespace).run_once(now_ms(), ["wide"])
    assert (report.windows, report.read) == (1, 4000)
    assert stored(cluster_client, f"{namespace}:{{wide}}:top:alltime") == oracle(board)[:1001]
    reader = BoardReader(cluster_client, catalog, namespace)
    page = reader.top("wide", "alltime", 10, 990, now_ms=now_ms())
    assert scores(page) == [p for p, _ in oracle(board)[990:1000]]


def test_lb_topk_run_once(
    redis_client: RedisClient, namespace: str, redis_url: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    write(redis_client, namespace, "sh", "alltime", random_board(11, 100))
    env = {
        **os.environ,
        "LB_REDIS_URL": redis_url,
        "LB_NAMESPACE": namespace,
        "LB_GAMES": str(games),
        "LB_REDIS_CLUSTER": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lb.cli", "topk", "run", "--once", "--k", "10"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["windows"] == 1 and report["written"] == 1
    assert len(stored(redis_client, f"{namespace}:{{sh}}:top:alltime")) == 11
    # One pass has no next tick to refresh its key: it lives minutes, not seconds.
    assert report["ttlSeconds"] == 300
    assert 290_000 < redis_client.pttl(f"{namespace}:{{sh}}:top:alltime") <= 300_000
