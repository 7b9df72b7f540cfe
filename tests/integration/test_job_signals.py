"""SIGTERM (through ``lb run``) and SIGINT (straight to ``python -m bytewax.run``)
stop the tailing job cleanly: exit 0, no traceback, nothing lost or doubled."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.redis import RedisClient
from tests.integration.streams import (
    GAMES_TOML,
    REPO,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_boards,
    read_stats,
)
from tests.poll import poll

pytestmark = pytest.mark.slow


def _stop_when_busy(
    proc: subprocess.Popen[bytes], sig: int, client: RedisClient, namespace: str, after: int
) -> tuple[int, bytes]:
    poll("the job applies records", lambda: sum(read_stats(client, namespace).values()) > after)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_sigterm_and_sigint_stop_the_job_cleanly(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    stream = generate(seed=21, count=12_000)
    env = job_env(topic, namespace, tmp_path / "state", games)
    produce(kafka_bootstrap, topic, stream.records[:6000])

    job = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "run"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    code, err = _stop_when_busy(job, signal.SIGTERM, redis_client, namespace, 0)
    assert code == 0, err.decode()[-3000:]
    assert b"Traceback" not in err and b"panic" not in err
    first = sum(read_stats(redis_client, namespace).values())
    assert first > 0

    produce(kafka_bootstrap, topic, stream.records[6000:])
    recovery = tmp_path / "state" / "recovery" / "scoreboard" / topic
    bytewax = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bytewax.run",
            "flows.scoreboard:build()",
            "-r",
            str(recovery),
            "-s",
            "1",
            "-b",
            "0",
        ],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    code, err = _stop_when_busy(bytewax, signal.SIGINT, redis_client, namespace, first)
    assert code == 0, err.decode()[-3000:]
    assert b"Traceback" not in err and b"panic" not in err and b"KeyboardInterrupt" not in err

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    expected, _ = oracle(stream.records)
    assert read_boards(redis_client, namespace) == expected
