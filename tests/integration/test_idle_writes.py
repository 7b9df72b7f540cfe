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
from tests.integration.streams import oracle, read_boards, stream_and_env
from tests.integration.watching import start_job, until


def test_the_last_paced_writes_land_while_the_input_is_quiet(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=41, count=1200)
    expected, _ = oracle(stream.records)
    # Small group writes (many per batch), one in flight, no idle tick: the
    # whole stream is in the topic before the job starts, and nothing follows it.
    env.update(LB_WRITES_IN_FLIGHT="1", LB_WRITE_MAX_UPDATES="5", LB_HEAL_CHECK_S="3600")
    log = tmp_path / "job.log"
    job = start_job(["run"], env, log)
    try:
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
