"""Approximate percentiles against real Redis (standalone and cluster).

Boards of 200K players are written with pipelined ZADD of composites computed
here from first principles (``score * slots + (slots - 1 - slot)``, shard =
CRC-32 % shards); every player then improves several times by new values
written over the old ones. The publisher rebuilds the sketch from the boards,
and the reader's approximate percentile of sampled players is compared with
the exact one counted by Redis itself: ``ZCOUNT key -inf (score*slots`` summed
over the shards, over the summed ``ZCARD``.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import redis.asyncio
from redis.cluster import RedisCluster

from adapters.redis import RedisClient
from domain.games import GameCatalog, GameConfig
from domain.ranking import percentile as exact_percentile
from domain.sketches import DEFAULT_K, HEADER_SIZE, PublishedSketch, sketch_key
from domain.windows import WindowKind, window_for
from jobs.sketch_publisher import SketchPublisher
from lb import cli
from readers.sketches import SketchCache, approximate_percentile, published_sketch

NOW_MS = int(datetime(2026, 5, 6, 12, 0, tzinfo=UTC).timestamp() * 1000)  # a Wednesday
ALLTIME_SLOTS = (datetime(2040, 1, 1, tzinfo=UTC) - datetime(2020, 1, 1, tzinfo=UTC)).days * 86_400
ALLTIME = window_for(WindowKind.ALLTIME, NOW_MS)
GAMES = {"g": GameConfig(), "sh": GameConfig(shards=4), "sh6": GameConfig(shards=6)}


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Each test runs on standalone Redis and on the 3-master cluster."""
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


def shard_key(ns: str, game: str, window_id: str, player: str) -> str:
    shards = GAMES[game].shards
    tag = game if shards == 1 else f"{game}/{zlib.crc32(player.encode()) % shards}"
    return f"{ns}:{{{tag}}}:{window_id}"


