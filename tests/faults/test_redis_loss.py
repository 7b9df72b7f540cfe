"""Redis loses writes it had acknowledged; the job heals the boards from Kafka by itself.

Each test runs the job while a feeder produces a stream, takes writes back
from under it mid-stream, and ends with the exactly-once verdict (boards equal
to the oracle; applied + noop + duplicate + dead letters equal to the records
produced). No ``lb rebuild``, no manual step: the job notices that Redis holds
less than it wrote (a write refused by the watermark check, or its periodic
audit), forgets what it cached and re-reads the lost range from Kafka
(docs/DESIGN.md, "Healing"). The cluster case is in ``test_cluster_failover.py``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from infra import redis as redis_infra
from infra.process import pid_alive, port_open, stop_pid
from tests.faults.harness import Scenario, wait_for

pytestmark = pytest.mark.timeout(420)

COUNT = 20_000

#: A private Redis that persists by RDB snapshots only (apart from harness.REDIS_PORT).
RDB_PORT = 28389


class RdbRedis:
    """A standalone Redis with ``appendonly no``: a restart reloads its last ``SAVE``."""

    def __init__(self, home: Path) -> None:
        self.node = redis_infra.RedisNode(home=home, port=RDB_PORT, extra_config=("appendonly no",))
        self.pid = redis_infra.start_node(self.node)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{RDB_PORT}/0"

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        wait_for(
            lambda: not pid_alive(self.pid) and not port_open("127.0.0.1", RDB_PORT),
            10,
            "Redis dying",
        )

    def start(self) -> float:
        began = time.monotonic()
        self.pid = redis_infra.start_node(self.node)
        return time.monotonic() - began


@pytest.fixture
def rdb_redis(tmp_path: Path) -> Iterator[RdbRedis]:
    server = RdbRedis(tmp_path / "rdb-redis")
    try:
        yield server
    finally:
        stop_pid(server.pid)


def test_redis_restarted_from_an_older_rdb_snapshot_is_healed_by_the_running_job(
    make_scenario: Callable[..., Scenario], private_env: dict[str, str], rdb_redis: RdbRedis
) -> None:
    """SAVE, keep streaming (acknowledged writes that never reach the disk),
    SIGKILL, restart from the snapshot while events keep arriving."""
    private_env["LB_REDIS_URL"] = rdb_redis.url
    client = redis.Redis.from_url(rdb_redis.url)

    def restore_older(s: Scenario) -> None:
        client.save()
        saved = s.outcomes()
        wait_for(lambda: s.outcomes() > saved + 500, 60, "writes after the snapshot")
        # The job is paused across the restart only so that the loss can be
        # measured before it heals (it heals within a second otherwise).
        os.killpg(s.job.proc.pid, signal.SIGSTOP)
        try:
            before = s.outcomes()
            rdb_redis.kill()
            s.timings["Redis start (from the RDB)"] = rdb_redis.start()
            lost = before - s.outcomes()
        finally:
            os.killpg(s.job.proc.pid, signal.SIGCONT)
        s.timings["writes lost"] = lost
        assert lost > 0  # the restart really took acknowledged writes back

    scenario = make_scenario(91, COUNT, client=client)
    try:
        scenario.run([restore_older])
    finally:
        client.close()
    assert "than this worker wrote" in scenario.job.log()


def test_flushall_while_the_job_runs_and_again_before_a_crash(
    make_scenario: Callable[..., Scenario],
) -> None:
    """FLUSHALL mid-stream: the same process re-reads what it had written. Then
    FLUSHALL and SIGKILL before it can notice: the restarted job finds no progress
    in Redis and re-reads from the start instead of its recovery snapshot."""

    def flush(s: Scenario) -> None:
        s.client.flushall()

    def flush_and_crash(s: Scenario) -> None:
        s.client.flushall()
        s.job.kill()
        s.job = s.start_job()

    scenario = make_scenario(92, COUNT)
    scenario.run([flush, flush_and_crash])
    log = scenario.job.log()
    assert "than this worker wrote" in log  # the first flush, healed by the running job
    assert "than the recovery snapshot" in log  # the restart after the second
