"""Approximate percentiles from the sketches ``lb sketches publish`` keeps in Redis.

A player beyond a board's exact tier gets ``rank: null`` and a percentile from
the board's published KLL sketch (``domain.sketches``; design and error
figures in ``docs/PERCENTILES.md``). Reading one is a ``GET`` of about 24 KB
and a deserialization, so a :class:`SketchCache` keeps each deserialized
sketch in the process, keyed by Redis key and ``built_at_ms``:

* within ``fresh_s`` (1 s by default) of the last check, no I/O at all;
* after that, one ``GETRANGE`` of the 32-byte header: if ``built_at_ms`` is
  unchanged the cached sketch is used again, otherwise the new value is
  fetched whole (one more round trip, once per publish).

A caller that can read the header in a round trip of its own (the rank
script does, when :meth:`SketchCache.wants_header` says so) passes it in, and
the check costs no round trip at all: a reader then waits behind the job's
writes once per rank, not twice whenever the cache is due.

So a reader answers from a sketch at most ``fresh_s`` older than the latest
published one, and the publisher's interval bounds how far that is behind the
board.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from domain.errors import ServiceError
from domain.games import GameConfig
from domain.sketches import HEADER_SIZE, PublishedSketch, parse_header, sketch_key
from domain.windows import Window
from readers import RedisClient

__all__ = ["SketchCache", "approximate_percentile", "published_sketch"]


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis read failed: {exc}") from exc


@dataclass(slots=True)
class _Entry:
    sketch: PublishedSketch
    checked: float


class SketchCache:
    """Deserialized published sketches, shared by the threads of one process.

    ``clock`` is a monotonic clock in seconds (injectable for tests); it only
    ages cache entries and never decides which board is read. At most
    ``capacity`` sketches are kept (about 24 KB each at the default ``k``);
    when full, the cache starts over.
    """

    def __init__(
        self,
        fresh_s: float = 1.0,
        capacity: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fresh_s < 0 or capacity < 1:
            raise ValueError("fresh_s must be >= 0 and capacity >= 1")
        self._fresh_s = fresh_s
        self._capacity = capacity
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _put(self, key: str, entry: _Entry | None) -> None:
        with self._lock:
            if entry is None:
                self._entries.pop(key, None)
                return
            if key not in self._entries and len(self._entries) >= self._capacity:
                self._entries.clear()
            self._entries[key] = entry

    def wants_header(self, key: str) -> bool:
        """Whether :meth:`get` would read ``key``'s header (nothing fresh is cached)."""
        with self._lock:
            entry = self._entries.get(key)
        return entry is None or self._clock() - entry.checked >= self._fresh_s

    def get(
        self, client: RedisClient, key: str, header: bytes | None = None
    ) -> PublishedSketch | None:
        """The sketch published under ``key``, or None when nothing is published.

        ``header`` is the key's first bytes (``GETRANGE 0 31``; empty when the
        key does not exist) if the caller read them already, so the check
        needs no round trip of its own.
        """
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and now - entry.checked < self._fresh_s:
            return entry.sketch
        if header is None and entry is not None:
            header = bytes(_call(client.getrange, key, 0, HEADER_SIZE - 1) or b"")
        if header is not None:
            if not header:
                self._put(key, None)
                return None
            if entry is not None and parse_header(header).built_at_ms == entry.sketch.built_at_ms:
                self._put(key, _Entry(entry.sketch, now))
                return entry.sketch
        data = _call(client.get, key)
        if data is None:
            self._put(key, None)
            return None
        sketch = PublishedSketch.decode(bytes(data))
        # The first rank query builds the sketch's sorted view; do it before the
        # sketch is shared so concurrent readers only ever read it.
        sketch.percentile(0)
        self._put(key, _Entry(sketch, now))
        return sketch


#: The process-wide cache used when a caller does not bring its own.
DEFAULT_CACHE = SketchCache()


def published_sketch(
    client: RedisClient,
    namespace: str,
    game: str,
    window: Window,
    *,
    cache: SketchCache | None = None,
    header: bytes | None = None,
) -> PublishedSketch | None:
    """The latest sketch published for one board (None if there is none).

    ``header``: the key's header if the caller read it (:meth:`SketchCache.get`).
    """
    return (cache or DEFAULT_CACHE).get(client, sketch_key(namespace, game, window.id), header)


def approximate_percentile(
    client: RedisClient,
    namespace: str,
    game: str,
    config: GameConfig,
    window: Window,
    score: int,
    *,
    now_ms: int | None = None,
    max_age_ms: int | None = None,
    cache: SketchCache | None = None,
    header: bytes | None = None,
) -> float | None:
    """Estimated share (0-100) of the board's players with a strictly lower score.

    ``None`` when the game keeps no such window, when no sketch is published
    for the board, or, given ``now_ms`` and ``max_age_ms``, when the published
    sketch was built more than ``max_age_ms`` before ``now_ms`` (a stopped
    publisher). Otherwise within the sketch's rank error of the exact
    percentile as of ``built_at_ms`` (``docs/PERCENTILES.md``). Same
    truncation to two decimals as the exact percentile.
    """
    if not config.keeps(window.kind):
        return None
    published = published_sketch(client, namespace, game, window, cache=cache, header=header)
    if published is None:
        return None
    if (
        now_ms is not None
        and max_age_ms is not None
        and now_ms - published.built_at_ms > max_age_ms
    ):
        return None
    # The sketch holds board values' stored scores (``max_score - score`` on a
    # lowest-wins board), so "strictly lower" means "ranked below" either way.
    return published.percentile(config.codec(window).stored(score))
