"""Clients and catalogs built from the settings: the one place that knows how.

Every edge (the job, the CLI, the HTTP server, the periodic jobs, the
benchmarks) gets its Redis client here, so the URL, the ACL user and
password, the TLS CA and cluster mode are honoured the same way everywhere.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from config.settings import Settings
from domain.games import GameCatalog


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


def redis_client(settings: Settings, **options: Any) -> Any:
    """A standalone or cluster-aware Redis client; ``options`` go to ``from_url``.

    Every command and connect times out after ``LB_REDIS_TIMEOUT_S`` unless
    ``options`` say otherwise: a stalled Redis must surface as an error the
    caller can retry, not as a read that never returns.
    """
    kwargs = _options(settings, options)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url.reveal(), **kwargs)
    return redis.Redis.from_url(settings.redis_url.reveal(), **kwargs)


def async_redis_client(settings: Settings, **options: Any) -> Any:
    """The asyncio twin of :func:`redis_client` (``redis.asyncio``), same settings honoured.

    For servers that wait on Redis without a thread per wait (the HTTP API's
    change-stream readers block in ``XREAD``).
    """
    kwargs = _options(settings, options)
    url = settings.redis_url.reveal()
    if settings.redis_cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(url, **kwargs)
    return redis.asyncio.Redis.from_url(url, **kwargs)


def job_redis_client(settings: Settings) -> Any:
    """The streaming job's client: one immediate reconnect, then the caller's policy.

    redis-py retries connection errors and timeouts on its own (ten times, with
    backoff, by default), which would hide an outage inside a single call and
    multiply ``LB_REDIS_RETRY_S``. The job's sinks retry with their own
    budget and logging (:mod:`sinks.retry`), so the client keeps only the one
    quick retry that replaces a pooled connection a Redis restart closed.
    """
    if settings.redis_cluster:
        return redis_client(settings)
    return redis_client(settings, retry=Retry(NoBackoff(), 1))


def game_catalog(settings: Settings) -> GameCatalog:
    """The game rules: ``LB_GAMES`` when set, else the built-in defaults."""
    if settings.games_file is not None:
        return GameCatalog.load(settings.games_file)
    return GameCatalog.builtin()
