"""Which games have boards: the configured ones plus those the job created from ``[default]``.

A game served only by the ``[default]`` table of ``LB_GAMES`` (or by the
built-in defaults, with ``LB_GAMES`` unset) is named nowhere in the
configuration; its boards are found by their registry key
``<ns>:{<game>}:meta:boards`` (``{<game>/<shard>}`` when sharded).
"""

from __future__ import annotations

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, text
from domain.errors import ServiceError
from domain.games import GameCatalog


def glob_escape(raw: str) -> str:
    """``raw`` as a literal inside a Redis ``SCAN MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in raw)


def games_with_boards(client: RedisClient, namespace: str, catalog: GameCatalog) -> list[str]:
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


def namespaces_with_boards(client: RedisClient) -> list[str]:
    """Every key namespace holding a board registry (``<ns>:{<game>}:meta:boards``), sorted."""
    found: set[str] = set()
    try:
        for raw in client.scan_iter(match="*:{*}:meta:boards", count=1000):
            found.add(text(raw).split(":{", 1)[0])
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis scan failed: {exc}") from exc
    return sorted(found)


def what_exists_instead(
    client: RedisClient, namespace: str, catalog: GameCatalog, game: str
) -> str | None:
    """``None`` when ``game`` is configured or has boards in ``namespace``; else what exists.

    For the moment a typo (a game id, ``LB_NAMESPACE``) would read as an empty
    board: the sentence names the games with boards in this namespace, or, when
    it has none, the namespaces that do.
    """
    games = games_with_boards(client, namespace, catalog)
    if game in games:
        return None
    if games:
        return f"games with boards there: {_some(games)}"
    others = [ns for ns in namespaces_with_boards(client) if ns != namespace]
    if others:
        return f"it has no boards at all; namespaces with boards: {_some(others)}"
    return "no namespace has boards in this Redis yet"


def _some(names: list[str], shown: int = 12) -> str:
    """A list for one line: the first ``shown`` names and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
