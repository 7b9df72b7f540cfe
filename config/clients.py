"""Clients and catalogs built from the settings: the one place that knows how.

Every edge (the job, the CLI, the HTTP server, the periodic jobs, the
benchmarks) gets its Redis client here, so the URL, the ACL user and
password, the TLS CA and cluster mode are honoured the same way everywhere.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
from confluent_kafka import Consumer, KafkaError, KafkaException
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from adapters.kafka import QUIET_KAFKA_LOGGER
from adapters.redis import AsyncRedisClient, RedisClient
from config.settings import Settings
from domain.errors import ConfigError, ServiceError
from domain.games import GameCatalog

#: How long a start-up check waits for a service before saying it is unreachable.
PROBE_TIMEOUT_S = 5.0


def _options(settings: Settings, options: dict[str, Any]) -> dict[str, Any]:
    """Client keyword arguments: timeouts, ACL user and password, TLS CA, then ``options``."""
    kwargs: dict[str, Any] = dict(options)
    kwargs.setdefault("socket_timeout", settings.redis_timeout_s)
    kwargs.setdefault("socket_connect_timeout", settings.redis_timeout_s)
    if settings.redis_username:
        kwargs["username"] = settings.redis_username
    if settings.redis_password is not None:
        kwargs["password"] = settings.redis_password.reveal()
    if settings.redis_tls_ca is not None:
        kwargs["ssl_ca_certs"] = str(settings.redis_tls_ca)
    return kwargs


def redis_client(settings: Settings, **options: Any) -> RedisClient:
    """A standalone or cluster-aware Redis client; ``options`` go to ``from_url``.

    Every command and connect times out after ``LB_REDIS_TIMEOUT_S`` unless
    ``options`` say otherwise: a stalled Redis must surface as an error the
    caller can retry, not as a read that never returns.
    """
    kwargs = _options(settings, options)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url.reveal(), **kwargs)
    return redis.Redis.from_url(settings.redis_url.reveal(), **kwargs)


def async_redis_client(settings: Settings, **options: Any) -> AsyncRedisClient:
    """The asyncio twin of :func:`redis_client` (``redis.asyncio``), same settings honoured.

    For servers that wait on Redis without a thread per wait (the HTTP API's
    change-stream readers block in ``XREAD``).
    """
    kwargs = _options(settings, options)
    url = settings.redis_url.reveal()
    if settings.redis_cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(url, **kwargs)
    return redis.asyncio.Redis.from_url(url, **kwargs)


def job_redis_client(settings: Settings) -> RedisClient:
    """The streaming job's client: one immediate reconnect, then the caller's policy.

    The job's sinks retry with their own budget and logging
    (:mod:`sinks.retry`), so the client must not hide an outage inside a single
    call (a client redis-py builds directly retries ten times with backoff; one
    built from a URL, as here, none). It gets the one quick retry that
    replaces a pooled connection a Redis restart closed; while Redis is stalled
    that makes a call on a new connection wait two timeouts before it fails.
    """
    if settings.redis_cluster:
        return redis_client(settings)
    return redis_client(settings, retry=Retry(NoBackoff(), 1))


def game_catalog(settings: Settings) -> GameCatalog:
    """The game rules: ``LB_GAMES`` when set, else the built-in defaults."""
    if settings.games_file is not None:
        return GameCatalog.load(settings.games_file)
    return GameCatalog.builtin()


def _cluster_enabled(client: RedisClient) -> bool | None:
    """Whether the server runs in cluster mode; ``None`` when the ACL user may not ask."""
    try:
        return bool(client.info("cluster").get("cluster_enabled"))
    except (redis.exceptions.NoPermissionError, redis.exceptions.AuthorizationError):
        client.ping()
        return None


def probe_redis(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail in seconds, with one line, when Redis is unreachable or not what the settings say.

    A standalone server behind ``LB_REDIS_CLUSTER=1`` or a cluster node behind a
    standalone client only shows up later as a cryptic error (``MOVED``, "cluster
    mode is not enabled"), so the server's ``cluster_enabled`` is compared with
    the flag here.
    """
    where = f"LB_REDIS_URL={settings.redis_display_url()}"
    plain = dataclasses.replace(settings, redis_cluster=False)
    try:
        client = redis_client(
            plain, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None
        )
        try:
            enabled = _cluster_enabled(client)
        finally:
            client.close()
    except redis.AuthenticationError as exc:
        raise ConfigError(f"Redis refused the credentials ({where}): {exc}") from exc
    except redis.RedisError as exc:
        raise ServiceError(f"Redis is not reachable ({where}): {exc}") from exc
    if enabled is None:
        return  # a user without INFO rights: reachable, mode not checked
    if enabled and not settings.redis_cluster:
        raise ConfigError(f"{where} names a Redis Cluster node: set LB_REDIS_CLUSTER=1")
    if settings.redis_cluster and not enabled:
        raise ConfigError(f"LB_REDIS_CLUSTER=1 but {where} is not a cluster node: unset it")


def quiet_kafka_config(settings: Settings) -> dict[str, Any]:
    """Client properties whose librdkafka log lines are dropped (errors surface as exceptions)."""
    return {**settings.kafka_config(), "logger": QUIET_KAFKA_LOGGER, "log_level": 0}


def quiet_kafka_extra(settings: Settings) -> dict[str, Any]:
    """``LB_KAFKA_X_*`` plus the quiet logger, for clients given the bootstrap separately."""
    return {**dict(settings.kafka_extra), "logger": QUIET_KAFKA_LOGGER, "log_level": 0}


def probe_kafka(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, int]:
    """Partition counts of the broker's topics; one clear error when it cannot be reached."""
    errors: list[KafkaError] = []
    consumer = Consumer(
        {**quiet_kafka_config(settings), "group.id": "lb-probe", "error_cb": errors.append}
    )
    try:
        meta = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        consumer.poll(0.1)  # serves the error callbacks: why the broker could not be reached
        refused = _refusal(settings, errors)
        if refused is not None:
            raise ConfigError(refused) from None
        raise ServiceError(
            f"the Kafka broker at {settings.kafka_bootstrap} (LB_KAFKA_BOOTSTRAP) is not "
            f"reachable within {timeout_s:g} s"
        ) from exc
    finally:
        consumer.close()
    return {name: len(info.partitions) for name, info in meta.topics.items() if not info.error}


def _refusal(settings: Settings, errors: list[KafkaError]) -> str | None:
    """The line for a broker that refused our credentials or whose certificate we refused.

    librdkafka's own texts name neither password nor key; the line names the
    settings to look at.
    """
    where = f"LB_KAFKA_BOOTSTRAP={settings.kafka_bootstrap}"
    for error in reversed(errors):
        if error.code() == KafkaError._AUTHENTICATION:
            user = settings.kafka_extra.get("sasl.username", "")
            return (
                f"the Kafka broker refused the credentials of {user!r} "
                f"(LB_KAFKA_X_SASL_USERNAME, LB_KAFKA_X_SASL_PASSWORD; {where})"
            )
        if error.code() == KafkaError._SSL or "certificate" in error.str().lower():
            ca = settings.kafka_extra.get("ssl.ca.location", "the system's CAs")
            return (
                f"the Kafka broker's TLS certificate is not signed by {ca} "
                f"(LB_KAFKA_X_SSL_CA_LOCATION; {where})"
            )
    return None
