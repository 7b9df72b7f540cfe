"""A standby takes over from a paused active deployment; the old one, resumed, is refused.

SIGSTOP on the active job's processes is what a host that goes silent looks
like from Redis and Kafka on loopback: no closed socket, no exit, just no
renewal of its lease. The standby (another state directory: another
deployment) takes over within ``LB_TAKEOVER_S``; SIGCONT then brings the old
one back with batches in hand and a stale belief that it is active. It must
stop by itself, its late writes refused by the epoch fence of the group
write, and the boards, counters and dead letters must equal the oracle.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from adapters.redis import RedisClient
from tests.faults.harness import (
    Feeder,
    Job,
    outcomes,
    verify,
    wait_caught_up,
    wait_for,
)
from tests.integration.streams import GAMES_TOML, generate, job_env

pytestmark = pytest.mark.timeout(300)


def test_a_paused_active_deployment_is_replaced_and_refused_when_it_resumes(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    records = generate(seed=2323, count=12_000).records
    env_a = job_env(topic, namespace, tmp_path / "a", games)
    env_a.update(LB_TAKEOVER_S="6", LB_METRICS_PORT="off")
    env_b = {**env_a, "LB_STATE_DIR": str(tmp_path / "b")}
    feeder = Feeder(kafka_bootstrap, topic, records, chunk=240, pause_s=0.4)
    old = Job(env_a, tmp_path / "a.log")
    new = None
    try:
        feeder.start()
        wait_for(lambda: outcomes(redis_client, namespace) > 0, 120, "a applying records")
        new = Job(env_b, tmp_path / "b.log")
        wait_for(lambda: "standby:" in new.log(), 60, "b waiting as standby")
        wait_for(lambda: feeder.sent >= len(records) // 3, 120, "the feeder")
        os.killpg(old.proc.pid, signal.SIGSTOP)  # a goes silent, batches in hand
        paused_at = outcomes(redis_client, namespace)
        assert paused_at < len(records), "the pause came after the stream"
        took = wait_for(lambda: "took over" in new.log(), 30, "b taking over")
        wait_for(lambda: outcomes(redis_client, namespace) > paused_at, 60, "b applying records")
        os.killpg(old.proc.pid, signal.SIGCONT)  # a is back, believing it is active
        gone = wait_for(lambda: not old.alive(), 60, "a stopping by itself")
        print(
            f"takeover {took:.1f} s after the pause (LB_TAKEOVER_S=6); "
            f"the resumed old one gone {gone:.1f} s after SIGCONT"
        )
        assert old.proc.returncode == 0, old.log()[-3000:]
        assert "deposed" in old.log(), old.log()[-3000:]
        feeder.finish()
        wait_caught_up(new, redis_client, namespace, kafka_bootstrap, topic, records, 150)
        assert new.stop() == 0
    finally:
        os.killpg(old.proc.pid, signal.SIGCONT) if old.alive() else None
        old.kill()
        if new is not None:
            new.kill()
    verify(records, redis_client, namespace, kafka_bootstrap, topic, "after a takeover")
