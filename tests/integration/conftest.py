"""Fixtures of the live-push and live-page tests: the real job tailing, the real API serving.

Both work on the test's own topic and namespace (the ``topic``/``namespace``
fixtures), with the game rules of :data:`tests.integration.streams.GAMES_TOML`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.api_server import api_settings, running_api
from tests.integration.streams import GAMES_TOML, KEYS, REPO, job_env


@pytest.fixture
def live_job(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path
) -> Iterator[subprocess.Popen[str]]:
    """The streaming job, tailing the test's topic until the test ends."""
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    log = (tmp_path / "job.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "run"],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture
def live_api(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, tmp_path: Path
) -> Iterator[str]:
    games = tmp_path / "api-games.toml"
    games.write_text(GAMES_TOML)
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games)
    with running_api(settings) as url:
        yield url


@pytest.fixture
def teams_topic(kafka_bootstrap: str, topic: str) -> Iterator[str]:
    """The test's membership topic (beside its score topic), deleted with its dead letters."""
    name = f"{topic}-teams"
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
