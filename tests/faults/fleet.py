"""The job across hosts: replicated services on a bridge, one job process per namespace.

:func:`fleet_services` (a module fixture) makes an :mod:`infra.netns`
network of :data:`JOB_HOSTS` hosts and starts :mod:`infra.replicated` on the
bridge's own addresses: three KRaft brokers (replication factor 3,
``min.insync.replicas`` 2) and a Redis Cluster of three masters with a replica
each. :func:`fleet_env` gives one test its topic (4 partitions and its
``.dlq``, 3 replicas each), its key namespace and the job's environment.

:class:`Cluster` starts one Bytewax process of the job per host
(``python -m bytewax.run flows.scoreboard:build() -i I -a 'h0:p;h1:p;...'``,
the line ``lb run --processes N`` runs on one host), sharing one recovery
store as a shared volume would; :class:`FleetRun` feeds a stream while faults
are injected and applies the exactly-once verdict of :mod:`tests.faults.harness`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from adapters.redis import RedisClient
from infra import replicated
from infra.launch import bytewax_argv
from infra.netns import Host, Network, network, unavailable
from tests.faults.harness import (
    Feeder,
    board_bound,
    dead_letter_count,
    outcomes,
    verify,
    wait_for,
)
from tests.integration.streams import GAMES_TOML, REPO, Planned, generate, job_env

JOB_HOSTS = 3
#: The port of every job process's cluster address (each host has an address of its own).
CLUSTER_PORT = 7100
#: Recovery partitions of the shared store (``lb run`` makes 4).
RECOVERY_PARTITIONS = 4
#: A Redis master unreachable this long is replaced by its replica.
NODE_TIMEOUT_MS = 2000


@dataclass
class Services:
    """The replicated services on the bridge, restartable node by node."""

    layout: replicated.ReplicatedLayout
    cache_dir: Path
    pids: replicated.Pids = field(default_factory=lambda: replicated.Pids.of({}))

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap

    @property
    def redis_url(self) -> str:
        return self.layout.redis_url

    def up(self) -> None:
        """Start every node that is down (a test before may have killed one)."""
        replicated.up(self.layout, self.cache_dir, self.pids)


@pytest.fixture(scope="module")
def fleet_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Network, Services]]:
    """The network and the services on it; everything removed afterwards."""
    why = unavailable()
    if why:
        pytest.skip(f"hosts in network namespaces: {why}")
    from config.settings import Settings

    home = tmp_path_factory.mktemp("fleet")
    brokers, nodes = replicated.BROKERS, replicated.REDIS_NODES
    with network(JOB_HOSTS, brokers + nodes) as net:
        addresses = net.service_addresses
        layout = replicated.ReplicatedLayout(
            home,
            tuple(addresses[:brokers]),
            tuple(addresses[brokers:]),
            node_timeout_ms=NODE_TIMEOUT_MS,
        )
        services = Services(layout, Settings.from_env().cache_dir)
        try:
            services.up()
            yield net, services
        finally:
            replicated.down(services.pids)


@dataclass
class FleetEnv:
    """One test's topic, namespace, Redis client and job environment on the fleet."""

    net: Network
    services: Services
    topic: str
    namespace: str
    client: RedisClient
    env: dict[str, str]
    recovery: Path
    log_dir: Path


@pytest.fixture
def fleet_env(
    fleet_services: tuple[Network, Services],
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[FleetEnv]:
    from confluent_kafka.admin import AdminClient, NewTopic
    from redis.cluster import RedisCluster

    from tests.conftest import _unique

    net, services = fleet_services
    services.up()
    for host in net.hosts:
        host.reconnect()
    net.heal()
    topic = _unique("n", request)
    admin = AdminClient({"bootstrap.servers": services.bootstrap})
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=4), NewTopic(f"{topic}.dlq", num_partitions=4)]
    )
    for future in created.values():
        future.result(timeout=60)
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env.update(
        LB_KAFKA_BOOTSTRAP=services.bootstrap,
        LB_REDIS_URL=services.redis_url,
        LB_REDIS_CLUSTER="1",
        LB_METRICS_PORT="0",
        PYTHONFAULTHANDLER="1",
    )
    recovery = tmp_path / "recovery"
    init_recovery(recovery)
    client = RedisCluster.from_url(services.redis_url)
    try:
        yield FleetEnv(net, services, topic, namespace, client, env, recovery, tmp_path)
    finally:
        services.up()
        with contextlib.suppress(Exception):  # best-effort cleanup
            for key in client.scan_iter(match=f"{namespace}:*", count=1000):
                client.delete(key)
        client.close()
        for future in admin.delete_topics([topic, f"{topic}.dlq"]).values():
            with contextlib.suppress(Exception):
                future.result(timeout=30)


