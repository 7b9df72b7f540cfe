"""The projection lease in Redis: acquire or renew, release, peek (decisions: ``domain.lease``).

Two keys share one hash tag (one slot on a cluster): a hash with the holder
(``id``, ``where``, ``epoch``) that expires unless renewed, and the epoch
counter, which never expires, so every acquisition gets a higher epoch than
any before it. One Lua call answers each attempt atomically.
"""

from __future__ import annotations

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, Script, text_of
from domain.errors import ServiceError
from domain.lease import Answer, Deployment, lease_keys

ACQUIRE = Script(
    """
-- KEYS[1] holder hash, KEYS[2] epoch counter
-- ARGV: id, where, ttl ms, our epoch (0: none yet)
-- Returns {1, epoch} held by us, {0, epoch, id, where} held by another, {-1, epoch} lost.
local id = redis.call('HGET', KEYS[1], 'id')
if id == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'epoch'))}
end
if id then
  local h = redis.call('HMGET', KEYS[1], 'epoch', 'where')
  return {0, tonumber(h[1]), id, h[2]}
end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
local mine = tonumber(ARGV[4])
if mine > 0 and counter > mine then return {-1, counter} end
local epoch = mine
if mine == 0 then
  epoch = redis.call('INCR', KEYS[2])
elseif counter < mine then
  redis.call('SET', KEYS[2], mine)   -- the counter was lost (a flush): never go back
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'where', ARGV[2], 'epoch', epoch)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, epoch}
"""
)

RELEASE = Script(
    """
-- KEYS[1] holder hash; ARGV[1] id: drop the lease only if it is ours
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
)


class RedisLease:
    """One deployment's handle on the lease of one projection."""

    def __init__(self, client: RedisClient, namespace: str, topic: str, me: Deployment) -> None:
        self._client = client
        self._me = me
        self._keys = list(lease_keys(namespace, topic))

    def attempt(self, epoch: int, ttl_s: float) -> Answer:
        """Acquire (``epoch`` 0) or renew the lease; Redis errors propagate."""
        reply = ACQUIRE(
            self._client, self._keys, [self._me.id, self._me.where, int(ttl_s * 1000), epoch]
        )
        code, got = int(reply[0]), int(reply[1])
        if code == 1:
            return Answer(held=True, epoch=got)
        if code == -1:
            return Answer(held=False, epoch=got, lost=True)
        return Answer(
            held=False, epoch=got, holder=Deployment(text_of(reply[2]), text_of(reply[3]))
        )

    def release(self) -> bool:
        """Give the lease up now (a clean stop), if it is still ours."""
        try:
            return bool(RELEASE(self._client, self._keys[:1], [self._me.id]))
        except (redis.RedisError, RedisClusterException):
            return False  # it expires by itself


def peek(client: RedisClient, namespace: str, topic: str) -> tuple[Deployment, int] | None:
    """The deployment holding a projection's lease and its epoch, or None."""
    try:
        got = client.hmget(lease_keys(namespace, topic)[0], "id", "where", "epoch")
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"cannot read the deployment lease: {exc}") from exc
    if got[0] is None:
        return None
    return Deployment(text_of(got[0]), text_of(got[1])), int(got[2] or 0)
