"""One line for every mistake a user can make: what went wrong and which setting to look at.

Our own errors (:class:`domain.errors.LeaderboardError`) already carry such a
line. Third-party errors that reach the command line unwrapped (a Redis client
that cannot connect, a cluster client pointed at a standalone server, a
``MOVED`` reply, a Kafka client error) are translated here, once, instead of in
every command; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from confluent_kafka import KafkaException

from domain.errors import ConfigError, LeaderboardError


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes, outermost first (a bounded walk)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 20:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _redis_where() -> str:
    """The configured Redis URL (password masked) and cluster flag, for messages."""
    from config.settings import Settings

    try:
        settings = Settings.from_env()
    except ConfigError:
        return "LB_REDIS_URL"
    flag = "LB_REDIS_CLUSTER=1" if settings.redis_cluster else "LB_REDIS_CLUSTER=0"
    return f"LB_REDIS_URL={settings.redis_display_url()}, {flag}"


def _kafka_where() -> str:
    from config.settings import Settings

    try:
        return f"LB_KAFKA_BOOTSTRAP={Settings.from_env().kafka_bootstrap}"
    except ConfigError:
        return "LB_KAFKA_BOOTSTRAP"


def cluster_mismatch(exc: BaseException) -> str | None:
    """The line for a cluster client on a standalone server or the reverse, if it is one."""
    for link in _chain(exc):
        if isinstance(link, redis.exceptions.MovedError | redis.exceptions.AskError):
            return (
                f"Redis answered MOVED: LB_REDIS_URL names a Redis Cluster node, "
                f"set LB_REDIS_CLUSTER=1 ({_redis_where()})"
            )
        if isinstance(link, redis.exceptions.RedisClusterException):
            text = str(link).lower()
            if "cluster mode is not enabled" in text or "cluster_enabled" in text:
                return (
                    "LB_REDIS_CLUSTER=1 but the server at LB_REDIS_URL is not a Redis "
                    f"Cluster node: unset LB_REDIS_CLUSTER ({_redis_where()})"
                )
            return f"Redis Cluster: {_first_line(link)} ({_redis_where()})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def explain(exc: BaseException) -> str | None:
    """The one-line message for ``exc``, or ``None`` when it is a bug (keep the traceback)."""
    mismatch = cluster_mismatch(exc)
    if mismatch is not None:
        return mismatch
    if isinstance(exc, LeaderboardError):
        line = _first_line(exc)
        links = list(_chain(exc))[1:]
        if "LB_REDIS_URL" not in line and any(isinstance(x, redis.RedisError) for x in links):
            line = f"{line} ({_redis_where()})"
        if "LB_KAFKA_BOOTSTRAP" not in line and any(isinstance(x, KafkaException) for x in links):
            line = f"{line} ({_kafka_where()})"
        return line
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return f"Redis refused the credentials: {_first_line(exc)} ({_redis_where()})"
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return f"cannot reach Redis: {_first_line(exc)} ({_redis_where()})"
    if isinstance(exc, redis.exceptions.RedisError):
        return f"Redis error: {_first_line(exc)} ({_redis_where()})"
    if isinstance(exc, KafkaException):
        return f"Kafka error: {_first_line(exc)} ({_kafka_where()})"
    return None
