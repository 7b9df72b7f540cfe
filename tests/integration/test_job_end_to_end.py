"""The streaming job end to end: real Kafka in, real Redis and the DLQ out, vs an oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from adapters.kafka import header_map
from adapters.redis import RedisClient
from tests.integration.streams import (
    lb,
    oracle,
    read_boards,
    read_dead_letters,
    read_stats,
    stream_and_env,
)


@pytest.mark.parametrize("max_updates", ["1000", "5"])
def test_random_stream_gives_the_oracle_boards_and_every_bad_record_once(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
    max_updates: str,
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=7, count=6000)
    # A cache far smaller than the 150 players x 4 games: values are evicted and
    # read back from Redis all the time, and the boards must not notice.
    env["LB_CACHE_PLAYERS"] = "7"
    # 5: every group write is cut into pieces of a record or two, each its own call.
    env["LB_WRITE_MAX_UPDATES"] = max_updates

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    expected, counts = oracle(stream.records)
    got = read_boards(redis_client, namespace)
    assert set(got) == set(expected)
    for key in expected:
        assert got[key] == expected[key], key

    letters = read_dead_letters(kafka_bootstrap, f"{topic}.dlq")
    by_position = {}
    for msg in letters:
        h = header_map(msg.headers())
        position = (int(h["source.partition"]), int(h["source.offset"]))
        assert position not in by_position, f"dead letter {position} written twice"
        by_position[position] = (h["error.code"], msg.value())
        assert h["error.detail"]
    bad = [r for r in stream.records if r.expected not in ("ok", "duplicate")]
    assert {(r.partition, r.offset): (r.expected, r.value) for r in bad} == by_position
    assert {code for code, _ in by_position.values()} == {
        "DECODE",
        "SCHEMA",
        "SIGNATURE",
        "UNKNOWN_KEY",
        "BOUNDS",
        "FUTURE",
        "UNKNOWN_GAME",
        "LATE",
    }

    # Conservation: every record is applied, an idempotent no-op, or dead-lettered.
    stats = read_stats(redis_client, namespace)
    assert stats["duplicate"] == counts["duplicate"]
    assert stats["applied"] + stats["noop"] == counts["accepted"]
    assert stats["applied"] + stats["noop"] + stats["duplicate"] + len(letters) == len(
        stream.records
    )
    # gtour's tournament refused players (no seat left) and attempts (three used), and
    # counted each, besides the records' own outcome.
    for refusal in ("tournament_full", "attempts_used_up"):
        assert stats[refusal] == counts[refusal] > 0, refusal

    # A second run over the same topic changes nothing (replay is idempotent).
    again = lb(["run", "--until-end", "--no-recovery"], env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_boards(redis_client, namespace) == got
    assert read_stats(redis_client, namespace) == stats
    assert len(read_dead_letters(kafka_bootstrap, f"{topic}.dlq")) == len(letters)


@pytest.mark.cluster
def test_the_job_writes_the_same_boards_to_a_redis_cluster(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    cluster_client: RedisCluster,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=8, count=4000)
    # Small pieces: several calls per group and master, in order, in one pipeline.
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1", LB_WRITE_MAX_UPDATES="9")

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    expected, _ = oracle(stream.records)
    got: dict[str, dict[str, int]] = {}
    nodes_used = set()
    for node in cluster_client.get_primaries():
        boards = read_boards(cluster_client.get_redis_connection(node), namespace)
        if boards:
            nodes_used.add(node.name)
        got.update(boards)
    assert got == expected
    assert len(nodes_used) >= 2, "the games' slots should spread over several masters"
