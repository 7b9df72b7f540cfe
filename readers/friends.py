"""Friend lists and the friends board: a player ranked among the players they follow.

Friendship is one-way ("following"): adding B to A's friends changes only
A's set. The friends board of A on one window is A plus A's friends, ranked
by the same order as the global board (``domain.ranking.rank_members``) and
numbered 1..n among themselves; players without a score on that board are
left out.

One board costs, on a cache miss, two round trips for an unsharded game
whatever the number of friends: one read-only script that answers the cached
board or, failing that, looks the friends up (``SMEMBERS``) and scores them
(``ZMSCORE``) where they live, returning only those on the board; then one
``MULTI`` that stores the answer. A sharded game's players live under other
hash tags than the friend set, which a script may not reach, so there the
script answers the cache or the friend set and one pipeline of ``ZMSCORE``
(one per shard key) goes between: three trips. A hit costs the first trip
only.

The answer is cached in Redis for a few seconds (a jittered TTL, so boards
computed together do not expire together), because a popular player's
friends board is asked for far more often than it changes meaningfully. The
cache is dropped whenever the player's friend set changes, so adding a friend
shows at once; score changes show within the TTL.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.games import GameCatalog
from domain.keys import LIVE_NAMESPACE, GroupKeys, shard_tag
from domain.ranking import (
    Entry,
    Member,
    competition_ranks,
    composite_of,
    dense_ranks,
    entries,
    jittered_ttl_ms,
    rank_members,
    rank_mode,
)
from readers import entry_metadata
from readers.answers import FriendsBoard
from readers.board_reads import call, check_player_id, execute, flat_members
from readers.boards import Board, BoardReader

__all__ = [
    "DEFAULT_CACHE_TTL_MS",
    "DEFAULT_JITTER",
    "MAX_FRIENDS_PER_CALL",
    "FriendsBoard",
    "FriendsReader",
    "friends_cache_key",
    "friends_key",
]

#: Mean lifetime of a cached friends board.
DEFAULT_CACHE_TTL_MS = 5_000
#: Relative spread of that lifetime: 5 s +- 20 % is 4-6 s.
DEFAULT_JITTER = 0.2
#: Most friend ids one add/remove call takes (bounds one SADD/SREM).
MAX_FRIENDS_PER_CALL = 10_000

#: KEYS[1] cache hash, KEYS[2] friend set; ARGV[1] window id.
#: Returns {1, cached JSON, PTTL} on a hit, {0, {friend, ...}} on a miss.
CACHED_OR_FRIENDS = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return {1, v, redis.call('PTTL', KEYS[1])} end
return {0, redis.call('SMEMBERS', KEYS[2])}
"""

