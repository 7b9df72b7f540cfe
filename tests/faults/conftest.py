"""Fixtures of the fault suite: a private Kafka and Redis that tests may stop,
kill, stall and flush without disturbing tests and benchmarks that use the
shared services at the same time.

They are started once per session in a temporary state directory, on ports of
their own (``harness.KAFKA_PORT``/``REDIS_PORT``), restarted before each test
in case an earlier one left a service down, and always stopped at the end.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from tests.integration.streams import GAMES_TOML, job_env


@pytest.fixture(scope="session")
def private_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from config.settings import Settings
    from infra import services as svc
    from tests.faults.harness import Private

    state = tmp_path_factory.mktemp("faults") / "state"
    private = Private(svc.ServiceDirs(state_dir=state, cache_dir=Settings.from_env().cache_dir))
    try:
        private.up()
        yield private
    finally:
        svc.down(private.dirs)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def private(private_services: Any) -> Any:
    """The private services, up (a test before may have left one stopped)."""
    private_services.up()
    return private_services


@pytest.fixture
def private_topic(private: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh 4-partition topic and its ``.dlq`` on the private broker."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.conftest import _unique

    name = _unique("f", request)
    admin = AdminClient({"bootstrap.servers": private.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=4), NewTopic(f"{name}.dlq", num_partitions=4)]
    )
    for future in futures.values():
        future.result(timeout=30)
    yield name
    private.up()  # a failed test may have left the broker down
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        with contextlib.suppress(Exception):  # best-effort cleanup
            future.result(timeout=30)


@pytest.fixture
def private_redis(private: Any, namespace: str) -> Iterator[Any]:
    """A client of the private Redis; the whole private Redis is flushed after."""
    import redis

    client = redis.Redis.from_url(private.redis_url)
    yield client
    private.up()
    client.flushall()
    client.close()


@pytest.fixture
def private_env(private: Any, private_topic: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    """The job's environment against the private services."""
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(private_topic, namespace, tmp_path / "state", games)
    env.update(LB_KAFKA_BOOTSTRAP=private.bootstrap, LB_REDIS_URL=private.redis_url)
    return env


@pytest.fixture
def make_scenario(
    private: Any,
    private_topic: str,
    private_redis: Any,
    namespace: str,
    private_env: dict[str, str],
    tmp_path: Path,
) -> Callable[..., Any]:
    """``make_scenario(seed, count, client=None)``: a generated stream, the job started on it.

    Change ``private_env`` before calling it to give the job other settings.
    """
    from tests.faults.harness import Scenario
    from tests.integration.streams import generate

    def make(seed: int, count: int, client: RedisClient | None = None) -> Scenario:
        records = generate(seed=seed, count=count).records
        return Scenario(
            private,
            private_env,
            private_redis if client is None else client,
            namespace,
            private_topic,
            tmp_path,
            records,
        )

    return make
