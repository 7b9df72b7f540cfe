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

from adapters.redis import text_of
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
    #: The address it binds (a loopback address of its own in ``lb up --replicated``).
    host: str = "127.0.0.1"
    #: How long a cluster node may be unreachable before its replica takes over.
    cluster_node_timeout_ms: int = 5000
    #: More ``redis.conf`` lines (tests: e.g. ``key-load-delay`` to slow loading).
    extra_config: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

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
        f"bind {node.host}",
        f"port {node.port}",
        # Protected mode refuses every peer but 127.0.0.1: a node of its own
        # loopback address (or on a test bridge) must hear its replicas.
        f"protected-mode {'yes' if node.host == '127.0.0.1' else 'no'}",
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
            # Peers learn a node's address from what it announces, and its
            # outgoing bus links leave from its own address: a node on
            # 127.0.0.5 is never mistaken for one on 127.0.0.1.
            f"cluster-announce-ip {node.host}",
            f"bind-source-addr {node.host}",
            f"cluster-node-timeout {node.cluster_node_timeout_ms}",
        ]
    lines += node.extra_config
    node.conf.write_text("\n".join(lines) + "\n")


def state(port: int, host: str = "127.0.0.1") -> str:
    """``"ready"``, ``"loading"`` (it answers, still reading its AOF) or ``"down"``."""
    if not port_open(host, port):
        return "down"
    try:
        # No retries: redis-py's default backs off for seconds on -LOADING (a
        # ConnectionError to it), which would hide the very state asked for.
        client = redis.Redis(
            host=host,
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


def pings(port: int, host: str = "127.0.0.1") -> bool:
    """True when the node on ``port`` answers PING (and is not still loading its AOF)."""
    return state(port, host) == "ready"


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
    what = f"Redis {node.address}"
    wait_until(lambda: state(node.port, node.host) != "down", timeout_s, what, pid, node.log)
    wait_until(
        lambda: pings(node.port, node.host),
        load_timeout_s,
        f"{what} loading its AOF",
        pid,
        node.log,
    )


def start_node(node: RedisNode, timeout_s: float = START_TIMEOUT_S) -> int:
    """Start one node and wait until it is ready; returns its pid.

    A node that does not become ready is stopped before the error is raised.
    """
    if port_open(node.host, node.port):
        raise ServiceError(f"{node.address} is already taken by another program")
    server = require_binary("redis-server", "redis-server")
    _write_conf(node)
    pid = spawn([server, str(node.conf)], node.home / "stdout.log", cwd=node.home)
    return started(pid, lambda: wait_ready(node, pid, timeout_s))


def cluster_ok(port: int, host: str = "127.0.0.1") -> bool:
    """True when the cluster seen from ``host:port`` reports ``cluster_state:ok``."""
    try:
        client = redis.Redis(host=host, port=port, socket_timeout=1.0)
        try:
            info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        finally:
            client.close()
    except redis.RedisError:
        return False
    text = text_of(info)
    return "cluster_state:ok" in text


def _knows_peers(port: int, host: str) -> bool:
    client = redis.Redis(host=host, port=port, socket_timeout=1.0)
    try:
        nodes = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return False
    finally:
        client.close()
    text = text_of(nodes)
    return len([line for line in text.splitlines() if line.strip()]) > 1


def create_cluster(nodes: list[RedisNode], timeout_s: float = 30.0, replicas: int = 0) -> None:
    """Join fresh nodes into a cluster (no-op when already formed).

    ``replicas`` per master: with 1, six nodes make three masters each with a
    replica that takes over when its master stops (the failover fault test).
    """
    if cluster_ok(nodes[0].port, nodes[0].host):
        return
    if _knows_peers(nodes[0].port, nodes[0].host):
        # Restarted nodes rejoin from nodes.conf; give them time to agree.
        wait_until(
            lambda: all(cluster_ok(n.port, n.host) for n in nodes),
            timeout_s,
            "Redis Cluster",
            None,
            nodes[0].log,
        )
        return
    cli = require_binary("redis-cli", "redis-tools")
    argv = [cli, "--cluster", "create"]
    argv += [n.address for n in nodes]
    argv += ["--cluster-replicas", str(replicas), "--cluster-yes"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise ServiceError(
            f"redis-cli --cluster create failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    wait_until(
        lambda: all(cluster_ok(n.port, n.host) for n in nodes),
        timeout_s,
        "Redis Cluster",
        None,
        nodes[0].log,
    )


def replication(node: RedisNode) -> dict[str, object]:
    """The node's role as it reports it: ``{"role", "master", "link"}`` (``{}``: down)."""
    client = redis.Redis(host=node.host, port=node.port, socket_timeout=1.0)
    try:
        info = client.info("replication")
    except redis.RedisError:
        return {}
    finally:
        client.close()
    if info.get("role") == "master":
        return {"role": "master", "replicas": int(info.get("connected_slaves", 0))}
    return {
        "role": "replica",
        "master": f"{info.get('master_host')}:{info.get('master_port')}",
        "link": info.get("master_link_status"),
    }
