"""Clients and catalogs built from the settings: the one place that knows how.

Every edge (the job, the CLI, the HTTP server, the periodic jobs, the
benchmarks) gets its Redis client here, so the URL, the ACL user and
password, the TLS CA and cluster mode are honoured the same way everywhere.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster

from domain.games import GameCatalog
from lb.settings import Settings


def redis_client(settings: Settings, **options: Any) -> Any:
    """A standalone or cluster-aware Redis client; ``options`` go to ``from_url``."""
    kwargs: dict[str, Any] = dict(options)
    if settings.redis_username:
        kwargs["username"] = settings.redis_username
    if settings.redis_password is not None:
        kwargs["password"] = settings.redis_password.reveal()
    if settings.redis_tls_ca is not None:
        kwargs["ssl_ca_certs"] = str(settings.redis_tls_ca)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url.reveal(), **kwargs)
    return redis.Redis.from_url(settings.redis_url.reveal(), **kwargs)


def game_catalog(settings: Settings) -> GameCatalog:
    """The game rules: ``LB_GAMES`` when set, else the built-in defaults."""
    if settings.games_file is not None:
        return GameCatalog.load(settings.games_file)
    return GameCatalog.builtin()
