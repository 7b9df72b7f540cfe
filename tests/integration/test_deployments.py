"""One deployment per projection: the lease in Redis, the epoch fence, standby and takeover.

Against the real Redis (standalone and cluster) and Kafka; the boards are
compared with the independent oracle of ``tests.integration.streams``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from tests.faults.harness import Job, verify, wait_caught_up, wait_for
from tests.integration.streams import lb, stream_and_env

pytestmark = pytest.mark.integration

TOPIC = "score-events"


def _write(namespace: str, offset: int, score: int) -> Any:
    from domain.keys import GroupKeys
    from domain.planner import GroupWrite, WritePlan

    keys = GroupKeys(namespace, "g1")
    write = GroupWrite(
        keys=keys,
        zadd={keys.board("alltime"): {"p1": score}},
        watermark=(f"{TOPIC}/0", offset),
        expected=offset - 1 if offset > 0 else -1,
    )
    return WritePlan(partition=0, groups=[write])


@pytest.mark.parametrize("kind", ["standalone", "cluster"])
def test_the_group_write_refuses_an_older_epoch_and_writes_nothing(
    kind: str, request: pytest.FixtureRequest, namespace: str
) -> None:
    from domain.errors import Deposed
    from domain.keys import GroupKeys
    from sinks.boards.store import RedisBoardStore

    client = request.getfixturevalue("redis_client" if kind == "standalone" else "cluster_client")
    keys = GroupKeys(namespace, "g1")
    old = RedisBoardStore(client, fence=lambda: 3)
    assert old.apply(_write(namespace, 0, 10)) == [1]
    new = RedisBoardStore(client, fence=lambda: 4)
    assert new.apply(_write(namespace, 1, 20)) == [1]
    # The deposed writer (epoch 3), resumed, plans on what it last saw: refused.
    with pytest.raises(Deposed, match="FENCED 4"):
        old.apply(_write(namespace, 2, 999))
    assert client.zscore(keys.board("alltime"), "p1") == 20
    assert int(client.hget(keys.watermarks, f"{TOPIC}/0")) == 1
    assert new.apply(_write(namespace, 2, 30)) == [1]
    # A tool beside the job (epoch 0: no lease) is not fenced; the watermark still guards it.
    assert RedisBoardStore(client).apply(_write(namespace, 3, 40)) == [1]
    assert int(client.get(f"{namespace}:{{g1}}:meta:fence:{TOPIC}")) == 4


def test_the_lease_goes_to_one_deployment_at_a_time_with_rising_epochs(
    redis_client: RedisClient, namespace: str
) -> None:
    from domain.lease import Deployment
    from sinks.redis_lease import RedisLease, peek

    a = RedisLease(redis_client, namespace, TOPIC, Deployment("host:a:/s", "a"))
    b = RedisLease(redis_client, namespace, TOPIC, Deployment("host:b:/s", "b"))
    first = a.attempt(0, 5.0)
    assert first.held and first.epoch >= 1
    seen = b.attempt(0, 5.0)
    assert not seen.held and seen.holder == Deployment("host:a:/s", "a")
    assert peek(redis_client, namespace, TOPIC) == (Deployment("host:a:/s", "a"), first.epoch)
    assert a.attempt(first.epoch, 5.0).held  # a renewal keeps the epoch
    assert a.release() and peek(redis_client, namespace, TOPIC) is None
    second = b.attempt(0, 0.3)
    assert second.held and second.epoch == first.epoch + 1
    time.sleep(0.5)  # b's lease expires; a, back, finds its turn ended
    assert a.attempt(first.epoch, 5.0).lost
    # Another process of b's deployment renews b's lease under b's epoch.
    b2 = RedisLease(redis_client, namespace, TOPIC, Deployment("host:b:/s", "b"))
    assert b2.attempt(second.epoch, 5.0) == b.attempt(second.epoch, 5.0)


def _registered(state: Path) -> str:
    """The metrics address a job process registered under its state directory."""

    def found() -> bool:
        return any((state / "run").glob("job-*.json"))

    wait_for(found, 60, "the job registering its metrics")
    entry = json.loads(next((state / "run").glob("job-*.json")).read_text())[0]
    return str(entry["targets"][0])


def _health(address: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_second_deployment_waits_as_standby_and_takes_over_when_the_first_stops(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    first_half, env_a = stream_and_env(
        kafka_bootstrap, topic, namespace, tmp_path, seed=23, count=3000, state="a"
    )
    env_a.update(LB_TAKEOVER_S="6", LB_METRICS_PORT="0")
    env_b = {**env_a, "LB_STATE_DIR": str(tmp_path / "b")}
    active = Job(env_a, tmp_path / "a.log")
    standby = None
    try:
        wait_for(lambda: b"active" in _lease_role(redis_client, namespace, topic), 60, "a active")
        standby = Job(env_b, tmp_path / "b.log")
        wait_for(lambda: "standby:" in standby.log(), 60, "b's start line")
        start_line = standby.log().splitlines()[0]
        assert "standby: the deployment on" in start_line and str(tmp_path / "a") in start_line
        address = _registered(tmp_path / "b")
        code, body = _health(address, "/readyz")
        assert code == 503 and body["process"] == 0, body
        assert any("standby" in r and str(tmp_path / "a") in r for r in body["reasons"]), body
        assert _health(address, "/livez")[0] == 200  # waiting is not being stuck
        status = lb(["status", "--json", "--interval", "0"], env_b)
        (job,) = json.loads(status.stdout)["jobs"]
        assert (job["process"], job["lease"], job["ready"]) == ("0", "standby", False), job
        assert " standby " in lb(["status", "--interval", "0"], env_b).stdout

        refused = lb(
            ["run"], {**env_a, "LB_STATE_DIR": str(tmp_path / "c"), "LB_STANDBY": "refuse"}
        )
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().count("\n") == 0 and "LB_STANDBY=refuse" in refused.stderr

        assert active.stop() == 0
        wait_for(lambda: "took over" in standby.log(), 30, "b taking over")
        wait_for(lambda: _health(address, "/readyz")[0] == 200, 60, "b ready once active")
        second = stream_and_env(
            kafka_bootstrap, topic, namespace, tmp_path, seed=24, count=2000, state="b"
        )[0]
        records = first_half.records + second.records
        wait_caught_up(standby, redis_client, namespace, kafka_bootstrap, topic, records, 120)
        assert standby.stop() == 0
    finally:
        active.kill()
        if standby is not None:
            standby.kill()
    verify(records, redis_client, namespace, kafka_bootstrap, topic, "after a takeover")


def _lease_role(client: RedisClient, namespace: str, topic: str) -> bytes:
    """``b"active"`` once some deployment holds the projection's lease."""
    from domain.lease import lease_keys

    return b"active" if client.exists(lease_keys(namespace, topic)[0]) else b""


