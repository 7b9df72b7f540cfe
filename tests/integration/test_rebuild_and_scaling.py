"""``lb rebuild`` reproduces the live boards with an atomic swap, and two
cooperating processes build the same boards as one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient, text
from tests.integration.streams import (
    GAMES_TOML,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_boards,
    stream_and_env,
)

pytestmark = pytest.mark.slow


def _meta(client: RedisClient, namespace: str, suffix: str) -> dict[str, dict[Any, Any]]:
    return {
        text(k): client.hgetall(k) for k in client.scan_iter(match=f"{namespace}:*:meta:{suffix}")
    }


def test_rebuild_swaps_in_identical_boards_and_readers_never_see_a_gap(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=11, count=8000)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    live = read_boards(redis_client, namespace)
    expected, _ = oracle(stream.records)
    assert live == expected
    stats = _meta(redis_client, namespace, "stats")

    # Damage the projection: a lost board, a foreign member, a stray board.
    board = f"{namespace}:{{gbest}}:alltime"
    redis_client.delete(f"{namespace}:{{gincr}}:alltime")
    redis_client.zadd(board, {"intruder": 1.0})
    redis_client.zadd(f"{namespace}:{{gbest}}:daily:1999-01-01", {"ghost": 1.0})
    friends = f"{namespace}:{{gbest}}:friends:p0001"
    redis_client.sadd(friends, "p0002", "p0003")  # not the job's: must survive
    damaged_size = redis_client.zcard(board)

    sizes: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            sizes.append(int(redis_client.zcard(board)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        done = lb(["rebuild"], env, timeout=300)
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_boards(redis_client, namespace) == expected
    assert _meta(redis_client, namespace, "stats") == stats
    assert not list(redis_client.scan_iter(match=f"{namespace}~rebuild:*"))
    assert redis_client.smembers(friends) == {b"p0002", b"p0003"}
    redis_client.delete(friends)
    # Readers saw the damaged board, then the rebuilt one: never empty, never partial.
    assert sizes and set(sizes) <= {damaged_size, len(expected["gbest:alltime"])}
    assert 0 not in sizes

    # The live job restarted after the rebuild skips what the rebuild applied.
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    assert read_boards(redis_client, namespace) == expected
    assert _meta(redis_client, namespace, "stats") == stats


def test_two_processes_build_the_same_boards_as_one(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    stream = generate(seed=12, count=8000)
    produce(kafka_bootstrap, topic, stream.records)
    one, two = f"{namespace}a", f"{namespace}b"
    env_one = job_env(topic, one, tmp_path / "one", games)
    env_two = job_env(topic, two, tmp_path / "two", games)
    assert lb(["run", "--until-end"], env_one, timeout=300).returncode == 0
    done = lb(["run", "--until-end", "--processes", "2"], env_two, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    boards_one, boards_two = read_boards(redis_client, one), read_boards(redis_client, two)
    expected, _ = oracle(stream.records)
    assert boards_one == expected
    assert boards_two == expected
    stats_two = {k.replace(two, one): v for k, v in _meta(redis_client, two, "stats").items()}
    assert _meta(redis_client, one, "stats") == stats_two
    # Both processes did work: each wrote the watermarks of the partitions it owns.
    owners = {field for fields in _meta(redis_client, two, "wm").values() for field in fields}
    assert len(owners) == 4
    for key in list(redis_client.scan_iter(match=f"{one}:*")) + list(
        redis_client.scan_iter(match=f"{two}:*")
    ):
        redis_client.delete(key)
