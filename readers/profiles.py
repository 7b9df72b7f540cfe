"""Profiles next to ranked entries: one batched lookup per page, never one per entry.

A page's players are grouped by profile bucket (:func:`domain.profiles.bucket_of`).
On a standalone Redis one read-only script (:data:`LOOKUP`) runs every bucket's
``HMGET`` in one command; on a Redis Cluster, whose scripts cannot span slots,
every bucket's ``HMGET`` goes out in one pipeline, which redis-py's cluster
client sends as one round trip per master holding a bucket. A page of 100
entries costs at most :data:`~domain.profiles.BUCKETS` ``HMGET`` s, whatever its
size. An entry whose player has no profile gets ``"profile": null``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio.cluster
from redis.cluster import RedisCluster

from adapters.redis import AsyncRedisClient, RedisClient, Script
from domain.errors import QueryError
from domain.keys import LIVE_NAMESPACE
from domain.profiles import Profile, ProfileKeys, bucket_of, stored_profile
from domain.ranking import Entry
from readers.answers import AroundAnswer, FriendsBoard, TopPage

#: The answers whose entries carry profiles.
Page = TopPage | AroundAnswer | FriendsBoard


#: KEYS: bucket hashes; ARGV: per key, its player count then its players.
#: Returns every player's stored profile (nil: none), in argument order.
LOOKUP = Script(
    """
local out, at = {}, 1
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[at])
  local values = redis.call('HMGET', key, unpack(ARGV, at + 1, at + n))
  for j = 1, n do out[#out + 1] = values[j] end
  at = at + n + 1
end
return out
"""
)


def lines_of(answer: Page) -> list[Entry]:
    """Every entry of an answer, in order (around: above, the player, below)."""
    if "entries" in answer:
        return list(answer["entries"])  # type: ignore[typeddict-item]
    around: Any = answer
    me = [around["player"]] if around["player"] is not None else []
    return [*around["above"], *me, *around["below"]]


def _plan(namespace: str, player_ids: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``(bucket hash key, distinct players)`` per bucket the players fall in."""
    by_bucket: dict[int, list[str]] = {}
    for player in dict.fromkeys(player_ids):
        by_bucket.setdefault(bucket_of(player), []).append(player)
    return [(ProfileKeys(namespace, b).profiles, players) for b, players in by_bucket.items()]


def _script_args(plan: Sequence[tuple[str, list[str]]]) -> tuple[list[str], list[Any]]:
    """:data:`LOOKUP`'s keys and arguments for a plan."""
    keys = [key for key, _ in plan]
    args: list[Any] = []
    for _key, players in plan:
        args += [len(players), *players]
    return keys, args


def _found(players: Sequence[str], values: Sequence[Any]) -> dict[str, Profile]:
    """The profiles the replies hold, by player (``values`` in ``players`` order)."""
    return {
        player: stored_profile(raw)
        for player, raw in zip(players, values, strict=True)
        if raw is not None
    }


def _players(plan: Sequence[tuple[str, list[str]]]) -> list[str]:
    return [player for _key, players in plan for player in players]


def _fill(lines: Iterable[Entry], found: dict[str, Profile]) -> None:
    for line in lines:
        line["profile"] = found.get(line["playerId"])


def _check_namespace(namespace: str) -> None:
    if not namespace or any(c in namespace for c in "{}: "):
        raise QueryError(f"namespace must be non-empty without {{}}: or spaces: {namespace!r}")


class ProfileReader:
    """Looks profiles up for the Python API, the CLI and the HTTP server's threads."""

    def __init__(self, client: RedisClient, namespace: str = LIVE_NAMESPACE) -> None:
        _check_namespace(namespace)
        self._client = client
        self.namespace = namespace

    def lookup(self, player_ids: Iterable[str]) -> dict[str, Profile]:
        """The profiles of the players that have one (one round trip, per node on a cluster)."""
        plan = _plan(self.namespace, player_ids)
        if not plan:
            return {}
        if not isinstance(self._client, RedisCluster):
            return _found(_players(plan), LOOKUP(self._client, *_script_args(plan)))
        pipe = self._client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
        for key, players in plan:
            pipe.hmget(key, players)
        return _found(_players(plan), [v for values in pipe.execute() for v in values])

    def profile(self, player_id: str) -> Profile | None:
        """One player's profile, or None."""
        return self.lookup([player_id]).get(player_id)

    def hydrate(self, answer: Page) -> Page:
        """Set ``profile`` on every entry of ``answer`` (in place); the answer."""
        lines = lines_of(answer)
        _fill(lines, self.lookup(line["playerId"] for line in lines))
        return answer


class AsyncProfileReader:
    """:class:`ProfileReader` on the HTTP server's asyncio client."""

    def __init__(self, client: AsyncRedisClient, namespace: str = LIVE_NAMESPACE) -> None:
        _check_namespace(namespace)
        self._client = client
        self.namespace = namespace

    async def lookup(self, player_ids: Iterable[str]) -> dict[str, Profile]:
        """As :meth:`ProfileReader.lookup`."""
        plan = _plan(self.namespace, player_ids)
        if not plan:
            return {}
        if not isinstance(self._client, redis.asyncio.cluster.RedisCluster):
            values = await LOOKUP.run_async(self._client, *_script_args(plan))
            return _found(_players(plan), values)
        pipe = self._client.pipeline(transaction=False)
        for key, players in plan:
            pipe.hmget(key, players)
        return _found(_players(plan), [v for values in await pipe.execute() for v in values])

    async def hydrate(self, answer: Page) -> Page:
        """As :meth:`ProfileReader.hydrate`."""
        lines = lines_of(answer)
        _fill(lines, await self.lookup(line["playerId"] for line in lines))
        return answer
