"""Debian's ``redis-server`` on loopback, standalone or as a 3-master cluster.

One standalone node runs with AOF ``everysec``; on demand, a local cluster.
Every node is a plain foreground ``redis-server <conf>`` started detached;
the cluster is joined once with ``redis-cli --cluster create`` and its
``nodes.conf`` files keep the topology across restarts.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis

from domain.errors import ServiceError
from infra.process import port_open, require_binary, spawn, wait_until

CLUSTER_SIZE = 3


@dataclass(frozen=True)
class RedisNode:
    """One redis-server: its port and its directory (config, AOF, log)."""

    home: Path
    port: int
    cluster: bool = False
    #: How long a cluster node may be unreachable before its replica takes over.
    cluster_node_timeout_ms: int = 5000

    @property
    def conf(self) -> Path:
        return self.home / "redis.conf"

    @property
    def log(self) -> Path:
        return self.home / "redis.log"


def _write_conf(node: RedisNode) -> None:
    node.home.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Written by infra/redis.py: loopback only.",
        "bind 127.0.0.1",
        f"port {node.port}",
        "protected-mode yes",
        "daemonize no",
        f"dir {node.home}",
        f"logfile {node.log}",
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        "maxmemory-policy noeviction",
    ]
    if node.cluster:
        lines += [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            f"cluster-node-timeout {node.cluster_node_timeout_ms}",
        ]
    node.conf.write_text("\n".join(lines) + "\n")


def pings(port: int) -> bool:
    """True when the node on ``port`` answers PING (and is not still loading its AOF)."""
    if not port_open("127.0.0.1", port):
        return False
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def start_node(node: RedisNode, timeout_s: float = 30.0) -> int:
    """Start one node and wait for PING; returns its pid."""
    if port_open("127.0.0.1", node.port):
        raise ServiceError(f"port {node.port} is already taken by another program")
    server = require_binary("redis-server", "redis-server")
    _write_conf(node)
    pid = spawn([server, str(node.conf)], node.home / "stdout.log", cwd=node.home)
    wait_until(lambda: pings(node.port), timeout_s, f"Redis :{node.port}", pid, node.log)
    return pid


def cluster_ok(port: int) -> bool:
    """True when the cluster seen from ``port`` reports ``cluster_state:ok``."""
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
        try:
            info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        finally:
            client.close()
    except redis.RedisError:
        return False
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


def _knows_peers(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
    try:
        nodes = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return False
    finally:
        client.close()
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    return len([line for line in text.splitlines() if line.strip()]) > 1


def create_cluster(nodes: list[RedisNode], timeout_s: float = 30.0, replicas: int = 0) -> None:
    """Join fresh nodes into a cluster (no-op when already formed).

    ``replicas`` per master: with 1, six nodes make three masters each with a
    replica that takes over when its master stops (the failover fault test).
    """
    if cluster_ok(nodes[0].port):
        return
    if _knows_peers(nodes[0].port):
        # Restarted nodes rejoin from nodes.conf; give them time to agree.
        wait_until(
            lambda: all(cluster_ok(n.port) for n in nodes),
            timeout_s,
            "Redis Cluster",
            None,
            nodes[0].log,
        )
        return
    cli = require_binary("redis-cli", "redis-tools")
    argv = [cli, "--cluster", "create"]
    argv += [f"127.0.0.1:{n.port}" for n in nodes]
    argv += ["--cluster-replicas", str(replicas), "--cluster-yes"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise ServiceError(
            f"redis-cli --cluster create failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    wait_until(
        lambda: all(cluster_ok(n.port) for n in nodes),
        timeout_s,
        "Redis Cluster",
        None,
        nodes[0].log,
    )
