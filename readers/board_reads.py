"""The Redis reads behind :class:`~readers.boards.BoardReader`, one board at a time.

A :class:`Board` is one game's board of one window with its key per shard.
Here are the reads that differ between one key and several: a page by
offset (the merged top-K key when it holds the page, else every shard merged),
the page after a cursor position, and a player's rank and neighbours on a
sharded board (each shard's count above, the ties at the player's value, and
what is below). Every read is one pipelined round trip (two for a player:
their value, then the counts, re-read when the value moved between them).
Client errors become :class:`~domain.errors.ServiceError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, text
from domain.errors import QueryError, ServiceError
from domain.games import GameConfig
from domain.keys import shard_of
from domain.ranking import (
    Member,
    composite_of,
    count_before,
    merge_top,
    neighbours,
    page_after,
    score_floor,
)
from domain.scoring import TieCodec
from domain.validation import MAX_ID_LENGTH
from domain.windows import Window

#: Deepest ``offset + limit`` served on a sharded board: every shard must return
#: that many members for the merge (at 4 shards and depth 9,000 that was ~250 ms
#: per page, against ~0.3 ms for a cursor page). Deeper pages use the cursor.
MAX_SHARDED_DEPTH = 1_000
#: How often a sharded rank/around re-reads when the player's value moves meanwhile.
_SHARDED_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Board:
    """One game's board of one window: its rules, codec and (per shard) keys."""

    game_id: str
    config: GameConfig
    window: Window
    codec: TieCodec
    keys: tuple[str, ...]
    #: The global top-K key of a sharded board (``None`` when unsharded).
    top_key: str | None = None

    @property
    def sharded(self) -> bool:
        return len(self.keys) > 1

    def shard_index(self, player_id: str) -> int:
        """Index into :attr:`keys` of the key holding ``player_id``."""
        shard = shard_of(player_id, len(self.keys))
        return 0 if shard is None else shard

    def key_of(self, player_id: str) -> str:
        return self.keys[self.shard_index(player_id)]


def members_with_scores(pairs: Sequence[tuple[bytes | str, float]]) -> list[Member]:
    """Members of a ``WITHSCORES`` reply as parsed by redis-py (a list of pairs)."""
    return [Member(text(member), composite_of(score)) for member, score in pairs]


