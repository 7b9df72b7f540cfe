"""The job across hosts loses a broker, a host's link and a Redis master; nothing is lost.

Each job process runs in a network namespace of its own on a bridge
(:mod:`infra.netns`); three KRaft brokers (replication factor 3,
``min.insync.replicas`` 2) and a Redis Cluster of three masters with a
replica each listen on the bridge (:mod:`tests.faults.fleet`). Each scenario
ends in boards, tournament counts and dead letters equal to the oracle, with
nothing applied twice.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis
from redis.cluster import RedisCluster

from infra import redis as redis_infra
from infra import replicated
from telemetry import watchdog
from tests.faults import fleet
from tests.faults.fleet import CLUSTER_PORT, Cluster, FleetEnv, FleetRun, HostJob, init_recovery
from tests.faults.harness import (
    Feeder,
    assert_exactly_once,
    board_bound,
    dead_letter_count,
    outcomes,
    read_letters,
    wait_for,
)
from tests.integration.streams import generate, read_boards, read_stats

pytestmark = pytest.mark.timeout(360)

fleet_services = fleet.fleet_services
fleet_env = fleet.fleet_env

#: What the peer watchdog promises (telemetry/watchdog.py): a peer silent for
#: PEER_LOST_S ends every process that probes it, one probe round (a connect
#: timeout plus the pause) later at most. Enforced with room for a loaded machine.
PEER_LOST_BOUND_S = watchdog.PEER_LOST_S + 2 * watchdog.PROBE_EVERY_S + 10.0


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Broker id -> how many of ``topic``'s partitions it leads.

    ``{}`` while the broker asked gives no answer or does not list the topic yet
    (right after a leader dies the survivor's metadata can briefly lack it); a
    partition without a leader counts under ``-1``.
    """
    counts: dict[int, int] = {}
    for part in replicated.partitions(bootstrap).get(topic, []):
        counts[part["leader"]] = counts.get(part["leader"], 0) + 1
    return counts


def _led_without(broker: int, leaders: dict[int, int]) -> bool:
    """Every partition has a leader again, and none is ``broker``."""
    return bool(leaders) and broker not in leaders and -1 not in leaders


def test_kill_9_of_the_broker_leading_half_the_partitions(fleet_env: FleetEnv) -> None:
    """Producers on acks=all lose nothing; the three job processes follow the new leaders."""
    services = fleet_env.services
    run = FleetRun(fleet_env, seed=231, count=16_000)

    def kill_leader(r: FleetRun) -> None:
        leaders = _leaders(services.bootstrap, fleet_env.topic)
        broker, led = max(leaders.items(), key=lambda kv: kv[1])
        assert led * 2 >= sum(leaders.values()), leaders  # it leads half (or more)
        replicated.kill(services.pids.kafka[broker - 1])
        alive = next(b.bootstrap for b in services.layout.brokers() if b.node_id != broker)
        r.timings["new leaders elected"] = wait_for(
            lambda: _led_without(broker, _leaders(alive, fleet_env.topic)),
            60,
            "new partition leaders",
        )

    run.run([kill_leader])


def test_a_job_host_cut_off_is_noticed_and_the_cluster_restarts_without_it(
    fleet_env: FleetEnv,
) -> None:
    """Host 2 of 3 loses its link mid-stream. Hosts 0 and 1 notice within the
    watchdog's bound and exit; host 2 is gone for good (killed). The cluster is
    restarted as 2 processes from the shared recovery store (a stop-start
    rescale) and catches up with everything, exactly once."""
    run = FleetRun(fleet_env, seed=232, count=16_000)
    hosts = fleet_env.net.hosts

    def cut_host_2(r: FleetRun) -> None:
        old = r.cluster
        cut_at = time.monotonic()
        hosts[2].cut()
        for job in old.jobs[:2]:
            job.proc.wait(timeout=PEER_LOST_BOUND_S + 30)  # not a hang forever
        noticed = time.monotonic() - cut_at
        r.timings["cut noticed (both survivors exited)"] = noticed
        # The first watchdog to fire exits 3; the other survivor may go first
        # through Bytewax itself, which sees that peer's connection close (exit 1).
        codes = [job.proc.returncode for job in old.jobs[:2]]
        assert watchdog.EXIT_PEER_LOST in codes and 0 not in codes, (codes, old.logs())
        assert noticed <= PEER_LOST_BOUND_S, (noticed, old.logs())
        assert any("has not answered" in job.log() for job in old.jobs[:2])
        old.jobs[2].kill()  # the lost host never comes back
        r.cluster = Cluster(fleet_env, hosts[:2], port=CLUSTER_PORT + 1)

    run.run([cut_host_2])
    print({"restarted cluster caught up, seconds after the cut": run.timings})


def _master_of(client: RedisCluster, key: str) -> str:
    client.nodes_manager.initialize()
    node = client.get_node_from_key(key)
    return f"{node.host}:{node.port}"