def write(
    client: RedisClient,
    ns: str,
    game: str,
    window_id: str,
    slots: int,
    players: np.ndarray,
    scores: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """ZADD the given players' scores (at random tie-break slots), pipelined."""
    slot = rng.integers(0, slots, players.size)
    by_key: dict[str, dict[str, int]] = {}
    for player, score, s in zip(players.tolist(), scores.tolist(), slot.tolist(), strict=True):
        name = f"p{player}"
        by_key.setdefault(shard_key(ns, game, window_id, name), {})[name] = score * slots + (
            slots - 1 - s
        )
    pipe = client.pipeline(transaction=False)
    for key, mapping in by_key.items():
        items = list(mapping.items())
        for i in range(0, len(items), 5000):
            pipe.zadd(key, dict(items[i : i + 5000]))
            if len(pipe) >= 20:
                pipe.execute()
    pipe.execute()


def improving_board(
    client: RedisClient, ns: str, game: str, players: int, rounds: int, seed: int
) -> np.ndarray:
    """Write ``players`` first scores, then ``rounds`` of improvements over them.

    Returns every player's current score. After this the board holds one
    member per player: what a correct sketch must count, once each.
    """
    rng = np.random.default_rng(seed)
    current = np.floor(rng.lognormal(7.0, 1.5, players)).astype(np.int64)
    write(client, ns, game, "alltime", ALLTIME_SLOTS, np.arange(players), current, rng)
    for _ in range(rounds):
        movers = np.flatnonzero(rng.random(players) < 0.7)
        current[movers] += (
            np.floor(current[movers] * rng.uniform(0.01, 0.6, movers.size)).astype(np.int64) + 1
        )
        write(client, ns, game, "alltime", ALLTIME_SLOTS, movers, current[movers], rng)
    return current


def exact_from_redis(
    client: RedisClient, ns: str, game: str, scores: list[int]
) -> tuple[list[int], int]:
    """Players strictly below each score (ZCOUNT below ``score*slots``) and ZCARD, summed."""
    shards = GAMES[game].shards
    tags = [game] if shards == 1 else [f"{game}/{i}" for i in range(shards)]
    keys = [f"{ns}:{{{tag}}}:alltime" for tag in tags]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.zcard(key)
    for score in scores:
        for key in keys:
            pipe.zcount(key, "-inf", f"({score * ALLTIME_SLOTS}")
    answers = pipe.execute()
    total = sum(answers[: len(keys)])
    counts = np.array(answers[len(keys) :]).reshape(len(scores), len(keys)).sum(axis=1)
    return counts.tolist(), total


def publisher(client: RedisClient, ns: str) -> SketchPublisher:
    return SketchPublisher(client, GameCatalog(GAMES, None), ns)


@pytest.mark.parametrize("game", ["g", "sh"])
def test_published_percentiles_are_within_half_a_point_of_exact(
    client: RedisClient, namespace: str, game: str
) -> None:
    players = 200_000
    current = improving_board(client, namespace, game, players, rounds=3, seed=7)

    [alltime, *others] = publisher(client, namespace).publish([game], NOW_MS)

    assert (alltime.window_id, alltime.n, alltime.shards) == (
        "alltime",
        players,
        GAMES[game].shards,
    )
    assert all(p.n == 0 for p in others)  # no daily/weekly boards were written
    assert client.pttl(sketch_key(namespace, game, "alltime")) == -1  # all-time never expires

    rng = np.random.default_rng(99)
    sample = rng.choice(players, size=3000, replace=False)
    scores = [int(current[i]) for i in sample]
    lower, total = exact_from_redis(client, namespace, game, scores)
    assert total == players
    cache = SketchCache()
    worst = 0.0
    for score, below in zip(scores, lower, strict=True):
        approx = approximate_percentile(
            client, namespace, game, GAMES[game], ALLTIME, score, cache=cache
        )
        assert approx is not None
        worst = max(worst, abs(approx - exact_percentile(below, total)))
    assert worst < 0.5
    # The ZCOUNT oracle agrees with the scores this test wrote.
    ordered = np.sort(current)
    assert lower == np.searchsorted(ordered, scores, side="left").tolist()


@pytest.mark.cluster
def test_a_game_split_over_shards_on_the_cluster_merges_every_shard(
    cluster_client: RedisCluster, namespace: str
) -> None:
    players = 200_000
    current = improving_board(cluster_client, namespace, "sh6", players, rounds=4, seed=3)
    keys = [f"{namespace}:{{sh6/{i}}}:alltime" for i in range(6)]
    nodes = {cluster_client.get_node_from_key(key).name for key in keys}
    assert len(nodes) > 1  # the shards really live on different masters

    publication = publisher(cluster_client, namespace).publish_board(
        "sh6", GAMES["sh6"], ALLTIME, NOW_MS
    )
    assert (publication.n, publication.shards) == (players, 6)

    sample = np.random.default_rng(5).choice(players, size=2000, replace=False)
    scores = [int(current[i]) for i in sample]
    lower, total = exact_from_redis(cluster_client, namespace, "sh6", scores)
    cache = SketchCache()
    worst = 0.0
    for score, below in zip(scores, lower, strict=True):
        approx = approximate_percentile(
            cluster_client, namespace, "sh6", GAMES["sh6"], ALLTIME, score, cache=cache
        )
        assert approx is not None
        worst = max(worst, abs(approx - exact_percentile(below, total)))
    assert worst < 0.5


def test_windowed_sketch_expires_with_its_board_and_empty_boards_have_none(
    client: RedisClient, namespace: str
) -> None:
    now = time.time_ns() // 1_000_000  # the real clock: Redis expires keys by it
    day = window_for(WindowKind.DAILY, now)
    config = GAMES["g"]
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 1000, 800)
    write(client, namespace, "g", day.id, 86_400, np.arange(800), scores, rng)
    pub = publisher(client, namespace)

    [publication] = [p for p in pub.publish(["g"], now) if p.window_id == day.id]

    key = sketch_key(namespace, "g", day.id)
    expire_at = config.expire_at_ms(day)
    assert expire_at is not None
    assert publication.n == 800
    assert abs(client.pexpiretime(key) - expire_at) <= 1
    # 800 players <= k: the sketch is exact, so the answer equals the exact percentile.
    probe = int(scores[0])
    exact = exact_percentile(int((scores < probe).sum()), 800)
    assert approximate_percentile(client, namespace, "g", config, day, probe) == exact

    client.delete(f"{namespace}:{{g}}:{day.id}")  # the board is gone (e.g. retracted)
    [again] = [p for p in pub.publish(["g"], now) if p.window_id == day.id]
    assert again.n == 0
    assert client.exists(key) == 0
    fresh = SketchCache()
    assert approximate_percentile(client, namespace, "g", config, day, probe, cache=fresh) is None


