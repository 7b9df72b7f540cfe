"""Paced group writes all reach Redis when the input stops, without a later batch.

With ``LB_WRITES_IN_FLIGHT`` the job lets one group write out at a time per
connection. The last batch before a quiet spell must still land whole: the
board sink may not leave writes waiting for the next batch, or for the idle
tick (``LB_HEAL_CHECK_S``, set to an hour here so it never comes).
"""

from __future__ import annotations

import signal
from pathlib import Path

from adapters.redis import RedisClient
from telemetry import server
from tests.integration.streams import GAMES_TOML, generate, job_env, oracle, produce, read_boards
from tests.integration.watching import start_job, until


def test_the_last_paced_writes_land_while_the_input_is_quiet(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    env = job_env(topic, namespace, state, games)
    # Small group writes (many per batch), one in flight, no idle tick.
    env.update(LB_WRITES_IN_FLIGHT="1", LB_WRITE_MAX_UPDATES="5", LB_HEAL_CHECK_S="3600")
    stream = generate(seed=41, count=1200)
    log = tmp_path / "job.log"
    job = start_job(["run"], env, log)
    try:
        until("the job registered", lambda: server.registered(state, "job"), log, job)
        produce(kafka_bootstrap, topic, stream.records)
        expected, _ = oracle(stream.records)  # after produce: it needs each record's partition
        until(
            "every board holds every record, with no batch after the last",
            lambda: read_boards(redis_client, namespace) == expected,
            log,
            job,
        )
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)
    assert job.returncode == 0, log.read_text()[-3000:]
