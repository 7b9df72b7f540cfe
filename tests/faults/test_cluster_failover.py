"""A Redis Cluster master stops mid-stream; its replica takes over; nothing is lost.

A private six-node cluster (three masters, one replica each, node timeout 2 s)
on ports of its own. The master that owns the busiest game's slot is stopped
with SIGTERM: Redis 7 then waits (``shutdown-timeout``) for its replica to
catch up before exiting, so the replica that the cluster promotes holds every
acknowledged write. Meanwhile the whole cluster answers CLUSTERDOWN or the
connection is refused; the job's sink waits, refreshes its slot map and re-sends
(the watermark guard makes a repeat harmless). The stopped node is started
again and rejoins as a replica.

A second test makes the promoted replica really lack acknowledged writes
(replication is asynchronous): the replica is paused and its link dropped
while the master keeps acknowledging, then the master is SIGKILLed. The job
notices its watermarks are behind what it wrote and re-reads the lost range
from Kafka by itself (docs/DESIGN.md, "Healing").
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from infra import redis as redis_infra
from infra.process import stop_pid
from tests.faults.harness import CLUSTER_BASE_PORT, Scenario, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

NODES = 6
NODE_TIMEOUT_MS = 2000


def _replicas_synced(port: int) -> bool:
    client = redis.Redis(port=port, socket_timeout=1.0)
    try:
        info = client.info("replication")
    except redis.RedisError:
        return False
    finally:
        client.close()
    return info.get("role") == "master" or info.get("master_link_status") == "up"


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Any]]:
    """Six nodes, three masters with a replica each; {port: [node, pid]}; stopped after."""
    home = tmp_path_factory.mktemp("cluster")
    nodes = [
        redis_infra.RedisNode(
            home=home / str(CLUSTER_BASE_PORT + i),
            port=CLUSTER_BASE_PORT + i,
            cluster=True,
            cluster_node_timeout_ms=NODE_TIMEOUT_MS,
        )
        for i in range(NODES)
    ]
    running: dict[int, Any] = {}
    try:
        for node in nodes:
            running[node.port] = [node, redis_infra.start_node(node)]
        redis_infra.create_cluster(nodes, replicas=1)
        wait_for(lambda: all(_replicas_synced(n.port) for n in nodes), 60, "replicas in sync")
        yield running
    finally:
        for _node, pid in running.values():
            stop_pid(pid)


def _master_of(client: RedisCluster, key: str) -> int:
    client.nodes_manager.initialize()
    return int(client.get_node_from_key(key).port)


def test_a_master_fails_over_to_its_replica_and_nothing_is_lost(
    make_scenario: Callable[..., Scenario],
    namespace: str,
    private_env: dict[str, str],
    replicated_cluster: dict[int, Any],
) -> None:
    url = f"redis://127.0.0.1:{CLUSTER_BASE_PORT}"
    private_env.update(LB_REDIS_URL=url, LB_REDIS_CLUSTER="1")
    client = RedisCluster.from_url(url)
    key = f"{namespace}:{{gbest}}:alltime"

    def fail_over(s: Scenario) -> None:
        port = _master_of(client, key)
        node, pid = replicated_cluster[port]
        began = time.monotonic()
        stop_pid(pid)  # SIGTERM: waits for the replica to catch up, then exits
        s.timings["master shutdown"] = time.monotonic() - began
        survivor = next(p for p in replicated_cluster if p != port)
        s.timings["failover (cluster ok again)"] = wait_for(
            lambda: redis_infra.cluster_ok(survivor) and _master_of(client, key) != port,
            60,
            "the replica taking over",
        )
        replicated_cluster[port][1] = redis_infra.start_node(node)  # rejoins as a replica

    scenario = make_scenario(81, 20_000, client=client)
    try:
        scenario.run([fail_over])
    finally:
        client.close()


def _replica_of(master_port: int) -> int:
    client = redis.Redis(port=master_port, socket_timeout=1.0)
    try:
        info = client.info("replication")
    finally:
        client.close()
    return int(info["slave0"]["port"])


def test_a_master_killed_after_its_replica_fell_behind_is_healed_from_kafka(
    make_scenario: Callable[..., Scenario],
    namespace: str,
    private_env: dict[str, str],
    replicated_cluster: dict[int, Any],
) -> None:
    """The replica is paused and its link dropped, the master acknowledges writes
    alone for a while and is SIGKILLed: the promoted replica lacks them. The job
    finds its watermarks behind what it wrote and re-reads that range from Kafka."""
    url = f"redis://127.0.0.1:{CLUSTER_BASE_PORT}"
    private_env.update(LB_REDIS_URL=url, LB_REDIS_CLUSTER="1")
    client = RedisCluster.from_url(url)
    key = f"{namespace}:{{gbest}}:alltime"

    def lose_acknowledged_writes(s: Scenario) -> None:
        port = _master_of(client, key)
        node, pid = replicated_cluster[port]
        replica = _replica_of(port)
        replica_pid = replicated_cluster[replica][1]
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            master = redis.Redis(port=port, socket_timeout=2.0)
            master.client_kill_filter(_type="replica")  # the replica hears nothing more
            master.close()
            before = s.outcomes()
            wait_for(lambda: s.outcomes() > before + 300, 60, "writes only the master has")
            os.kill(pid, signal.SIGKILL)
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        survivor = next(p for p in replicated_cluster if p not in (port, replica))
        s.timings["failover (cluster ok again)"] = wait_for(
            lambda: redis_infra.cluster_ok(survivor) and _master_of(client, key) == replica,
            60,
            "the lagging replica taking over",
        )
        replicated_cluster[port][1] = redis_infra.start_node(node)  # rejoins as a replica

    scenario = make_scenario(82, 20_000, client=client)
    try:
        scenario.run([lose_acknowledged_writes])
    finally:
        client.close()
    assert "than this worker wrote" in scenario.job.log()