def test_reader_cache_rereads_only_a_new_publication(client: RedisClient, namespace: str) -> None:
    config = GAMES["g"]
    rng = np.random.default_rng(2)
    write(
        client,
        namespace,
        "g",
        "alltime",
        ALLTIME_SLOTS,
        np.arange(3000),
        rng.integers(0, 100, 3000),
        rng,
    )
    pub = publisher(client, namespace)
    pub.publish_board("g", config, ALLTIME, NOW_MS)
    clock = [100.0]
    cache = SketchCache(fresh_s=1.0, clock=lambda: clock[0])
    key = sketch_key(namespace, "g", "alltime")

    first = published_sketch(client, namespace, "g", ALLTIME, cache=cache)
    assert first is not None and first.built_at_ms == NOW_MS

    client.delete(key)
    clock[0] += 0.5  # still fresh: answered from memory without asking Redis
    assert published_sketch(client, namespace, "g", ALLTIME, cache=cache) is first
    clock[0] += 1.0  # stale: the header check sees the key is gone
    assert published_sketch(client, namespace, "g", ALLTIME, cache=cache) is None

    pub.publish_board("g", config, ALLTIME, NOW_MS + 1)
    second = published_sketch(client, namespace, "g", ALLTIME, cache=cache)
    assert second is not None and second.built_at_ms == NOW_MS + 1
    clock[0] += 2.0  # same built_at after the header check: the same object is reused
    assert published_sketch(client, namespace, "g", ALLTIME, cache=cache) is second
    header = client.getrange(key, 0, HEADER_SIZE - 1)
    assert PublishedSketch.decode(client.get(key)).built_at_ms == NOW_MS + 1
    assert len(header) == HEADER_SIZE

    late = approximate_percentile(
        client, namespace, "g", config, ALLTIME, 50, now_ms=NOW_MS + 120_002, max_age_ms=120_000
    )
    assert late is None  # a publisher that stopped is noticed, not trusted forever
    weekly_only = GameConfig(windows=(WindowKind.WEEKLY,))
    assert approximate_percentile(client, namespace, "g", weekly_only, ALLTIME, 50) is None


