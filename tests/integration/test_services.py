"""The foundation against the real engines: Kafka round trips, Redis, Redis Cluster,
and the service lifecycle (idempotent up, restart keeps data, down leaves nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from redis.cluster import RedisCluster

from adapters.kafka import read_topic
from adapters.redis import RedisClient
from domain.errors import ServiceError
from infra import redis as redis_infra
from infra import services as svc
from infra.process import pid_alive, port_open, spawn, stop_pid, wait_until


def test_kafka_produce_and_read_back(kafka_bootstrap: str, topic: str) -> None:
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"}
    )
    sent = {f"player-{i}".encode(): f"value-{i}".encode() for i in range(500)}
    for key, value in sent.items():
        producer.produce(
            topic, key=key, value=value, timestamp=1_700_000_000_000, headers={"h": b"1"}
        )
    assert producer.flush(30) == 0
    got = read_topic({"bootstrap.servers": kafka_bootstrap}, topic)
    assert {m.key(): m.value() for m in got} == sent
    assert {m.timestamp()[1] for m in got} == {1_700_000_000_000}
    assert all(m.headers() == [("h", b"1")] for m in got)
    # Same key, same partition: the producer's partitioner keeps a player's events ordered.
    by_key: dict[bytes, set[int]] = {}
    for m in got:
        by_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(parts) == 1 for parts in by_key.values())
    assert len({m.partition() for m in got}) > 1


def test_redis_sorted_set_round_trip(redis_client: RedisClient, namespace: str) -> None:
    key = f"{namespace}:{{g1}}:alltime"
    redis_client.zadd(key, {"p1": 10.0, "p2": 30.0, "p3": 20.0})
    assert redis_client.zrevrange(key, 0, -1, withscores=True) == [
        (b"p2", 30.0),
        (b"p3", 20.0),
        (b"p1", 10.0),
    ]
    assert redis_client.zrevrank(key, "p1") == 2
    info = redis_client.config_get("appendonly")
    assert info["appendonly"] == "yes"
    assert redis_client.config_get("appendfsync")["appendfsync"] == "everysec"


@pytest.mark.cluster
def test_redis_cluster_spreads_slots_and_keeps_hash_tags_together(
    cluster_client: RedisCluster, namespace: str
) -> None:
    nodes: dict[int, set[str]] = {}
    for game in range(30):
        for window in ("alltime", "weekly:2026-W18", "daily:2026-05-04"):
            key = f"{namespace}:{{g{game}}}:{window}"
            cluster_client.zadd(key, {"p1": float(game)})
            nodes.setdefault(game, set()).add(cluster_client.get_node_from_key(key).name)
    # One game's windows share a slot (so a MULTI over them is legal) ...
    assert all(len(names) == 1 for names in nodes.values())
    # ... and games spread over all three masters.
    assert len({next(iter(n)) for n in nodes.values()}) == 3
    key = f"{namespace}:{{g7}}:alltime"
    node = cluster_client.get_node_from_key(key)
    conn = cluster_client.get_redis_connection(node)
    pipe = conn.pipeline(transaction=True)
    pipe.zadd(key, {"p2": 5.0})
    pipe.zadd(f"{namespace}:{{g7}}:daily:2026-05-04", {"p2": 5.0})
    assert pipe.execute() == [1, 1]
    assert cluster_client.zcard(key) == 2


@pytest.mark.slow
def test_service_lifecycle_in_a_private_state_dir(tmp_path: Path, services: dict[str, Any]) -> None:
    """Own ports and state dir: up twice is harmless, a broker restart keeps records,
    down leaves no process and no listener."""
    from config.settings import Settings

    cache = Settings.from_env().cache_dir
    dirs = svc.ServiceDirs(state_dir=tmp_path / "state", cache_dir=cache)
    ports = {"kafka_port": 29592, "redis_port": 26979}
    try:
        first = svc.up(dirs, **ports)
        record = svc.read_record(dirs)
        second = svc.up(dirs, **ports)
        assert first == second
        assert svc.read_record(dirs) == record, "second up must reuse the running servers"

        bootstrap = first["kafka"]
        topic = f"lifecycle-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=2)])[topic].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce(topic, key=str(i).encode(), value=str(i).encode())
        assert producer.flush(30) == 0

        svc.down(dirs)
        assert not port_open("127.0.0.1", ports["kafka_port"])
        svc.up(dirs, **ports)
        got = read_topic({"bootstrap.servers": bootstrap}, topic)
        assert sorted(int(m.value()) for m in got) == list(range(100))

        # The CLI speaks the same record: status --json names both services.
        cli = subprocess.run(
            [sys.executable, "-m", "lb.cli", "status", "--json"],
            capture_output=True,
            text=True,
            env={
                "LB_STATE_DIR": str(dirs.state_dir),
                "PATH": "/usr/bin:/bin",
                "HOME": str(Path.home()),
            },
            check=True,
        )
        doc = json.loads(cli.stdout)
        assert doc["kafka"] == f"127.0.0.1:{ports['kafka_port']}"
        assert doc["redis"] == f"redis://127.0.0.1:{ports['redis_port']}/0"
    finally:
        pids = [p for _, p in svc._all_pids(svc.read_record(dirs))]
        svc.down(dirs)
    assert not any(pid_alive(p) for p in pids)
    assert not port_open("127.0.0.1", ports["kafka_port"])
    assert not port_open("127.0.0.1", ports["redis_port"])


def test_a_redis_loading_its_aof_is_waited_for_and_a_failed_start_leaves_nothing(
    tmp_path: Path,
) -> None:
    """``-LOADING`` is progress, not failure; a node that misses its budget is stopped.

    A dev Redis that held benchmark boards reloads GBs of AOF for a minute or more;
    ``lb up`` once gave up after 30 s and left that server running unrecorded on the
    port. ``key-load-delay`` (us per command) makes a 20,000-command AOF load for ~9 s
    (Redis serves clients only between batches of 1,024 replayed commands).
    """
    port = 26989
    node = redis_infra.RedisNode(
        home=tmp_path / "slow",
        port=port,
        extra_config=("key-load-delay 400",),
    )
    pid = redis_infra.start_node(node)
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        # Separate commands (a script or MULTI would be replayed as one block).
        pipe = client.pipeline(transaction=False)
        for i in range(20_000):
            pipe.set(f"k{i}", i)
        pipe.execute()
        client.close()
    finally:
        stop_pid(pid)
    svc.wait_for_port_release(port)

    server = redis_infra.require_binary("redis-server", "redis-server")
    pid = spawn([server, str(node.conf)], node.home / "stdout.log", cwd=node.home)
    try:
        seen: list[str] = []

        def answers() -> bool:
            seen.append(redis_infra.state(port))
            return seen[-1] != "down"

        wait_until(answers, 30, "Redis", pid, node.log)
        assert seen[-1] == "loading"
        with pytest.raises(ServiceError, match="loading its AOF"):
            redis_infra.wait_ready(node, pid, load_timeout_s=0.2)
        redis_infra.wait_ready(node, pid)
        assert redis_infra.state(port) == "ready"
        assert redis.Redis(host="127.0.0.1", port=port).dbsize() == 20_000
    finally:
        stop_pid(pid)
    svc.wait_for_port_release(port)

    # A start that misses its budget stops the server it spawned.
    with pytest.raises(ServiceError, match="did not become ready"):
        redis_infra.start_node(node, timeout_s=0)
    left = subprocess.run(["pgrep", "-f", str(node.conf)], capture_output=True, check=False)
    assert left.returncode == 1, f"a redis-server outlived its failed start: {left.stdout!r}"
    assert not port_open("127.0.0.1", port)
