"""Publishes each board's percentile sketch to Redis (``lb sketches publish``).

For every board it publishes, the publisher reads the board's *current* values,
shard by shard, in ascending rank chunks (``ZRANGE key i i+chunk-1
WITHSCORES``, several chunks per pipelined round trip), decodes each composite
to its score, feeds the scores to one KLL sketch per shard, merges the shard
sketches and stores the result with a single ``SET`` under
``<ns>:{<game>}:meta:sketch:<window id>`` (``domain.sketches.sketch_key``):
readers see the previous sketch or the new one, never a partial one. Windowed
boards' sketches expire with the board (``PXAT`` of the board's expiry).

Because each build starts from the board rather than from the event stream,
every player is counted once, at the value they hold now, however many times
they improved; this is what keeps percentiles right under the ``best`` and
``incr`` operators. The cost is a full read of the board per publish (about
1.5 s of client time per million players on the development machine, see
``docs/PERCENTILES.md``), in chunks small enough (5,000 members, a few ms of
Redis time each) not to stall the job's writes.

The clock is never read here: ``built_at_ms`` / ``now_ms`` are arguments (the
CLI reads the clock); :func:`time.perf_counter` only times the work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient
from domain.errors import ConfigError, ServiceError
from domain.games import GameCatalog, GameConfig
from domain.keys import LIVE_NAMESPACE, GroupKeys, shard_tag
from domain.sketches import (
    DEFAULT_K,
    DEFAULT_SETTLE_MS,
    PublishedSketch,
    merge,
    new_sketch,
    scores_from_composites,
    sketch_key,
    windows_to_publish,
)
from domain.windows import Window

__all__ = ["DEFAULT_CHUNK", "Publication", "SketchPublisher"]

#: Members per ``ZRANGE``: bounds how long one command holds Redis (~4 ms).
DEFAULT_CHUNK = 5_000
#: ``ZRANGE`` commands per pipelined round trip (bounds the client's buffer).
DEFAULT_CHUNKS_PER_TRIP = 20


@dataclass(frozen=True, slots=True)
class Publication:
    """What one board's publish did.

    ``n == 0``: the board is empty or absent, and any sketch previously
    published for it was deleted.
    """

    game_id: str
    window_id: str
    key: str
    n: int
    shards: int
    k: int
    size_bytes: int
    built_at_ms: int
    scan_s: float
    """Reading every shard and feeding its sketch."""
    store_s: float
    """Merging, encoding and the ``SET``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "game": self.game_id,
            "window": self.window_id,
            "key": self.key,
            "n": self.n,
            "shards": self.shards,
            "k": self.k,
            "bytes": self.size_bytes,
            "builtAtMs": self.built_at_ms,
            "scanSeconds": round(self.scan_s, 3),
            "storeSeconds": round(self.store_s, 3),
        }


def _run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis failed while publishing a sketch: {exc}") from exc


class SketchPublisher:
    """Builds and publishes the sketches of the boards of a catalog's games.

    ``k`` sizes every sketch (``domain.sketches.rank_error``); ``chunk`` and
    ``chunks_per_trip`` shape the board reads; ``settle_ms`` is how long a
    closed windowed board keeps being republished
    (``domain.sketches.windows_to_publish``).
    """

    def __init__(
        self,
        client: RedisClient,
        catalog: GameCatalog,
        namespace: str = LIVE_NAMESPACE,
        *,
        k: int = DEFAULT_K,
        chunk: int = DEFAULT_CHUNK,
        chunks_per_trip: int = DEFAULT_CHUNKS_PER_TRIP,
        settle_ms: int = DEFAULT_SETTLE_MS,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not namespace or any(c in namespace for c in "{}: "):
            raise ConfigError(f"namespace must be non-empty without {{}}: or spaces: {namespace!r}")
        if chunk < 1 or chunks_per_trip < 1 or settle_ms < 0:
            raise ConfigError("chunk and chunks_per_trip must be positive, settle_ms >= 0")
        new_sketch(k)  # refuses a k DataSketches cannot build, before any I/O
        self._client = client
        self._catalog = catalog
        self.namespace = namespace
        self.k = k
        self._chunk = chunk
        self._per_trip = chunks_per_trip
        self._settle_ms = settle_ms
        self._timer = timer

    def game(self, game_id: str) -> GameConfig:
        config = self._catalog.lookup(game_id)
        if config is None:
            raise ConfigError(f"game {game_id!r} is not served by the game catalog (LB_GAMES)")
        return config

    def board_keys(self, game_id: str, config: GameConfig, window: Window) -> list[str]:
        """The sorted-set key of each shard of one board (one key when unsharded)."""
        tags = (
            [shard_tag(game_id, None)]
            if config.shards <= 1
            else [shard_tag(game_id, i) for i in range(config.shards)]
        )
        return [GroupKeys(self.namespace, tag).board(window.id) for tag in tags]

    def shard_sketch(self, key: str, config: GameConfig, window: Window) -> Any:
        """A sketch of the scores of one shard key, read in ascending rank chunks.

        Members that move while the read is under way can be seen twice or
        not at all (a chunk boundary shifts under them); the error that adds
        is at most the number of moves during the read over ``n``, which is
        small next to the sketch's own error at the sizes this is for.
        """
        codec = config.codec(window)
        sketch = new_sketch(self.k)
        start = 0
        while True:
            pipe = self._client.pipeline(transaction=False)
            for i in range(self._per_trip):
                first = start + i * self._chunk
                pipe.zrange(key, first, first + self._chunk - 1, withscores=True)
            for reply in _run(pipe.execute):
                if reply:
                    values = np.fromiter(
                        (value for _, value in reply), dtype=np.float64, count=len(reply)
                    )
                    sketch.update(scores_from_composites(values, codec))
                if len(reply) < self._chunk:
                    return sketch
            start += self._per_trip * self._chunk

    def publish_board(
        self, game_id: str, config: GameConfig, window: Window, built_at_ms: int
    ) -> Publication:
        """Rebuild one board's sketch from its current values and swap it in."""
        key = sketch_key(self.namespace, game_id, window.id)
        started = self._timer()
        keys = self.board_keys(game_id, config, window)
        parts = [self.shard_sketch(board, config, window) for board in keys]
        scanned = self._timer()
        published = PublishedSketch(window.id, built_at_ms, len(parts), merge(parts, self.k))
        expire_at = config.expire_at_ms(window)
        payload = b""
        if published.n == 0 or (expire_at is not None and expire_at <= built_at_ms):
            _run(self._client.delete, key)  # no board (or an expired one): no sketch
        else:
            payload = published.encode()
            _run(self._client.set, key, payload, pxat=expire_at)
        return Publication(
            game_id,
            window.id,
            key,
            published.n if payload else 0,
            len(parts),
            self.k,
            len(payload),
            built_at_ms,
            scanned - started,
            self._timer() - scanned,
        )

    def publish_game(self, game_id: str, now_ms: int) -> list[Publication]:
        """Every board of one game that may have changed (``windows_to_publish``)."""
        config = self.game(game_id)
        return [
            self.publish_board(game_id, config, window, now_ms)
            for window in windows_to_publish(config, now_ms, self._settle_ms)
        ]

    def publish(self, game_ids: Iterable[str], now_ms: int) -> list[Publication]:
        """One publishing round over ``game_ids``; ``now_ms`` stamps every sketch."""
        return [p for game_id in game_ids for p in self.publish_game(game_id, now_ms)]
