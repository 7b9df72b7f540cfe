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
from redis.backoff import NoBackoff
from redis.retry import Retry

from domain.errors import ServiceError
from infra.process import port_open, require_binary, spawn, started, wait_until

CLUSTER_SIZE = 3
#: How long a node may take to answer at all after it starts.
START_TIMEOUT_S = 30.0
#: How long a node that answers may spend loading its AOF (-LOADING replies):
#: a dev Redis that held 10M-player benchmark boards reloads GBs of AOF.
LOAD_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class RedisNode:
    """One redis-server: its port and its directory (config, AOF, log)."""

    home: Path
    port: int
    cluster: bool = False
    #: How long a cluster node may be unreachable before its replica takes over.
    cluster_node_timeout_ms: int = 5000
    #: More ``redis.conf`` lines (tests: e.g. ``key-load-delay`` to slow loading).
    extra_config: tuple[str, ...] = ()

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
    lines += node.extra_config
    node.conf.write_text("\n".join(lines) + "\n")


def state(port: int) -> str:
    """``"ready"``, ``"loading"`` (it answers, still reading its AOF) or ``"down"``."""
    if not port_open("127.0.0.1", port):
        return "down"
    try:
        # No retries: redis-py's default backs off for seconds on -LOADING (a
        # ConnectionError to it), which would hide the very state asked for.
        client = redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.ping()
            return "ready"
        finally:
            client.close()
    except redis.BusyLoadingError:
        return "loading"
    except redis.RedisError:
        return "down"


def pings(port: int) -> bool:
    """True when the node on ``port`` answers PING (and is not still loading its AOF)."""
    return state(port) == "ready"


def wait_ready(
    node: RedisNode,
    pid: int | None,
    timeout_s: float = START_TIMEOUT_S,
    load_timeout_s: float = LOAD_TIMEOUT_S,
) -> None:
    """Wait until ``node`` answers, then until it has loaded its data.

    Two budgets, because loading is progress: a node silent for ``timeout_s``
    has failed, but one replying ``-LOADING`` gets ``load_timeout_s`` more.
    """
    what = f"Redis :{node.port}"
    wait_until(lambda: state(node.port) != "down", timeout_s, what, pid, node.log)
    wait_until(lambda: pings(node.port), load_timeout_s, f"{what} loading its AOF", pid, node.log)


def start_node(node: RedisNode, timeout_s: float = START_TIMEOUT_S) -> int:
    """Start one node and wait until it is ready; returns its pid.

    A node that does not become ready is stopped before the error is raised.
    """
    if port_open("127.0.0.1", node.port):
        raise ServiceError(f"port {node.port} is already taken by another program")
    server = require_binary("redis-server", "redis-server")
    _write_conf(node)
    pid = spawn([server, str(node.conf)], node.home / "stdout.log", cwd=node.home)
    return started(pid, lambda: wait_ready(node, pid, timeout_s))


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
