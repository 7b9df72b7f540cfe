"""Rate limits per caller and route class, counted in Redis with the ``limits`` library.

Each route class (:class:`~api.auth.policy.RouteClass`: reads, pushes, writes)
has its own rate (``LB_RATE_READS=100/second``, ...), counted per caller: a
player's token subject, a server key's name, or the client address of an
anonymous request. The counts are ``limits``' fixed-window counters in Redis
(its ``incr`` script: ``INCRBY`` and, on a window's first hit, ``EXPIRE``),
so every worker of ``lb serve --workers N`` and every API host sharing the
Redis share them. Windows are aligned to the clock (the window of ``N/minute``
is the wall-clock minute), so the window's end, and therefore
``RateLimit-Reset`` and ``Retry-After``, are known without asking Redis. A
request costs at most one round trip, and usually none: a process takes a
caller's requests from Redis in leases (:class:`RateLimits`), and refuses the
rest of a window it knows is spent without asking. (A fixed window lets a
client spend its allowance at the end of one window and again at the start of
the next: at most twice the rate over a short span.)

When Redis does not answer, the request is let through (a limiter must not
turn a Redis hiccup into an outage of everything) and
``lb_http_rate_limit_errors_total`` counts it.
"""

from __future__ import annotations

import asyncio
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
        reset = b"%d" % self.reset_s
        out = [
            (b"ratelimit-limit", b"%d" % self.limit),
            (b"ratelimit-remaining", b"%d" % self.remaining),
            (b"ratelimit-reset", reset),
        ]
        if not self.allowed:
            out.append((b"retry-after", reset))
        return out


def rates(settings: Settings) -> dict[RouteClass, RateLimitItem]:
    """The configured rate of each limited route class."""
    configured = {
        RouteClass.READS: settings.rate_reads,
        RouteClass.PUSHES: settings.rate_pushes,
        RouteClass.WRITES: settings.rate_writes,
    }
    return {kind: parse(text) for kind, text in configured.items() if text is not None}


#: A process takes at most this many of a caller's requests from Redis at once.
LEASE_MAX = 1000
#: ... and at most this share of what is left of the window (1/8), so that the
#: allowance left unspent in other processes stays small as the window fills up,
#: and near the limit every request is counted in Redis one by one (exact).
LEASE_SHARE = 8
#: Leases kept per process before stale windows are swept.
LEASES_KEPT = 50_000


#: A lease at least this large is refilled in the background before it runs out.
PREFETCH_MIN = 4


@dataclass
class _Lease:
    """The requests of one (class, caller, window) this process took from Redis."""

    window: int
    #: The window's position of the next request served from the lease (1-based) ...
    next: int = 1
    #: ... and of the lease's last one (next > last: nothing left).
    last: int = 0
    #: The highest count Redis answered for the window.
    seen: int = 0
    #: The next lease, taken in the background before this one ran out.
    spare: tuple[int, int] | None = None
    #: A background refill is under way.
    refilling: bool = False

    def take(self, count: int, size: int, limit: int) -> None:
        """Add the lease Redis granted (its count after ``INCRBY size``)."""
        self.seen = max(self.seen, count)
        granted = (count - size + 1, min(count, limit))
        if granted[0] > granted[1]:
            return  # all of it beyond the limit
        if self.next > self.last:
            self.next, self.last = granted
        elif self.spare is None:
            self.spare = granted

    def spend(self) -> int | None:
        """The position of the next request served from the lease, or None if it ran out."""
        if self.next > self.last and self.spare is not None:
            (self.next, self.last), self.spare = self.spare, None
        if self.next > self.last:
            return None
        self.next += 1
        return self.next - 1


def lease_size(limit: int, seen: int) -> int:
    """How many requests to take from Redis in one ``INCRBY`` (1 near the limit)."""
    return max(1, min(LEASE_MAX, (limit - seen) // LEASE_SHARE))


class RateLimits:
    """Counts requests per (route class, caller) in ``storage``; ``clock`` is epoch seconds.

    Each process takes a caller's requests from Redis in leases (``INCRBY n``:
    :func:`lease_size`, large while the window is far from its limit, one at a
    time near it) and serves the next ones from the lease without a round trip;
    a lease of :data:`PREFETCH_MIN` or more is refilled in the background once
    half spent, so a steady caller seldom waits for Redis. Once Redis answered
    a count at the limit, the rest of the window is refused without asking
    again. The count in Redis is never below what was served, so no process
    lets through more than the limit; a lease another process holds unspent at
    the end of a window can refuse a request a little early (at most about an
    eighth of what was left when it was taken).
    """

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
        self._leases: dict[tuple[RouteClass, str], _Lease] = {}
        self._refills: set[asyncio.Task[None]] = set()

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
        reset = max(1, math.ceil((window + 1) * period - now))
        lease = self._lease(kind, caller, window)
        position = lease.spend()
        if position is None and lease.seen < item.amount:
            size = lease_size(item.amount, lease.seen)
            try:
                count = await self._incr(item, kind, caller, window, size)
            except StorageError as exc:
                self._on_error()
                log.warning("rate limit not counted (Redis: %s); request let through", exc)
                return None
            lease.take(count, size, item.amount)
            position = lease.spend()
        if position is None:
            return Verdict(False, item.amount, 0, reset)
        self._maybe_refill(lease, item, kind, caller)
        return Verdict(True, item.amount, item.amount - position, reset)

    async def _incr(
        self, item: RateLimitItem, kind: RouteClass, caller: str, window: int, size: int
    ) -> int:
        key = item.key_for(kind.value, caller, str(window))
        return await self._storage.incr(key, item.get_expiry(), amount=size)

    def _maybe_refill(
        self, lease: _Lease, item: RateLimitItem, kind: RouteClass, caller: str
    ) -> None:
        """Take the next lease in the background when this one is half spent."""
        if lease.refilling or lease.spare is not None or lease.seen >= item.amount:
            return
        size = lease_size(item.amount, lease.seen)
        if size < PREFETCH_MIN or (lease.last - lease.next + 1) * 2 > size:
            return
        lease.refilling = True

        async def refill() -> None:
            try:
                lease.take(
                    await self._incr(item, kind, caller, lease.window, size), size, item.amount
                )
            except StorageError:
                self._on_error()
            finally:
                lease.refilling = False

        task = asyncio.get_running_loop().create_task(refill())
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    def _lease(self, kind: RouteClass, caller: str, window: int) -> _Lease:
        lease = self._leases.get((kind, caller))
        if lease is None or lease.window != window:
            if len(self._leases) >= LEASES_KEPT:
                self._leases = {k: v for k, v in self._leases.items() if v.window >= window}
            lease = self._leases[(kind, caller)] = _Lease(window)
        return lease


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
