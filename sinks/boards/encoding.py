"""A group write as the script's keys and arguments; the script's answers back.

The argument layout is ``apply_group.lua``'s: this module and that script change
together, and nothing else knows either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any, cast

from domain.compiled import compiled
from domain.keys import CHANGES_MAXLEN, entry_metadata_key
from domain.lease import fence_key
from domain.planner import Change, GroupWrite
from telemetry import hooks

#: Members per ZADD/ZREM/HSET/SADD call inside the script (Lua's ``unpack`` takes
#: about 8000 values at most; a member is one or two).
PER_COMMAND = 1000


def key_indexer(keys: list[str], index: dict[str, int] | None = None) -> Callable[[str], int]:
    """Appends each new key to a script call's ``keys`` once; answers its ``KEYS[i]`` index.

    ``index`` goes on from keys already indexed (the compiled head's).
    """
    known: dict[str, int] = {} if index is None else index

    def key_index(key: str) -> int:
        at = known.get(key)
        if at is None:
            keys.append(key)
            at = known[key] = len(keys)
        return at

    return key_index


def refused_at(answer: int) -> int | None:
    """The watermark Redis held when it refused a group's write, else None.

    ``APPLY_GROUP``'s outcome is 1 (applied), 0 (applied before) or
    ``-2 - stored`` (refused; ``stored`` is -1 when the field is missing).
    """
    return None if answer >= 0 else -2 - answer


def outcomes(replies: list[Any]) -> list[int]:
    """Each group write's outcome; the time Redis spent on the applied ones goes to telemetry.

    Raises the first error reply (after every reply was read). A sharded dense
    game's answers also carry its queued count changes
    (:func:`sinks.boards.dense_union.queued` reads them).
    """
    outcomes: list[int] = []
    micros: list[int] = []
    for reply in raise_first_error(replies):
        outcome, spent = reply[0], reply[1]
        outcomes.append(int(outcome))
        if outcome == 1:
            micros.append(int(spent))
    hooks.group_writes(micros)
    return outcomes


#: A (member, score) pair's score: the sort key of ``encode(sort_members=True)``.
_SCORE = itemgetter(1)


#: ``lb_native.encode_head`` when it is built: :func:`_head`, compiled
#: (tests/unit/test_native_encode.py). Tests set it to None for the Python.
HEAD_KERNEL: Callable[..., tuple[list[str], list[Any], dict[str, int]]] | None = cast(
    "Callable[..., tuple[list[str], list[Any], dict[str, int]]] | None", compiled("encode_head")
)


def encode(
    write: GroupWrite, sort_members: bool = False, epoch: int = 0
) -> tuple[list[str], list[Any]]:
    """The script's keys and arguments for one group write (layout: ``apply_group.lua``).

    ``sort_members`` sends each board's members in ascending score: Redis then
    inserts neighbours one after another into its skip list, which costs it
    less than scattered inserts when the board is large (``bench.redis_floor``,
    10M members per board: a sixth to a third less Redis CPU in ``ZADD``,
    docs/BENCHMARKS.md). The set written is the same either way: one value per
    member, order-free. ``epoch`` is the writer's lease epoch (``domain.lease``),
    sent last with the group's fence key.
    """
    if HEAD_KERNEL is not None:
        order = _by_score if sort_members else None
        keys, args, index = HEAD_KERNEL(write, order, PER_COMMAND, CHANGES_MAXLEN, changes_json)
        key_index = key_indexer(keys, index)
    else:
        keys, args, key_index = _head(write, sort_members)
    args += entry_metadata_args(write, key_index)
    args.append(len(write.hdel))
    for key, names in write.hdel.items():
        args += [key_index(key), len(names), *names]
    args += team_args(write, key_index)
    distinct_args(write, key_index, args)
    return fenced(keys, args, write, epoch)


def _by_score(members: dict[str, int]) -> list[tuple[str, int]]:
    """A board's ``(member, score)`` pairs in ascending score."""
    return sorted(members.items(), key=_SCORE)


def _head(
    write: GroupWrite, sort_members: bool
) -> tuple[list[str], list[Any], Callable[[str], int]]:
    """The sections that grow with the write's events: watermark through change stream.

    The reference of the compiled ``encode_head``; the keys, the arguments and
    the key index the rest of :func:`encode` goes on with.
    """
    keys: list[str] = [write.keys.watermarks, write.keys.stats, write.keys.boards]
    key_index = key_indexer(keys)
    field_name, offset = write.watermark
    args: list[Any] = [field_name, offset, write.expected, PER_COMMAND, len(write.zadd)]
    for key, members in write.zadd.items():
        args += [key_index(key), len(members)]
        pairs = _by_score(members) if sort_members else members.items()
        for member, score in pairs:
            args += [score, member]
    args.append(len(write.zrem))
    for key, players in write.zrem.items():
        args += [key_index(key), len(players), *players]
    args.append(len(write.expire_at_s))
    for key, at in write.expire_at_s.items():
        args += [key_index(key), at]
    args += [len(write.new_windows), *write.new_windows]
    args += [len(write.seen), 1 if write.seen_append else 0]
    for key, ids in write.seen.items():
        args += [key_index(key), write.seen_ttl_s, len(ids)]
        for event_id, ts in ids.items():
            args += [event_id, ts]
    args.append(len(write.counts))
    for key, values in write.counts.items():
        args += [key_index(key), len(values)]
        for name, count in values.items():
            args += [name, count]
    args.append(len(write.stats))
    for name, by in write.stats.items():
        args += [name, by]
    if write.changes:
        args += [1, key_index(write.keys.changes), CHANGES_MAXLEN]
        args.append(changes_json(write.changes))
    else:
        args.append(0)
    return keys, args, key_index


def entry_metadata_args(write: GroupWrite, key_index: Callable[[str], int]) -> list[Any]:
    """The script's entry-metadata section: every board the write adds to or removes from.

    Each such board is listed even without metadata of its own, so the script
    can drop the old metadata of the members it rewrites (when the board has
    any); ``write.metadata`` adds what to set and the rare explicit clears.
    """
    boards = dict.fromkeys(write.zadd)
    boards.update(dict.fromkeys(write.zrem))
    boards.update(dict.fromkeys(write.metadata))
    args: list[Any] = [len(boards)]
    for board in boards:
        entry = write.metadata.get(board)
        if entry is None:
            args += [key_index(board), key_index(entry_metadata_key(board)), 0, 0, 0]
            continue
        args += [key_index(board), key_index(entry.key), entry.expire_at_s, len(entry.set)]
        for player, meta in entry.set.items():
            args += [player, meta]
        args += [len(entry.clear), *entry.clear]
    return args


def distinct_args(write: GroupWrite, key_index: Callable[[str], int], args: list[Any]) -> None:
    """The distinct-count section (dense ranks), then where it starts (0: none).

    The script reads it first, through that last number (``ARGV[#ARGV - 1]``,
    the epoch comes after it): an unknown old value must be read before the
    member is removed. The section: the shard's outbox key index (0: an
    unsharded game; ``sinks.boards.dense_union``), n, then per board: window
    id, board, counts and scores key indexes, slots, expiry (0: none), n,
    ``(floor, members reaching it, members leaving it)*``, then the unknown
    members as n, member*.
    """
    moves = write.distinct
    outbox = write.dense_outbox
    if not moves and outbox is None:
        args.append(0)
        return
    start = len(args) + 1
    args += [0 if outbox is None else key_index(outbox), len(moves)]
    for move in moves:
        args += [
            move.window_id,
            key_index(move.board),
            key_index(move.counts),
            key_index(move.scores),
            move.slots,
            move.expire_at_s,
        ]
        args.append(len(move.floors))
        for floor, (came, gone) in move.floors.items():
            args += [floor, came, gone]
        args += [len(move.unknown), *move.unknown]
    args.append(start)


def team_args(write: GroupWrite, key_index: Callable[[str], int]) -> list[Any]:
    """The script's team section: 0, or the members whose value changed (``team_lib.lua``)."""
    sync = write.teams
    if sync is None:
        return [0]
    keys = sync.keys
    args: list[Any] = [1, key_index(keys.membership), key_index(keys.slots)]
    args += [sync.aggregate.value, keys.prefix, int(sync.dense), len(sync.slots)]
    for window_id, slots in sync.slots.items():
        args += [window_id, slots]
    args.append(len(sync.changes))
    for change in sync.changes:
        args += [change.window_id, change.player_id, _text(change.new)]
    return args


def fenced(
    keys: list[str], args: list[Any], write: GroupWrite, epoch: int
) -> tuple[list[str], list[Any]]:
    """``keys`` and ``args`` with the group's fence key and the writer's epoch appended."""
    topic = write.watermark[0].rpartition("/")[0]
    keys.append(fence_key(write.keys.watermarks, topic))
    args.append(epoch)
    return keys, args


#: The group-write script's refusal of a deposed deployment's epoch (``apply_group.lua``).
FENCED = re.compile(r"\bFENCED \d+")


_PLAIN = re.compile(r"[A-Za-z0-9._:@-]*")

#: ``lb_native.changes_json`` when it is built: :func:`changes_json`'s text, compiled
#: (tests/unit/test_native_changes.py); None back for what it leaves to Python.
_COMPILED_CHANGES: Callable[[list[Change]], str | None] | None = cast(
    "Callable[[list[Change]], str | None] | None", compiled("changes_json")
)


def changes_json(changes: list[Change]) -> str:
    """A write's changes as the stream entry's JSON array of :func:`change_json` objects.

    Compiled when ``lb_native`` is built: a batch of new players makes one
    change per board per player, and building their text in Python cost the
    job about as much as packing the rest of the write.
    """
    if _COMPILED_CHANGES is not None:
        text = _COMPILED_CHANGES(changes)
        if text is not None:
            return text
    return "[" + ",".join(map(change_json, changes)) + "]"


def _json_text(text: str) -> str:
    """``text`` as a JSON string; ids are nearly always plain, so skip the encoder then."""
    return f'"{text}"' if _PLAIN.fullmatch(text) else json.dumps(text)


def change_json(change: Change) -> str:
    """A change as the stream's JSON object: ``{"w":..,"p":..,"o":..,"n":..}``.

    ``"m"`` is added when the event that set the new value carried metadata.

    Built here, not in the script: Redis runs one thread for everyone, and a
    Lua table per change, its cjson encoding and a rank lookup per change cost
    it more than the change's own ``ZADD`` (measured with ``INFO
    commandstats`` on the new-players workload). Readers that need ranks ask
    the board (the push server does, once per page).
    """
    window = _WINDOW_JSON.get(change.window_id)
    if window is None:
        if len(_WINDOW_JSON) > 10_000:
            _WINDOW_JSON.clear()
        window = _WINDOW_JSON[change.window_id] = '{"w":' + _json_text(change.window_id)
    if change.meta is not None:
        return (
            f'{window},"p":{_json_text(change.player_id)},'
            f'"o":"{_text(change.old)}","n":"{_text(change.new)}","m":{json.dumps(change.meta)}}}'
        )
    return (
        f'{window},"p":{_json_text(change.player_id)},'
        f'"o":"{_text(change.old)}","n":"{_text(change.new)}"}}'
    )


#: ``{"w":<window id>`` per window id: a handful of windows carry every change.
_WINDOW_JSON: dict[str, str] = {}


def raise_first_error(replies: list[Any]) -> list[Any]:
    """The replies, or the first error reply raised (after every reply was read)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _text(score: int | None) -> str:
    """A score for the change stream: decimal text (exact past 2**53), '' for absent."""
    return "" if score is None else str(score)
