"""Replicated local services: a 3-node KRaft quorum and a Redis Cluster with replicas.

``lb up --replicated`` starts them on loopback addresses of their own
(127.0.0.2-4 for the brokers, 127.0.0.5-10 for the Redis nodes: any 127.0.0.x
binds without setup), so every server looks like a host of its own with the
same ports (Kafka 29192, its controller 29193; Redis 17201, its bus 27201:
apart from the single-node services, so a mistake cannot join the two). The
fault suite starts the same layout on the addresses of a bridge, where job
processes in network namespaces reach it.

Kafka: three nodes, each broker and controller (a controller quorum of 3),
every topic with 3 replicas and ``min.insync.replicas`` 2, the internal ones
(consumer offsets, transactions) too: a producer on ``acks=all`` keeps writing
with one broker lost. Redis: six nodes, three masters with one replica each;
a master that fails is replaced by its replica after the node timeout.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.errors import ServiceError
from infra import kafka
from infra import redis as redis_infra
from infra.process import pid_alive, started, stop_pid, wait_until

BROKERS = 3
REDIS_NODES = 6
#: The first address of ``lb up --replicated``; the next ones follow it.
DEFAULT_FIRST_ADDRESS = "127.0.0.2"
DEFAULT_KAFKA_PORT = 29192
DEFAULT_REDIS_PORT = 17201


def addresses(first: str, count: int) -> list[str]:
    """``count`` consecutive IPv4 addresses from ``first``."""
    start = ipaddress.IPv4Address(first)
    return [str(start + i) for i in range(count)]


@dataclass(frozen=True)
class ReplicatedLayout:
    """Where the replicated services listen and keep their state."""

    home: Path
    kafka_hosts: tuple[str, ...]
    redis_hosts: tuple[str, ...]
    kafka_port: int = DEFAULT_KAFKA_PORT
    redis_port: int = DEFAULT_REDIS_PORT
    #: How long a Redis node may be unreachable before its replica takes over.
    node_timeout_ms: int = 5000
    heap: str = "512m"

    @classmethod
    def on(cls, home: Path, first: str, **kwargs: Any) -> ReplicatedLayout:
        """Brokers on ``first`` and the next two addresses, Redis on the six after."""
        hosts = addresses(first, BROKERS + REDIS_NODES)
        return cls(home, tuple(hosts[:BROKERS]), tuple(hosts[BROKERS:]), **kwargs)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers())

    @property
    def redis_url(self) -> str:
        """One node of the cluster (a cluster-aware client finds the others)."""
        return f"redis://{self.redis_hosts[0]}:{self.redis_port}"

    def brokers(self) -> list[kafka.KafkaLayout]:
        voters = tuple(
            f"{i + 1}@{host}:{self.kafka_port + 1}" for i, host in enumerate(self.kafka_hosts)
        )
        return [
            kafka.KafkaLayout(
                home=self.home / "kafka" / str(i + 1),
                port=self.kafka_port,
                host=host,
                node_id=i + 1,
                voters=voters,
                replication=len(self.kafka_hosts),
                heap=self.heap,
            )
            for i, host in enumerate(self.kafka_hosts)
        ]

    def redis_nodes(self) -> list[redis_infra.RedisNode]:
        return [
            redis_infra.RedisNode(
                home=self.home / "redis" / host,
                port=self.redis_port,
                host=host,
                cluster=True,
                cluster_node_timeout_ms=self.node_timeout_ms,
            )
            for host in self.redis_hosts
        ]

    def cluster_id(self) -> str:
        """The quorum's KRaft cluster id, drawn once and kept beside the data."""
        path = self.home / "kafka" / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        cluster_id = kafka.new_cluster_id()
        path.write_text(cluster_id)
        return cluster_id


@dataclass
class Pids:
    """The process of each broker and Redis node (``None``: not started)."""

    kafka: list[int | None]
    redis: list[int | None]

    @classmethod
    def of(cls, record: dict[str, Any]) -> Pids:
        kafka_pids = list(record.get("kafka_pids") or [])
        redis_pids = list(record.get("redis_pids") or [])
        return cls(
            kafka_pids + [None] * (BROKERS - len(kafka_pids)),
            redis_pids + [None] * (REDIS_NODES - len(redis_pids)),
        )

    def alive(self) -> Iterable[int]:
        return (pid for pid in [*self.kafka, *self.redis] if pid and pid_alive(pid))


