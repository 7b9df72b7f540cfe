"""Which games have boards: the configured ones plus those the job created from ``[default]``.

A game served only by the ``[default]`` table of ``LB_GAMES`` (or by the
built-in defaults, with ``LB_GAMES`` unset) is named nowhere in the
configuration; its boards are found by their registry key
``<ns>:{<game>}:meta:boards`` (``{<game>/<shard>}`` when sharded).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import RedisClusterException

from domain.errors import ServiceError
from domain.games import GameCatalog
from readers.boards import text


def glob_escape(raw: str) -> str:
    """``raw`` as a literal inside a Redis ``SCAN MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in raw)


def games_with_boards(client: Any, namespace: str, catalog: GameCatalog) -> list[str]:
    """Configured games and every served game with a board registry in Redis, sorted."""
    found = set(catalog.games())
    pattern = f"{glob_escape(namespace)}:{{*}}:meta:boards"
    try:
        for raw in client.scan_iter(match=pattern, count=1000):
            tag = text(raw).split("{", 1)[1].split("}", 1)[0]
            game = tag.rsplit("/", 1)[0] if "/" in tag else tag
            if catalog.lookup(game) is not None:
                found.add(game)
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis scan failed: {exc}") from exc
    return sorted(found)