def init_recovery(path: Path) -> None:
    """A fresh Bytewax recovery store (what ``lb run`` makes on first use)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "bytewax.recovery", str(path), str(RECOVERY_PARTITIONS)],
        check=True,
        capture_output=True,
    )


class HostJob:
    """Process ``index`` of the job's Bytewax cluster, run inside ``host``'s namespace."""

    def __init__(
        self,
        host: Host,
        index: int,
        addresses: Sequence[str],
        env: dict[str, str],
        recovery: Path,
        log_path: Path,
        flow_call: str = "build()",
    ) -> None:
        self.host = host
        self.log_path = log_path
        # What `lb run --processes N` runs for process `index` (infra.launch).
        argv = bytewax_argv(
            f"flows.scoreboard:{flow_call}",
            str(recovery),
            int(env.get("LB_SNAPSHOT_INTERVAL_S", "5")),
            1,
            index,
            list(addresses),
        )
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                host.argv(argv),
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Cluster:
    """One job process on each of ``hosts``: a Bytewax cluster across namespaces."""

    def __init__(self, fleet: FleetEnv, hosts: Sequence[Host], port: int = CLUSTER_PORT) -> None:
        addresses = [f"{h.address}:{port}" for h in hosts]
        self.jobs = [
            HostJob(
                host,
                i,
                addresses,
                fleet.env,
                fleet.recovery,
                fleet.log_dir / f"job-{len(hosts)}-{i}.log",
            )
            for i, host in enumerate(hosts)
        ]

    def alive(self) -> bool:
        return all(job.alive() for job in self.jobs)

    def logs(self) -> str:
        return "\n".join(f"--- {j.log_path.name}\n{j.log()[-2500:]}" for j in self.jobs)

    def stop(self, timeout_s: float = 60.0) -> list[int]:
        """SIGTERM every process (a clean stop); their exit codes."""
        for job in self.jobs:
            job.signal(signal.SIGTERM)
        try:
            return [job.proc.wait(timeout=timeout_s) for job in self.jobs]
        except subprocess.TimeoutExpired as exc:
            for job in self.jobs:
                job.signal(signal.SIGABRT)  # stacks into the logs, for diagnosis
            time.sleep(2.0)
            self.kill()
            raise AssertionError(f"the cluster did not stop on SIGTERM:\n{self.logs()}") from exc

    def kill(self) -> None:
        for job in self.jobs:
            job.kill()


class FleetRun:
    """A generated stream fed to the fleet while faults land; then the verdict.

    Like :class:`tests.faults.harness.Scenario`, with a :class:`Cluster` of
    job processes in namespaces: fault ``i`` of ``n`` lands once ``(i + 1) /
    (n + 1)`` of the stream was sent, while records are still being applied;
    a fault may replace :attr:`cluster` (a restart without a lost host).
    """

    def __init__(
        self,
        fleet: FleetEnv,
        seed: int,
        count: int,
        hosts: int = JOB_HOSTS,
        *,
        chunk: int = 400,
        pause_s: float = 0.2,
    ) -> None:
        self.fleet = fleet
        self.records: list[Planned] = generate(seed=seed, count=count).records
        self.feeder = Feeder(fleet.services.bootstrap, fleet.topic, self.records, chunk, pause_s)
        self.timings: dict[str, float] = {}
        self.cluster = Cluster(fleet, fleet.net.hosts[:hosts])

    def outcomes(self) -> int:
        return outcomes(self.fleet.client, self.fleet.namespace)

    def run(self, faults: list[Callable[[FleetRun], None]], catch_up_s: float = 150.0) -> None:
        started = time.monotonic()
        self.feeder.start()
        try:
            for i, fault in enumerate(faults):
                self._inject(i, len(faults), fault)
            self.feeder.finish()
            self.timings["catch-up after the last record"] = self.wait_caught_up(catch_up_s)
            codes = self.cluster.stop()
            assert codes == [0] * len(codes), f"exit codes {codes}:\n{self.cluster.logs()}"
        finally:
            self.cluster.kill()
        self.timings["total"] = time.monotonic() - started
        f = self.fleet
        verify(self.records, f.client, f.namespace, f.services.bootstrap, f.topic, "")
        print({k: round(v, 1) for k, v in self.timings.items()})

    def _inject(self, i: int, n: int, fault: Callable[[FleetRun], None]) -> None:
        share = len(self.records) * (i + 1) // (n + 1)
        wait_for(lambda: self.feeder.sent >= share, 120, "the feeder")
        wait_for(lambda: self.outcomes() > 0, 120, "the job applying records")
        at_fault = self.outcomes()
        assert at_fault < board_bound(self.records), "the fault came after the stream"
        began = time.monotonic()
        fault(self)
        self.timings[f"fault {i + 1}"] = time.monotonic() - began
        assert self.cluster.alive(), f"a job process exited:\n{self.cluster.logs()}"
        self.timings[f"resumed after fault {i + 1}"] = wait_for(
            lambda: self.outcomes() > at_fault, 120, "the job applying records after the fault"
        )

    def wait_caught_up(self, timeout_s: float) -> float:
        """Until the cluster accounted for every record; every process must stay alive."""
        bound = board_bound(self.records)
        dead = len(self.records) - bound
        f = self.fleet

        def done() -> bool:
            assert self.cluster.alive(), f"a job process exited:\n{self.cluster.logs()}"
            return (
                self.outcomes() >= bound
                and dead_letter_count(f.services.bootstrap, f"{f.topic}.dlq") >= dead
            )

        return wait_for(done, timeout_s, "the cluster catching up")