#: KEYS[1] cache hash, KEYS[2] friend set, KEYS[3] the (unsharded) board;
#: ARGV[1] window id, ARGV[2] the player. All three keys share the game's hash
#: tag. Returns {1, cached JSON, PTTL} on a hit, {0, {member, score, ...}} of
#: the player and friends that are on the board on a miss. ZMSCORE is sent in
#: chunks because Lua's unpack() stops near 8,000 values and a friend set may
#: have grown past that over many calls.
CACHED_OR_SCORED = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return {1, v, redis.call('PTTL', KEYS[1])} end
local members = {ARGV[2]}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if m ~= ARGV[2] then members[#members + 1] = m end
end
local found = {}
for first = 1, #members, 1000 do
  local last = math.min(first + 999, #members)
  local scores = redis.call('ZMSCORE', KEYS[3], unpack(members, first, last))
  for i = first, last do
    local score = scores[i - first + 1]
    if score then
      found[#found + 1] = members[i]
      found[#found + 1] = score
    end
  end
end
return {0, found}
"""


def friends_key(namespace: str, game_id: str, player_id: str) -> str:
    """``<ns>:{<game>}:friends:<player>``: the set of playerIds ``player`` follows in ``game``.

    Tagged with the game id, never a shard tag, so one player's friend set and
    friends-board cache share a slot (one MULTI can change both) whatever the
    game's shard count.
    """
    return GroupKeys(namespace, shard_tag(game_id, None)).friends(player_id)


def friends_cache_key(namespace: str, game_id: str, player_id: str) -> str:
    """``<ns>:{<game>}:friendsboard:<player>``: hash of window id -> cached board JSON.

    One hash per player (not one key per window) so a change of the friend set
    drops every cached window with one ``DEL``. The hash gets its TTL when it
    is created and keeps it (``PEXPIRE ... NX``), so no entry outlives it.
    """
    return GroupKeys(namespace, shard_tag(game_id, None)).friends_board(player_id)


def _friend_ids(friends: Iterable[str], player_id: str) -> list[str]:
    ids = [friends] if isinstance(friends, str) else list(dict.fromkeys(friends))
    if not ids:
        raise QueryError("name at least one friend")
    if len(ids) > MAX_FRIENDS_PER_CALL:
        raise QueryError(f"at most {MAX_FRIENDS_PER_CALL} friends per call, got {len(ids)}")
    for friend in ids:
        check_player_id(friend, "friend id")
        if friend == player_id:
            raise QueryError("a player cannot be their own friend")
    return ids


class FriendsReader:
    """Friend sets (add, remove, list) and the cached friends board.

    ``rng`` draws the TTL jitter; pass a seeded ``random.Random`` for
    reproducible expiries. Thread-safe like :class:`BoardReader`.
    """

    def __init__(
        self,
        client: RedisClient,
        catalog: GameCatalog,
        namespace: str = LIVE_NAMESPACE,
        *,
        cache_ttl_ms: int = DEFAULT_CACHE_TTL_MS,
        jitter: float = DEFAULT_JITTER,
        rng: random.Random | None = None,
    ) -> None:
        jittered_ttl_ms(cache_ttl_ms, jitter, 0.5)  # validates the parameters
        self._client: RedisClient = client
        self._boards = BoardReader(client, catalog, namespace)
        self.namespace = namespace
        self._ttl_ms = cache_ttl_ms
        self._jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    @property
    def client(self) -> RedisClient:
        """The Redis client it reads with."""
        return self._client

    def _keys(self, game_id: str, player_id: str) -> tuple[str, str]:
        check_player_id(player_id)
        self._boards.game(game_id)
        return (
            friends_key(self.namespace, game_id, player_id),
            friends_cache_key(self.namespace, game_id, player_id),
        )

    # -- the friend set ---------------------------------------------------------------

    def add(self, game_id: str, player_id: str, friends: Iterable[str]) -> int:
        """Follow ``friends``; returns how many were new. Drops the cached boards."""
        fkey, ckey = self._keys(game_id, player_id)
        ids = _friend_ids(friends, player_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.sadd(fkey, *ids)
        pipe.delete(ckey)
        return int(execute(pipe)[0])

    def remove(self, game_id: str, player_id: str, friends: Iterable[str]) -> int:
        """Unfollow ``friends``; returns how many were there. Drops the cached boards."""
        fkey, ckey = self._keys(game_id, player_id)
        ids = _friend_ids(friends, player_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.srem(fkey, *ids)
        pipe.delete(ckey)
        return int(execute(pipe)[0])

    def list_friends(self, game_id: str, player_id: str) -> list[str]:
        """The playerIds ``player`` follows, sorted."""
        fkey, _ = self._keys(game_id, player_id)
        return sorted(self._smembers(fkey))

    # -- the board --------------------------------------------------------------------

    def board(
        self, game_id: str, player_id: str, window_spec: str, *, now_ms: int, ranks: str = "unique"
    ) -> FriendsBoard:
        """``player`` and their friends ranked on one window (cached for a few seconds).

        ``ranks``: ``unique`` (1..n), ``competition`` or ``dense``, numbered among
        the friends (the whole board is in hand, so no count is read).
        """
        return _ranked(self._board(game_id, player_id, window_spec, now_ms), rank_mode(ranks))

    def _board(self, game_id: str, player_id: str, window_spec: str, now_ms: int) -> FriendsBoard:
        fkey, ckey = self._keys(game_id, player_id)
        board = self._boards.board(game_id, window_spec, now_ms)
        window_id = board.window.id
        if board.sharded:
            hit, found = self._scored_sharded(board, ckey, fkey, player_id)
        else:
            reply = call(
                self._client.eval,
                CACHED_OR_SCORED,
                3,
                ckey,
                fkey,
                board.keys[0],
                window_id,
                player_id,
            )
            hit, found = (reply, []) if int(reply[0]) == 1 else (None, flat_members(reply[1]))
        if hit is not None:
            cached = _cached_entries(hit[1])
            if cached is not None:
                return {
                    "window": window_id,
                    "entries": cached,
                    "cached": True,
                    "ttl": _seconds(int(hit[2])),
                }
            # A cached value that is not a board: recompute it the sharded way,
            # which reads the friend set and scores by themselves.
            found = self._scores(board, player_id, self._smembers(fkey))
        ranked = rank_members(found)
        lines = entries(ranked, 1, board.codec, max(len(ranked), 1))
        entry_metadata.attach(self._client, board, lines)

        ttl_ms = jittered_ttl_ms(self._ttl_ms, self._jitter, self._rng.random())
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(ckey, window_id, json.dumps(lines, separators=(",", ":")))
        pipe.pexpire(ckey, ttl_ms, nx=True)
        pipe.pttl(ckey)
        remaining = int(execute(pipe)[2])
        return {"window": window_id, "entries": lines, "cached": False, "ttl": _seconds(remaining)}

    def _smembers(self, fkey: str) -> list[str]:
        """The friend set's members as text."""
        return [text(m) for m in call(self._client.smembers, fkey)]

    def _scored_sharded(
        self, board: Board, ckey: str, fkey: str, player_id: str
    ) -> tuple[list[Any] | None, list[Member]]:
        """A cache hit's reply, or the scored members (friends first found by the script)."""
        reply = call(self._client.eval, CACHED_OR_FRIENDS, 2, ckey, fkey, board.window.id)
        if int(reply[0]) == 1:
            return reply, []
        return None, self._scores(board, player_id, [text(m) for m in reply[1]])

    def _scores(self, board: Board, player_id: str, friends: list[str]) -> list[Member]:
        """The player and ``friends`` that are on ``board``, with their composites.

        One ZMSCORE per shard key holding any of them, all in one pipeline.
        """
        by_shard: defaultdict[int, list[str]] = defaultdict(list)
        for member in dict.fromkeys([player_id, *friends]):
            by_shard[board.shard_index(member)].append(member)
        pipe = self._client.pipeline(transaction=not board.sharded)
        for shard, members in by_shard.items():
            pipe.zmscore(board.keys[shard], members)
        found: list[Member] = []
        for members, scores in zip(by_shard.values(), execute(pipe), strict=True):
            found += [
                Member(member, composite_of(score))
                for member, score in zip(members, scores, strict=True)
                if score is not None
            ]
        return found


def _ranked(board: FriendsBoard, mode: str) -> FriendsBoard:
    """The board with its 1..n ranks rewritten in ``mode`` (equal scores share one)."""
    if mode == "unique":
        return board
    lines = board["entries"]
    shared = competition_ranks(lines, 1) if mode == "competition" else dense_ranks(lines, 1)
    for line, rank in zip(lines, shared, strict=True):
        line["rank"] = rank
    return board


def _seconds(pttl: int) -> int:
    """Whole seconds left of a PTTL, rounded up (0 for a key without expiry)."""
    return max(0, math.ceil(pttl / 1000))


def _cached_entries(raw: bytes | str) -> list[Entry] | None:
    """The cached board, or None when the cached text is not one (then recompute)."""
    try:
        doc: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, list) or not all(isinstance(line, dict) for line in doc):
        return None
    out: list[Entry] = []
    for line in doc:
        entry: Entry = {
            "rank": line.get("rank"),
            "playerId": line.get("playerId"),
            "score": line.get("score"),
        }
        if isinstance(line.get("metadata"), str):
            entry["metadata"] = line["metadata"]
        out.append(entry)
    return out
