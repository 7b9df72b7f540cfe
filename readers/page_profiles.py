"""A page and its players' profiles in one script call, where one script can reach both.

On a standalone Redis every key lives on the one server, so a top page by
offset or an around window of an unsharded board is read together with its
entries' metadata and its players' profiles by one read-only script
(:data:`TOP_SCRIPT`, :data:`AROUND_SCRIPT`): one round trip for the whole
hydrated answer. The script is given all :data:`~domain.profiles.BUCKETS`
bucket hashes as keys and finds each player's bucket itself (the SHA-1 of the
playerId, as :func:`domain.profiles.bucket_of`, by ``redis.sha1hex``: one C
call per player, where a CRC-32 in Lua took a loop of bit operations per byte).

Without profiles, :data:`AROUND_SCRIPT` is every around read of an unsharded
board (on a cluster too: the board and its metadata share a slot), so the
window and its metadata are one call either way.

A Redis Cluster cannot run a script over the board and the profile buckets
(they hash to different slots), nor can a sharded board's read (several
slots): those read the page first, then the profiles with
:meth:`readers.profiles.ProfileReader.lookup` (one pipeline, one round trip
per node holding a bucket).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import redis.asyncio.cluster
from redis.cluster import RedisCluster

from adapters.redis import AsyncRedisClient, RedisClient, Script, text_of
from domain.keys import entry_metadata_key
from domain.profiles import BUCKETS, Profile, all_buckets, stored_profile
from domain.ranking import Entry, Member
from readers import entry_metadata
from readers.board_reads import Board, flat_members

#: ``profiles(members, first)``: each member's stored profile (false: none) from
#: the bucket hashes ``KEYS[first] .. KEYS[first + BUCKETS - 1]``, in member order.
_PROFILES_LUA = (
    f"local BUCKETS = {BUCKETS}\n"
    + """
local function bucket(s)
  return tonumber(string.sub(redis.sha1hex(s), 1, 4), 16) % BUCKETS
end
local function profiles(members, first)
  local groups, out = {}, {}
  for at, m in ipairs(members) do
    local b = bucket(m)
    local g = groups[b]
    if not g then g = {names = {}, at = {}}; groups[b] = g end
    g.names[#g.names + 1] = m
    g.at[#g.at + 1] = at
    out[at] = false
  end
  for b, g in pairs(groups) do
    local values = redis.call('HMGET', KEYS[first + b], unpack(g.names))
    for j, at in ipairs(g.at) do out[at] = values[j] end
  end
  return out
end
local function metadata(members)
  if ARGV[1] ~= '1' or #members == 0 or redis.call('EXISTS', KEYS[2]) == 0 then return false end
  return redis.call('HMGET', KEYS[2], unpack(members))
end
local function members_of(page)
  local members = {}
  for i = 1, #page, 2 do members[#members + 1] = page[i] end
  return members
end
"""
)

#: KEYS[1] board, KEYS[2] its entry-metadata hash, KEYS[3..] the profile buckets 0..15;
#: ARGV[1] '1' to read metadata, ARGV[2] start, ARGV[3] stop (ZREVRANGE), ARGV[4] '1'.
#: Returns {flat member, composite, ...; metadata or nil; profiles (nil: none)}.
TOP_SCRIPT = Script(
    _PROFILES_LUA
    + """
local page = redis.call('ZREVRANGE', KEYS[1], ARGV[2], ARGV[3], 'WITHSCORES')
local members = members_of(page)
return {page, metadata(members), profiles(members, 3)}
"""
)

#: KEYS as :data:`TOP_SCRIPT` (only the first two without profiles); ARGV[1] '1' to read
#: metadata, ARGV[2] playerId, ARGV[3] k, ARGV[4] '1' to read profiles. Returns nil, or
#: {0-based ZREVRANK, {member, composite, ...} of ranks r-k .. r+k, metadata or nil,
#: profiles (nil: none) or nil}.
AROUND_SCRIPT = Script(
    _PROFILES_LUA
    + """
local r = redis.call('ZREVRANK', KEYS[1], ARGV[2])
if not r then return false end
local k = tonumber(ARGV[3])
local lo = r - k
if lo < 0 then lo = 0 end
local page = redis.call('ZREVRANGE', KEYS[1], lo, r + k, 'WITHSCORES')
local members = members_of(page)
local found = false
if ARGV[4] == '1' then found = profiles(members, 3) end
return {r, page, metadata(members), found}
"""
)


def one_script(client: RedisClient | AsyncRedisClient, board: Board, profiles: bool = True) -> bool:
    """Whether one script can read ``board``'s page (with its profiles if ``profiles``).

    An unsharded board and its metadata share a slot; the profile buckets are
    on other slots, which only a standalone Redis lets one script reach.
    """
    cluster = isinstance(client, RedisCluster | redis.asyncio.cluster.RedisCluster)
    return not board.sharded and not (profiles and cluster)


def keys_of(board: Board, namespace: str, profiles: bool = True) -> list[str]:
    """The scripts' keys: the board, its entry-metadata hash, every profile bucket if asked."""
    key = board.keys[0]
    return [key, entry_metadata_key(key), *(bucket_keys(namespace) if profiles else ())]


@functools.lru_cache(maxsize=64)
def bucket_keys(namespace: str) -> tuple[str, ...]:
    """Every profile bucket's hash in ``namespace``, bucket 0 first (the same for every page)."""
    return tuple(b.profiles for b in all_buckets(namespace))


def meta_flag(board: Board) -> str:
    """ARGV[1]: whether the board's game keeps entry metadata."""
    return "1" if entry_metadata.wanted(board, 1) else "0"


class PageParts:
    """A script's page: its members, their metadata and their profiles (board order)."""

    __slots__ = ("members", "metadata", "profiles")

    def __init__(self, page: Sequence[Any], metadata: Any, profiles: Sequence[Any] | None) -> None:
        self.members: list[Member] = flat_members(page)
        self.metadata: list[str | None] = (
            [None] * len(self.members)
            if not metadata
            else [None if v is None else text_of(v) for v in metadata]
        )
        #: None: the profiles were not read (the lines get no ``profile`` field).
        self.profiles: list[Profile | None] | None = (
            None
            if profiles is None
            else [None if r is None else stored_profile(r) for r in profiles]
        )

    def put(self, lines: Sequence[Entry]) -> None:
        """Give ``lines`` (the page's first members) their metadata and profiles."""
        for at, (line, meta) in enumerate(zip(lines, self.metadata, strict=False)):
            if meta is not None:
                line["metadata"] = meta
            if self.profiles is not None:
                line["profile"] = self.profiles[at]
