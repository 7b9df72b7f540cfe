"""The read side: leaderboard queries over the Redis boards the job writes.

Readers are the edge between the pure ranking math (``domain.ranking``) and
Redis: they resolve a game and window to keys, fetch what they need in batched
round trips, and hand the raw members to the domain functions. They never read
the clock (the current window is found from a ``now_ms`` argument) nor the
environment; :func:`redis_client` builds a client from the one settings object.
"""

from __future__ import annotations

from typing import Any

from adapters.redis import RedisClient
from config import clients
from config.clients import game_catalog
from config.settings import Settings


def redis_client(settings: Settings, **options: Any) -> RedisClient:
    """A Redis client from the settings (URL, ACL user/password, TLS CA, cluster).

    Readers take either kind of client; this is what the CLI and the HTTP
    server use. A cluster-aware client when the settings say ``LB_REDIS_URL``
    names a cluster node (``LB_REDIS_CLUSTER``). ``options`` go to
    ``from_url`` (e.g. ``socket_timeout``).
    """
    kwargs: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0, **options}
    client: RedisClient = clients.redis_client(settings, **kwargs)
    return client


__all__ = ["RedisClient", "game_catalog", "redis_client"]
