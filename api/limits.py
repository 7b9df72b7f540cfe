"""Rate limits per caller and route class, counted in Redis with the ``limits`` library.

Each route class (:class:`~api.auth.policy.RouteClass`: reads, pushes, writes)
has its own rate (``LB_RATE_READS=100/second``, ...), counted per caller: a
player's token subject, a server key's name, or the client address of an
anonymous request. The counts are ``limits``' fixed-window counters in Redis
(its ``incr`` script: ``INCRBY`` and, on a window's first hit, ``EXPIRE``),
so every worker of ``lb serve --workers N`` and every API host sharing the
Redis share them. Windows are aligned to the clock (the window of ``N/minute``
is the wall-clock minute), so the window's end, and therefore
``RateLimit-Reset`` and ``Retry-After``, are known without asking Redis: a
request costs exactly one round trip, whose answer (the count so far) gives
both the decision and ``RateLimit-Remaining``. (A fixed window lets a client
spend its allowance at the end of one window and again at the start of the
next: at most twice the rate over a short span.)

When Redis does not answer, the request is let through (a limiter must not
turn a Redis hiccup into an outage of everything) and
``lb_http_rate_limit_errors_total`` counts it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from limits import RateLimitItem, parse
from limits.aio.storage import RedisClusterStorage, RedisStorage, Storage
from limits.errors import StorageError

from api.auth.policy import RouteClass
from config.settings import Settings

log = logging.getLogger("lb.api")


@dataclass(frozen=True)
class Verdict:
    """One counted request: allowed or not, and what its RateLimit headers say."""

    allowed: bool
    limit: int
    remaining: int
    reset_s: int

    def headers(self) -> list[tuple[bytes, bytes]]:
        """``RateLimit-Limit``/``-Remaining``/``-Reset`` (and ``Retry-After`` when refused)."""
        out = [
            (b"ratelimit-limit", str(self.limit).encode()),
            (b"ratelimit-remaining", str(self.remaining).encode()),
            (b"ratelimit-reset", str(self.reset_s).encode()),
        ]
        if not self.allowed:
            out.append((b"retry-after", str(self.reset_s).encode()))
        return out


def rates(settings: Settings) -> dict[RouteClass, RateLimitItem]:
    """The configured rate of each limited route class."""
    configured = {
        RouteClass.READS: settings.rate_reads,
        RouteClass.PUSHES: settings.rate_pushes,
        RouteClass.WRITES: settings.rate_writes,
    }
    return {kind: parse(text) for kind, text in configured.items() if text is not None}


class RateLimits:
    """Counts requests per (route class, caller) in ``storage``; ``clock`` is epoch seconds."""

    def __init__(
        self,
        storage: Storage,
        items: Mapping[RouteClass, RateLimitItem],
        *,
        clock: Callable[[], float] = time.time,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self._storage = storage
        self._items = dict(items)
        self._clock = clock
        self._on_error = on_error

    def limits(self, kind: RouteClass) -> bool:
        """Whether this route class has a rate limit."""
        return kind in self._items

    async def hit(self, kind: RouteClass, caller: str) -> Verdict | None:
        """Count one request of ``caller`` on ``kind``; None when not limited (or Redis failed)."""
        item = self._items.get(kind)
        if item is None:
            return None
        period = item.get_expiry()
        now = self._clock()
        window = int(now // period)
        key = item.key_for(kind.value, caller, str(window))
        try:
            count = await self._storage.incr(key, period)
        except StorageError as exc:
            self._on_error()
            log.warning("rate limit not counted (Redis: %s); request let through", exc)
            return None
        reset = max(1, math.ceil((window + 1) * period - now))
        return Verdict(count <= item.amount, item.amount, max(0, item.amount - count), reset)


def redis_storage(settings: Settings, async_client: Any) -> Storage:
    """``limits``' Redis storage on the API's own Redis (keys under ``<namespace>:limits``).

    Standalone: the API's asyncio client's connection pool (same URL, ACL user,
    TLS); a cluster: a cluster client of ``limits`` with the same credentials.
    """
    prefix = f"{settings.namespace}:limits"
    if not settings.redis_cluster:
        return RedisStorage(
            "async+redis://",
            implementation="redispy",
            key_prefix=prefix,
            wrap_exceptions=True,
            connection_pool=async_client.connection_pool,
        )
    url = urlsplit(settings.redis_url.reveal())
    options: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
    }
    if url.scheme == "rediss":
        options["ssl"] = True
        if settings.redis_tls_ca is not None:
            options["ssl_ca_certs"] = str(settings.redis_tls_ca)
    username = settings.redis_username or url.username
    password = settings.redis_password.reveal() if settings.redis_password else url.password
    if username:
        options["username"] = username
    if password:
        options["password"] = password
    return RedisClusterStorage(
        f"async+redis+cluster://{url.hostname}:{url.port or 6379}",
        implementation="redispy",
        key_prefix=prefix,
        wrap_exceptions=True,
        **options,
    )
