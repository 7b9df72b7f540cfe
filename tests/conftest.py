"""Shared fixtures: real services, one topic and one key namespace per test.

A test's suite is its directory: :func:`pytest_collection_modifyitems` marks
every test under ``tests/unit`` ``unit``, under ``tests/integration``
``integration``, and under ``tests/faults`` ``faults`` (plus ``integration``
and ``slow``), so ``-m unit`` selects exactly the unit suite and no file sets
these marks by hand.

The session brings Kafka and Redis up through ``infra.services`` (reusing
servers that already run) and stops at the end only what it started itself,
unless ``LB_KEEP_SERVICES=1``. Nothing here mocks Kafka or Redis.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from tests.poll import poll

REPO = Path(__file__).resolve().parent.parent
#: The marks of each suite, by its directory under tests/.
SUITE_MARKS = {
    "unit": ("unit",),
    "integration": ("integration",),
    "faults": ("faults", "integration", "slow"),
}


def pytest_configure(config: pytest.Config) -> None:
    """Run as if from a terminal, where Ctrl-C reaches a command.

    A suite started in the background by a non-interactive shell (``cmd &`` in
    a script) inherits SIGINT ignored, and so would every process it starts: a
    command a test interrupts (SIGINT) would never see it. A handler of our
    own is reset to the default in each child it starts.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its suite, from the directory it lives in."""
    tests = REPO / "tests"
    for item in items:
        if item.path.is_relative_to(tests):
            suite = item.path.relative_to(tests).parts[0]
            for name in SUITE_MARKS.get(suite, ()):
                item.add_marker(name)


def _dirs() -> Any:
    from config.settings import Settings
    from infra.services import ServiceDirs

    settings = Settings.from_env()
    return ServiceDirs(state_dir=settings.state_dir, cache_dir=settings.cache_dir)


def _unique(prefix: str, request: pytest.FixtureRequest) -> str:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{prefix}-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def services() -> Iterator[dict[str, Any]]:
    """Kafka + standalone Redis, started (or reused) for the whole session."""
    from infra import services as svc

    dirs = _dirs()
    before = svc.status(dirs)
    already = bool(before.get("kafka_up") and before.get("redis_up"))
    doc = svc.up(dirs)
    yield doc
    if not already and os.environ.get("LB_KEEP_SERVICES") != "1":
        svc.down(dirs)


@pytest.fixture(scope="session")
def cluster_services(services: dict[str, Any]) -> Iterator[list[str]]:
    """The local 3-master Redis Cluster (started on first use)."""
    from infra import services as svc

    doc = svc.up(_dirs(), cluster=True)
    yield list(doc["redis_cluster"])


@pytest.fixture(scope="session")
def kafka_bootstrap(services: dict[str, Any]) -> str:
    return str(services["kafka"])


@pytest.fixture(scope="session")
def redis_url(services: dict[str, Any]) -> str:
    return str(services["redis"])


@pytest.fixture
def topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh 4-partition topic (and its ``.dlq``) for this test only; deleted after."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = _unique("t", request)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=4), NewTopic(f"{name}.dlq", num_partitions=4)]
    )
    for future in futures.values():
        future.result(timeout=30)
    poll(  # created is not yet served: metadata reaches the brokers a moment later
        "the new topics in Kafka's metadata",
        lambda: all(
            (info := admin.list_topics(t, timeout=10).topics.get(t)) is not None
            and info.error is None
            for t in (name, f"{name}.dlq")
        ),
        30,
    )
    yield name
    # lb run also makes the profiles topics beside it (config.settings.profiles_topic_for).
    made = [name, f"{name}.dlq", f"{name}.profiles", f"{name}.profiles.dlq"]
    for future in admin.delete_topics(made).values():
        with contextlib.suppress(Exception):  # best-effort cleanup
            future.result(timeout=30)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A Redis key prefix owned by this test (keys are ``<namespace>:{game}:...``)."""
    return _unique("t", request).replace("-", "")[:48]


@pytest.fixture
def redis_client(redis_url: str, namespace: str) -> Iterator[RedisClient]:
    """A client of the standalone Redis; this test's namespace is deleted after."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    _delete_namespace(client, namespace)
    client.close()


@pytest.fixture
def cluster_client(cluster_services: list[str], namespace: str) -> Iterator[Any]:
    """A cluster-aware client of the local Redis Cluster; namespace deleted after."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(cluster_services[0])
    yield client
    for node in client.get_primaries():
        conn = client.get_redis_connection(node)
        _delete_namespace(conn, namespace)
    client.close()


def _delete_namespace(client: RedisClient, namespace: str) -> None:
    """Delete every key of the namespace, one DEL each (safe on cluster nodes)."""
    pipe = client.pipeline(transaction=False)
    for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        pipe.delete(key)
    pipe.execute()