def flat_members(flat: Sequence[Any]) -> list[Member]:
    """Members of a raw ``member, score, member, score, ...`` reply (from Lua)."""
    return [Member(text(flat[i]), composite_of(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]


def execute(pipe: Any) -> list[Any]:
    """Run a pipeline, turning client errors into :class:`ServiceError`."""
    try:
        return list(pipe.execute())
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis read failed: {exc}") from exc


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one client command, turning client errors into :class:`ServiceError`."""
    try:
        return fn(*args, **kwargs)
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis read failed: {exc}") from exc


def page_at(client: RedisClient, board: Board, offset: int, count: int) -> tuple[list[Member], int]:
    """``count`` members from ``offset`` (0-based), and the rank of the first."""
    if not board.sharded:
        pairs = call(client.zrevrange, board.keys[0], offset, offset + count - 1, withscores=True)
        return members_with_scores(pairs), offset + 1
    if offset + count - 1 > MAX_SHARDED_DEPTH:
        raise QueryError(
            f"offset + limit beyond {MAX_SHARDED_DEPTH} on a sharded board: "
            f"page with the cursor (nextCursor) instead"
        )
    if board.top_key is not None:
        # The merged top-K, when it holds the whole page (and the member after it).
        pairs = call(client.zrevrange, board.top_key, offset, offset + count - 1, withscores=True)
        if len(pairs) == count:
            return members_with_scores(pairs), offset + 1
    pipe = client.pipeline(transaction=False)
    for key in board.keys:
        pipe.zrevrange(key, 0, offset + count - 1, withscores=True)
    pages = [members_with_scores(pairs) for pairs in execute(pipe)]
    return merge_top(pages, offset + count)[offset:], offset + 1


def page_after_position(
    client: RedisClient, board: Board, position: Member, count: int
) -> tuple[list[Member], int]:
    """``count`` members strictly after ``position``, and the rank of the first.

    Per key: how many are above the position's composite, every member at
    exactly that composite (the ties, where the playerId decides), and the
    first ``count`` below it. The ties are fetched whole because Redis
    cannot range over (score, member) pairs; they are rare except with
    ``tie_resolution = "none"``, where a page costs O(players tied there).
    """
    c = str(position.composite)
    pipe = client.pipeline(transaction=not board.sharded)
    for key in board.keys:
        pipe.zcount(key, f"({c}", "+inf")
        pipe.zrange(key, c, c, byscore=True)
        pipe.zrange(
            key, f"({c}", "-inf", desc=True, byscore=True, offset=0, num=count, withscores=True
        )
    answers = execute(pipe)
    above = 0
    ties: list[Member] = []
    below: list[list[Member]] = []
    for i in range(len(board.keys)):
        count_above, tied, lower = answers[3 * i : 3 * i + 3]
        above += int(count_above)
        ties += [Member(text(m), position.composite) for m in tied]
        below.append(members_with_scores(lower))
    members = page_after(position, ties, below, count)
    # Everything at or before the position was served already.
    before = count_before(position, above, ties)
    before += sum(1 for t in ties if t.player_id == position.player_id)
    return members, before + 1


def player_value(client: RedisClient, board: Board, player_id: str) -> int | None:
    """The player's board value (composite), or None without one."""
    raw = call(client.zscore, board.key_of(player_id), player_id)
    return None if raw is None else composite_of(raw)


#: Queues one shard key's reads on a pipeline, at the player's value (a composite).
KeyReads = Callable[[Any, str, int], None]


def _at_settled_value(
    client: RedisClient, board: Board, player_id: str, per_key: int, queue: KeyReads
) -> tuple[int, list[list[Any]]] | None:
    """The player's value and, per shard key, the replies of the ``per_key`` reads ``queue`` adds.

    Two round trips: the value, then every key's reads with the value read again
    beside them; when it moved in between, the reads are made again at the new
    value (at most ``_SHARDED_ATTEMPTS`` times). None: the player has no value.
    """
    composite = player_value(client, board, player_id)
    for attempt in range(_SHARDED_ATTEMPTS):
        if composite is None:
            return None
        pipe = client.pipeline(transaction=False)
        pipe.zscore(board.key_of(player_id), player_id)
        for key in board.keys:
            queue(pipe, key, composite)
        answers = execute(pipe)
        now = None if answers[0] is None else composite_of(answers[0])
        if now != composite and attempt + 1 < _SHARDED_ATTEMPTS:
            composite = now  # moved between the two trips: ask again
            continue
        keys = range(len(board.keys))
        return composite, [answers[1 + per_key * i : 1 + per_key * (i + 1)] for i in keys]
    return None  # pragma: no cover - the loop always returns


def rank_sharded(
    client: RedisClient, board: Board, player_id: str
) -> tuple[int, int, int, int] | None:
    """``(rank, composite, lower, total)`` of a player on a sharded board; None without a score."""

    def queue(pipe: Any, key: str, composite: int) -> None:
        c = str(composite)
        pipe.zcount(key, f"({c}", "+inf")
        pipe.zrange(key, c, c, byscore=True)
        pipe.zcount(key, "-inf", f"({score_floor(composite, board.codec.slots)}")
        pipe.zcard(key)

    found = _at_settled_value(client, board, player_id, 4, queue)
    if found is None:
        return None
    composite, per_key = found
    above = lower = total = 0
    ties: list[Member] = []
    for count_above, tied, count_lower, card in per_key:
        above += int(count_above)
        ties += [Member(text(m), composite) for m in tied]
        lower += int(count_lower)
        total += int(card)
    total = max(total, 1)  # the shards are read one after another, not atomically
    position = Member(player_id, composite)
    return count_before(position, above, ties) + 1, composite, min(lower, total), total


def around_sharded(
    client: RedisClient, board: Board, player_id: str, k: int
) -> tuple[int, list[Member], Member, list[Member]] | None:
    """``(rank, above, player, below)`` on a sharded board; None without a score."""

    def queue(pipe: Any, key: str, composite: int) -> None:
        c = str(composite)
        pipe.zcount(key, f"({c}", "+inf")
        pipe.zrange(key, c, c, byscore=True)
        pipe.zrange(key, f"({c}", "+inf", byscore=True, offset=0, num=k, withscores=True)
        pipe.zrange(key, f"({c}", "-inf", desc=True, byscore=True, offset=0, num=k, withscores=True)

    found = _at_settled_value(client, board, player_id, 4, queue)
    if found is None:
        return None
    composite, per_key = found
    above_count = 0
    ties: list[Member] = []
    ups: list[list[Member]] = []
    downs: list[list[Member]] = []
    for count_above, tied, up, down in per_key:
        above_count += int(count_above)
        ties += [Member(text(m), composite) for m in tied]
        ups.append(members_with_scores(up) if k else [])
        downs.append(members_with_scores(down) if k else [])
    position = Member(player_id, composite)
    before, after = neighbours(position, ties, ups, downs, k)
    return count_before(position, above_count, ties) + 1, before, position, after


def check_player_id(player_id: str, what: str = "playerId") -> None:
    """Refuse an id the job could never have written (before any I/O)."""
    if not isinstance(player_id, str) or not 0 < len(player_id) <= MAX_ID_LENGTH:
        raise QueryError(f"{what} must be 1..{MAX_ID_LENGTH} characters")