def test_kill_9_of_a_redis_master_whose_replica_lagged_is_healed_from_kafka(
    fleet_env: FleetEnv,
) -> None:
    """The master owning gbest's boards is partitioned from its replica (iptables)
    while it keeps acknowledging the job's writes, then SIGKILLed: the promoted
    replica lacks those writes. The two job processes notice their watermarks
    are behind what they wrote and re-read that range from Kafka."""
    services, net, client = fleet_env.services, fleet_env.net, fleet_env.client
    nodes = {n.address: (i, n) for i, n in enumerate(services.layout.redis_nodes())}
    key = f"{fleet_env.namespace}:{{gbest}}:alltime"
    run = FleetRun(fleet_env, seed=233, count=16_000, hosts=2)

    def lose_acknowledged_writes(r: FleetRun) -> None:
        address = _master_of(client, key)
        index, master = nodes[address]
        info = redis.Redis(host=master.host, port=master.port).info("replication")
        replica = f"{info['slave0']['ip']}:{info['slave0']['port']}"
        survivor = next(n for a, (_, n) in nodes.items() if a not in (address, replica))
        # The partition stays until the replica is promoted: healed sooner, the
        # dead master's kernel would still deliver the replication stream it had
        # buffered (a killed process's socket is closed gracefully).
        net.partition(master.host, nodes[replica][1].host)
        try:
            before = r.outcomes()
            wait_for(lambda: r.outcomes() > before + 300, 60, "writes only the master has")
            pid = services.pids.redis[index]
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
            r.timings["failover (cluster ok again)"] = wait_for(
                lambda: (
                    redis_infra.cluster_ok(survivor.port, survivor.host)
                    and _master_of(client, key) == replica
                ),
                60,
                "the lagging replica taking over",
            )
        finally:
            net.heal()

    run.run([lose_acknowledged_writes])
    assert any("than this worker wrote" in job.log() for job in run.cluster.jobs)


def test_a_standby_takes_over_from_a_cut_off_deployment_which_is_refused_when_back(
    fleet_env: FleetEnv,
) -> None:
    """Deployment A runs on host 0, deployment B waits as its standby on host 1.
    Host 0's link is cut mid-stream: no closed socket, its lease simply stops
    being renewed. B takes over within ``LB_TAKEOVER_S`` and applies more; when
    host 0 is back, A (with batches in hand and a stale belief that it is
    active) must stop by itself, its late writes refused by the epoch fence,
    and every board, counter and dead letter must equal the oracle."""
    hosts, f = fleet_env.net.hosts, fleet_env
    records = generate(seed=234, count=12_000).records
    feeder = Feeder(f.services.bootstrap, f.topic, records, chunk=240, pause_s=0.4)

    def deployment(name: str, host: int) -> HostJob:
        recovery = f.log_dir / f"recovery-{name}"
        init_recovery(recovery)
        env = {**f.env, "LB_TAKEOVER_S": "6", "LB_STATE_DIR": str(f.log_dir / name)}
        address = f"{hosts[host].address}:{CLUSTER_PORT}"
        return HostJob(hosts[host], 0, [address], env, recovery, f.log_dir / f"{name}.log")

    def applied() -> int:
        return outcomes(f.client, f.namespace)

    old = deployment("a", 0)
    new = None
    try:
        feeder.start()
        wait_for(lambda: applied() > 0, 120, "a applying records")
        new = deployment("b", 1)
        wait_for(lambda: "standby:" in new.log(), 90, "b waiting as standby")
        wait_for(lambda: feeder.sent >= len(records) // 3, 120, "the feeder")
        hosts[0].cut()
        cut_at = applied()
        assert cut_at < board_bound(records), "the cut came after the stream"
        took = wait_for(lambda: "took over" in new.log(), 60, "b taking over")
        wait_for(lambda: applied() > cut_at, 90, "b applying records")
        hosts[0].reconnect()
        gone = wait_for(lambda: not old.alive(), 120, "a stopping by itself")
        print(f"takeover {took:.1f} s after the cut; the old one gone {gone:.1f} s after")
        assert old.proc.returncode == 0, old.log()[-3000:]
        assert "deposed" in old.log(), old.log()[-3000:]
        feeder.finish()
        bound, dead = board_bound(records), len(records) - board_bound(records)
        wait_for(
            lambda: (
                new.alive()
                and applied() >= bound
                and dead_letter_count(f.services.bootstrap, f"{f.topic}.dlq") >= dead
            ),
            150,
            "b catching up",
        )
        new.signal(signal.SIGTERM)
        assert new.proc.wait(timeout=60) == 0, new.log()[-3000:]
    finally:
        hosts[0].reconnect()
        old.kill()
        if new is not None:
            new.kill()
    # Boards, counters, tournament counts and dead letters exactly once: the
    # standby's dead-letter producers fenced the cut-off deployment's, so a
    # letter it had in flight was aborted, never added after the standby's
    # read of the topic's tail.
    assert_exactly_once(
        records,
        read_boards(f.client, f.namespace),
        read_stats(f.client, f.namespace),
        read_letters(f.services.bootstrap, f"{f.topic}.dlq"),
        "after a takeover",
    )