def test_lb_run_dry_run_prints_only_this_hosts_process(tmp_path: Path) -> None:
    env = {"LB_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    got = lb(
        [
            "run",
            "--dry-run",
            "--addresses",
            "10.0.0.1:2101;10.0.0.2:2101;10.0.0.3:2101",
            "--process-id",
            "2",
        ],
        env,
    )
    assert got.returncode == 0, got.stderr
    (line,) = got.stdout.splitlines()
    assert "-m bytewax.run 'flows.scoreboard:build()'" in line
    assert line.endswith("-i 2 -a '10.0.0.1:2101;10.0.0.2:2101;10.0.0.3:2101'")
    same = lb(
        ["run", "--dry-run"],
        {**env, "LB_ADDRESSES": "10.0.0.1:2101;10.0.0.2:2101;10.0.0.3:2101", "LB_PROCESS_ID": "2"},
    )
    assert same.stdout == got.stdout


def test_a_lease_call_to_a_stalled_redis_gives_up_after_one_reconnect(tmp_path: Path) -> None:
    """The keeper's client fails a call while Redis is stalled well within a
    lease's life: one connect, at most one reconnect (a client built with
    redis-py's default ``Retry`` would make eleven, one timeout each).
    Counted by the connections the stopped Redis accepts once resumed."""
    import os
    import signal

    import redis

    from config.settings import Settings
    from domain.errors import ServiceError
    from domain.lease import Deployment
    from flows import lease
    from sinks.redis_lease import RedisLease
    from tests.integration.watching import private_redis

    with private_redis() as server:
        admin = redis.Redis(port=server.port, socket_timeout=10)
        before = admin.info("stats")["total_connections_received"]
        settings = Settings.from_env(
            {
                **os.environ,
                "LB_REDIS_URL": f"redis://127.0.0.1:{server.port}/0",
                "LB_REDIS_TIMEOUT_S": "1",
                "LB_STATE_DIR": str(tmp_path),
            }
        )
        me = Deployment("host:test:/s", "test")
        keeper_lease = RedisLease(lease.client(settings), "ns", TOPIC, me)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises((redis.TimeoutError, redis.ConnectionError, ServiceError)):
                keeper_lease.attempt(0, 10.0)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        made = admin.info("stats")["total_connections_received"] - before
    assert 1 <= made <= 2, f"{made} connections for one lease call"