def up(layout: ReplicatedLayout, cache_dir: Path, pids: Pids, timeout_s: float = 120.0) -> Pids:
    """Start every node that is not running (idempotent) and wait until both clusters serve.

    Brokers start together (a KRaft quorum needs two of three voters before
    any of them answers); a node already running is kept as it is.
    """
    cluster_id = layout.cluster_id()
    spawned: list[int] = []
    try:
        for i, broker in enumerate(layout.brokers()):
            if not pid_alive(pids.kafka[i]):
                pids.kafka[i] = kafka.spawn_broker(broker, cache_dir, cluster_id)
                spawned.append(int(pids.kafka[i] or 0))
        for i, broker in enumerate(layout.brokers()):
            wait_until(
                lambda b=broker: _serves(b),  # type: ignore[misc]
                timeout_s,
                f"Kafka {broker.bootstrap}",
                pids.kafka[i],
                broker.server_log,
            )
    except BaseException:
        for pid in spawned:
            stop_pid(pid)
        raise
    nodes = layout.redis_nodes()
    for i, node in enumerate(nodes):
        if not pid_alive(pids.redis[i]):
            pids.redis[i] = redis_infra.start_node(node)
    redis_infra.create_cluster(nodes, timeout_s=timeout_s, replicas=1)
    wait_until(
        lambda: all(_in_sync(n) for n in nodes), timeout_s, "Redis replicas", None, nodes[0].log
    )
    return pids


def _serves(broker: kafka.KafkaLayout) -> bool:
    """The node answers metadata naming every broker of the quorum."""
    from confluent_kafka.admin import AdminClient

    if not kafka.answers_metadata(broker.bootstrap):
        return False
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    try:
        return len(admin.list_topics(timeout=2.0).brokers) == BROKERS
    except Exception:
        return False


def _in_sync(node: redis_infra.RedisNode) -> bool:
    """A master, or a replica whose link to its master is up."""
    role = redis_infra.replication(node)
    return role.get("role") == "master" or role.get("link") == "up"


def start_broker(layout: ReplicatedLayout, index: int, cache_dir: Path) -> int:
    """Start broker ``index`` again (after a kill); it rejoins the quorum. Its pid."""
    broker = layout.brokers()[index]
    pid = kafka.spawn_broker(broker, cache_dir, layout.cluster_id())
    return started(pid, lambda: kafka.wait_broker(broker, pid))


def kill(pid: int | None) -> None:
    """SIGKILL one node (the crash the fault suite injects); returns once it is gone."""
    if pid and pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    stop_pid(pid)


def down(pids: Pids) -> int:
    """Stop every node, the brokers first and together; how many were running.

    One at a time, the last broker would wait for a controller quorum that is
    already gone; asked together, each shuts down with the others still there.
    """
    running = list(pids.alive())
    for pid in pids.kafka:
        if pid and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    for pid in [*pids.kafka, *pids.redis]:
        stop_pid(pid, timeout_s=60)
    if any(pid_alive(pid) for pid in running):
        raise ServiceError("replicated services still running after lb down")
    return len(running)


def status(layout: ReplicatedLayout, pids: Pids) -> dict[str, Any]:
    """Brokers, every topic's partition leaders and in-sync replicas, Redis roles."""
    brokers = [
        {"id": b.node_id, "address": b.bootstrap, "up": pid_alive(pid)}
        for b, pid in zip(layout.brokers(), pids.kafka, strict=True)
    ]
    nodes = [
        {"address": n.address, "up": pid_alive(pid), **redis_infra.replication(n)}
        for n, pid in zip(layout.redis_nodes(), pids.redis, strict=True)
    ]
    return {
        "bootstrap": layout.bootstrap,
        "redis_url": layout.redis_url,
        "brokers": brokers,
        "topics": partitions(layout.bootstrap) if any(b["up"] for b in brokers) else {},
        "redis_nodes": nodes,
        "up": all(b["up"] for b in brokers) and all(n["up"] for n in nodes),
    }


def partitions(bootstrap: str, timeout_s: float = 3.0) -> dict[str, list[dict[str, Any]]]:
    """``{topic: [{"partition", "leader", "replicas", "isr"}, ...]}`` (``{}``: no answer)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception:
        return {}
    return {
        name: [
            {
                "partition": p.id,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isrs),
            }
            for p in sorted(topic.partitions.values(), key=lambda p: p.id)
        ]
        for name, topic in sorted(meta.topics.items())
    }