def test_cli_publishes_and_shows(
    redis_client: RedisClient,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 10_000, 20_000)
    write(redis_client, namespace, "g", "alltime", ALLTIME_SLOTS, np.arange(20_000), scores, rng)
    games = tmp_path / "games.toml"
    games.write_text('[games."g"]\n')
    monkeypatch.setenv("LB_REDIS_URL", redis_url)
    monkeypatch.setenv("LB_NAMESPACE", namespace)
    monkeypatch.setenv("LB_GAMES", str(games))

    assert cli.main(["sketches", "publish", "--once", "--json"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if '"alltime"' in line]
    assert len(lines) == 1 and '"n": 20000' in lines[0] and f'"k": {DEFAULT_K}' in lines[0]

    assert cli.main(["sketches", "show", "g", "--score", "5000", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"n": 20000' in out and '"percentile": ' in out
    expected = exact_percentile(int((scores < 5000).sum()), 20_000)
    assert abs(json.loads(out)["percentile"] - expected) < 0.5
    assert cli.main(["sketches", "show", "g", "--window", "daily:2026-05-06"]) == 1


def test_rank_beyond_the_exact_tier_takes_the_published_sketch(
    redis_client: RedisClient, namespace: str
) -> None:
    from readers.boards import BoardReader

    games = {"g": GameConfig(exact_tier=100)}
    current = improving_board(redis_client, namespace, "g", 5_000, 2, seed=3)
    reader = BoardReader(redis_client, GameCatalog(games, None), namespace)
    deep = "p4321"
    before = reader.rank("g", deep, "alltime", now_ms=NOW_MS)
    assert before["rank"] is None  # 5,000 players, tier 100: almost surely beyond it
    exact = before["percentile"]  # no sketch yet: the exact count
    lower = int((current < current[4321]).sum())
    assert exact == exact_percentile(lower, current.size)

    SketchPublisher(redis_client, GameCatalog(games, None), namespace).publish(["g"], NOW_MS)
    after = reader.rank("g", deep, "alltime", now_ms=NOW_MS)
    assert after["rank"] is None and after["score"] == before["score"]
    assert after["percentile"] is not None and exact is not None
    assert abs(after["percentile"] - exact) <= 0.5
    top = reader.rank("g", f"p{int(current.argmax())}", "alltime", now_ms=NOW_MS)
    assert top["rank"] == 1  # inside the tier ranks stay exact


def test_rank_beyond_the_tier_reads_the_sketch_header_in_its_own_call(
    client: Any, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's header check rides in the rank script: no GETRANGE round trip, ever."""
    from readers.async_boards import AsyncBoardReader
    from readers.boards import BoardReader

    games = {"g": GameConfig(exact_tier=100)}
    improving_board(client, namespace, "g", 5_000, 1, seed=8)
    reader = BoardReader(client, GameCatalog(games, None), namespace)
    clock = [100.0]
    reader._sketches = SketchCache(fresh_s=1.0, clock=lambda: clock[0])
    key = sketch_key(namespace, "g", "alltime")
    calls: dict[str, int] = {"get": 0, "getrange": 0}

    def counted(name: str) -> Any:
        method = getattr(client, name)

        def wrapper(*args: Any) -> Any:
            calls[name] += 1
            return method(*args)

        return wrapper

    monkeypatch.setattr(client, "get", counted("get"), raising=False)
    monkeypatch.setattr(client, "getrange", counted("getrange"), raising=False)
    publisher = SketchPublisher(client, GameCatalog(games, None), namespace)

    def rank(now_ms: int) -> Any:
        answer = reader.rank("g", "p4321", "alltime", now_ms=now_ms)
        assert answer["rank"] is None and answer["percentile"] is not None
        return answer["percentile"]

    exact = rank(NOW_MS)  # nothing published: the header says so, no GET
    assert calls == {"get": 0, "getrange": 0}
    publisher.publish(["g"], NOW_MS)
    clock[0] += 2
    approx = rank(NOW_MS)  # published since: one GET of the whole sketch
    assert calls == {"get": 1, "getrange": 0} and abs(approx - exact) <= 0.5
    assert reader._sketches.get(client, key).built_at_ms == NOW_MS  # type: ignore[union-attr]
    clock[0] += 0.5
    assert rank(NOW_MS) == approx  # fresh: no header asked
    clock[0] += 2
    assert rank(NOW_MS) == approx  # due: the header came with the rank, unchanged
    assert calls == {"get": 1, "getrange": 0}
    publisher.publish(["g"], NOW_MS + 1)
    clock[0] += 2
    rank(NOW_MS + 1)  # a new sketch: fetched once
    assert calls == {"get": 2, "getrange": 0}
    assert reader._sketches.get(client, key).built_at_ms == NOW_MS + 1  # type: ignore[union-attr]
    client.delete(key)
    clock[0] += 2
    assert rank(NOW_MS + 1) == exact  # gone: the exact count again
    assert calls == {"get": 2, "getrange": 0}
    if isinstance(client, RedisCluster):
        return

    async def through_asyncio() -> list[Any]:
        fast = AsyncBoardReader(reader, redis.asyncio.Redis.from_url(redis_url))
        try:
            return [await fast.rank("g", "p4321", "alltime", now_ms=NOW_MS + 1) for _ in range(2)]
        finally:
            await fast._client.aclose()

    publisher.publish(["g"], NOW_MS + 2)
    clock[0] += 2
    answers = asyncio.run(through_asyncio())
    assert answers[0] == answers[1] == reader.rank("g", "p4321", "alltime", now_ms=NOW_MS + 1)
    assert abs(answers[0]["percentile"] - exact) <= 0.5
    assert calls == {"get": 3, "getrange": 0}


def test_cli_publishes_games_served_only_by_default(
    redis_client: RedisClient,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    # "g" is named nowhere in LB_GAMES: the job created its board from [default]; the
    # publisher finds it by the board registry the job keeps, like the top-K merger does.
    rng = np.random.default_rng(5)
    write(
        redis_client,
        namespace,
        "g",
        "alltime",
        ALLTIME_SLOTS,
        np.arange(500),
        rng.integers(0, 99, 500),
        rng,
    )
    redis_client.sadd(f"{namespace}:{{g}}:meta:boards", "alltime")
    games = tmp_path / "games.toml"
    games.write_text("[default]\n")
    monkeypatch.setenv("LB_REDIS_URL", redis_url)
    monkeypatch.setenv("LB_NAMESPACE", namespace)
    monkeypatch.setenv("LB_GAMES", str(games))

    assert cli.main(["sketches", "publish", "--json"]) == 0
    published = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    alltime = [p for p in published if p["window"] == "alltime"]
    assert [(p["game"], p["n"]) for p in alltime] == [("g", 500)]
