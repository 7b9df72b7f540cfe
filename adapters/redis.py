"""Redis as this project uses it: the client types, one decode policy, Lua scripts by SHA.

* :data:`RedisClient` / :data:`AsyncRedisClient`: a standalone or a
  cluster-aware client; every function that talks to Redis takes one of them
  (``config.clients`` builds them from the settings).
* Decoding: clients are made with ``decode_responses`` off, because board
  members, sketches and change-stream payloads are bytes-exact; a reply that is
  text (a key, a member name, a hash field) is decoded as UTF-8 by
  :func:`text` and its relatives, and nowhere else.
* :class:`Script`: a Lua script declared once, called by ``EVALSHA`` (its text
  crosses the network only after Redis answers ``NOSCRIPT``: a restart or a
  ``SCRIPT FLUSH``). In a pipeline, :meth:`Script.registered` gives redis-py's
  script object, which loads it before the pipeline runs when it is missing.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.cluster import RedisCluster
from redis.commands.core import Script as RegisteredScript
from redis.exceptions import NoScriptError

#: A standalone or cluster-aware client; everything that talks to Redis accepts either.
RedisClient: TypeAlias = redis.Redis | RedisCluster

#: The asyncio clients of the HTTP server.
AsyncRedisClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

#: One element of a reply that holds text: bytes from Redis, str from a test's fake.
Text: TypeAlias = bytes | str


def text(value: Text) -> str:
    """A reply element as text (UTF-8)."""
    return value.decode() if isinstance(value, bytes) else value


def text_of(value: object) -> str:
    """Any reply element as text: bytes decoded, anything else (an int) by ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def texts(values: Iterable[Text]) -> list[str]:
    """Every element of a reply as text, in order."""
    return [text(value) for value in values]


def text_set(values: Iterable[Text]) -> set[str]:
    """A set reply (``SMEMBERS``) as text."""
    return {text(value) for value in values}


def as_cluster(client: RedisClient) -> RedisCluster:
    """``client`` where only a cluster-aware one can be (a write routed per node)."""
    if not isinstance(client, RedisCluster):
        raise TypeError("a cluster-aware Redis client was expected here")
    return client


def node_of(cluster: RedisCluster, key: str) -> tuple[str, redis.Redis]:
    """The name of the master serving ``key``'s slot, and a client of that master."""
    node = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
    return node.name, cluster.get_redis_connection(node)


class Script:
    """A Lua script: declared once, called by SHA, loaded again on ``NOSCRIPT``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, client: RedisClient, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        """Run it on the node of ``keys[0]`` (``EVALSHA``; loads it after ``NOSCRIPT``)."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    async def run_async(
        self, client: AsyncRedisClient, keys: Sequence[str], args: Sequence[Any] = ()
    ) -> Any:
        """:meth:`__call__` on an asyncio client."""
        try:
            return await _awaited(client.evalsha(self.sha, len(keys), *keys, *args))
        except NoScriptError:
            await _awaited(client.script_load(self.source))
            return await _awaited(client.evalsha(self.sha, len(keys), *keys, *args))

    def registered(self, client: RedisClient) -> RegisteredScript:
        """redis-py's script object of ``client`` (a client, or one node's connection).

        For pipelines: ``script(keys=..., args=..., client=pipe)`` queues an
        ``EVALSHA`` and the pipeline loads the script first when Redis lacks it.
        """
        return client.register_script(self.source)


async def _awaited(reply: Any) -> Any:
    return await reply if inspect.isawaitable(reply) else reply
