"""Entries' metadata beside the board reads: what the event that set each score carried.

The job keeps, per board, a hash ``<ns>:{<tag>}:meta:entry:<window id>`` of
playerId -> the metadata of the event that set the player's current value
(:mod:`domain.keys`; written in the same atomic group write as the board, so
a value and its metadata always match). A line whose value was set without
metadata gets no ``metadata`` field.

The hot reads of an unsharded board, a top page by offset, an around window
and a rank, read their answer and its metadata in one script call
(:data:`TOP_SCRIPT`, :data:`readers.page_profiles.AROUND_SCRIPT`,
:data:`readers.boards.RANK_SCRIPT`: the ``HMGET`` only when the board has
metadata at all, the rank's ``HGET`` only when the game takes metadata).
Every other read adds the metadata to its answer's lines with one ``HMGET``
per board key holding them, all in one round trip after the board's own
reads. A game with ``metadata_max_bytes = 0`` takes no
metadata, and its reads never look for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import AsyncRedisClient, RedisClient, Script, text_of
from domain.errors import ServiceError
from domain.keys import entry_metadata_key
from domain.ranking import Entry, Member
from readers.board_reads import Board, call, execute, flat_members

#: KEYS[1] board, KEYS[2] its entry-metadata hash; ARGV[1] start, ARGV[2] stop (ZREVRANGE).
#: Returns {flat member, composite, ...} and, when the hash exists, the members' metadata.
TOP_SCRIPT = Script(
    """
local page = redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
if #page == 0 or redis.call('EXISTS', KEYS[2]) == 0 then return {page} end
local members = {}
for i = 1, #page, 2 do members[#members + 1] = page[i] end
return {page, redis.call('HMGET', KEYS[2], unpack(members))}
"""
)


def page_keys_args(board: Board, offset: int, count: int) -> tuple[list[str], list[int]]:
    """:data:`TOP_SCRIPT`'s keys and arguments for ``count`` members from ``offset``."""
    key = board.keys[0]
    return [key, entry_metadata_key(key)], [offset, offset + count - 1]


def parse_page(reply: Sequence[Any]) -> tuple[list[Member], list[str | None]]:
    """The members of a :data:`TOP_SCRIPT` reply and their metadata (None: none)."""
    members = flat_members(reply[0])
    if len(reply) < 2:
        return members, [None] * len(members)
    return members, [None if value is None else text_of(value) for value in reply[1]]


def page_at(
    client: RedisClient, board: Board, offset: int, count: int
) -> tuple[list[Member], list[str | None]]:
    """An unsharded board's ``count`` members from ``offset``, with their metadata: one call."""
    keys, args = page_keys_args(board, offset, count)
    return parse_page(call(TOP_SCRIPT, client, keys, args))


def wanted(board: Board, count: int) -> bool:
    """Whether ``count`` lines of ``board`` need their metadata looked up."""
    return count > 0 and board.config.metadata_max_bytes > 0


def _by_key(board: Board, players: Sequence[str]) -> dict[str, list[int]]:
    """Line positions per metadata hash (one per shard key the players live in)."""
    out: dict[str, list[int]] = {}
    for at, player in enumerate(players):
        out.setdefault(entry_metadata_key(board.key_of(player)), []).append(at)
    return out


def _spread(
    players: Sequence[str], groups: dict[str, list[int]], answers: Sequence[Sequence[object]]
) -> list[str | None]:
    out: list[str | None] = [None] * len(players)
    for positions, values in zip(groups.values(), answers, strict=True):
        for at, value in zip(positions, values, strict=True):
            if value is not None:
                out[at] = text_of(value)
    return out


def metadata_of(client: RedisClient, board: Board, players: Sequence[str]) -> list[str | None]:
    """Each player's entry metadata on ``board`` (None: none), in one round trip."""
    if not wanted(board, len(players)):
        return [None] * len(players)
    groups = _by_key(board, players)
    if len(groups) == 1:
        ((key, positions),) = groups.items()
        answers = [call(client.hmget, key, [players[at] for at in positions])]
    else:
        pipe = client.pipeline(transaction=False)
        for key, positions in groups.items():
            pipe.hmget(key, [players[at] for at in positions])
        answers = execute(pipe)
    return _spread(players, groups, answers)


async def metadata_of_async(
    client: AsyncRedisClient, board: Board, players: Sequence[str]
) -> list[str | None]:
    """:func:`metadata_of` on the asyncio client (unsharded boards: one ``HMGET``)."""
    if not wanted(board, len(players)):
        return [None] * len(players)
    groups = _by_key(board, players)
    answers = []
    for key, positions in groups.items():
        answers.append(await _async_call(client.hmget(key, [players[at] for at in positions])))
    return _spread(players, groups, answers)


async def _async_call(command: Awaitable[Any]) -> Any:
    try:
        return await command
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis read failed: {exc}") from exc


def put(lines: Sequence[Entry], metadata: Sequence[str | None]) -> None:
    """Give each line its metadata (a line with None gets no field)."""
    for line, meta in zip(lines, metadata, strict=True):
        if meta is not None:
            line["metadata"] = meta


def attach(client: RedisClient, board: Board, lines: Sequence[Entry]) -> None:
    """Add their metadata to ``lines`` of ``board`` (one round trip; none without lines)."""
    if wanted(board, len(lines)):
        put(lines, metadata_of(client, board, [line["playerId"] for line in lines]))


async def attach_async(client: AsyncRedisClient, board: Board, lines: Sequence[Entry]) -> None:
    """:func:`attach` on the asyncio client."""
    if wanted(board, len(lines)):
        put(lines, await metadata_of_async(client, board, [line["playerId"] for line in lines]))
