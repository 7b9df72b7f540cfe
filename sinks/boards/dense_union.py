"""A sharded dense-ranked game's distinct-score counts over all its shards.

A dense rank counts the distinct scores held in *any* shard, so a sharded game
with ``dense_ranks`` keeps, beside the per-shard counts, game-wide ones under
the game's own hash tag (``<ns>:{<game>}:meta:dense:n|s:<window>``): members per
score floor summed over the shards, and the floors some member holds. A sum of
member counts is what each shard's write can contribute on its own; the
distinct floors are those whose sum is positive.

The game's tag is another slot than the shard's, so the game-wide counts
follow the shard in a second write. Delivery guarantee: **exactly-once**,
following the shards by one round trip:

1. The shard's group write (``apply_group.lua``) appends what it changed, per
   board and floor, to the shard's outbox field of its source partition, as an
   entry named by the write's offset and the offset of the field's previous
   entry, in the same atomic call as the board. Every answer of that script
   for the partition, ``0`` (applied before) included, carries the queued
   entries.
2. Before the sink acknowledges the batch, :func:`union_call` sends them to
   ``dense_union.lua`` on the game's slot, which applies, per
   ``<shard>|<partition>``, only the entries after the offset it has applied
   (its watermark), in order, each only if it follows that watermark, and
   moves the watermark in the same call.
3. Then :data:`TRIM_OUTBOX` drops from the shard's outbox the entries up to
   the watermark the game-wide write answered (a third call; only when
   something was queued).

A crash after step 1 leaves the batch unacknowledged, so the restarted job
reads it again; its write answers 0 with the entries still queued, and step 2
applies them. A crash after step 2 leaves entries the watermark skips. The
trim only ever drops entries at or below a watermark the game's slot has
just confirmed, so an entry leaves the outbox only once it is counted. An
entry that does not follow the watermark (Redis lost writes on one side, so
the two histories differ) marks the game-wide counts broken (``!``), and
dense reads of the game are refused until ``lb rebuild`` recounts them from the
shards (``jobs.dense_counts``); meanwhile the changes are dropped unapplied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from adapters.redis import Script, text
from domain.keys import GroupKeys, tag_of
from sinks.boards.encoding import key_indexer

#: ``dense_apply``, the distinct-count update every counted board shares (player
#: boards, the game-wide counts, team boards): prepended to the scripts that use it.
DENSE_LIB = Path(__file__).with_name("dense_lib.lua").read_text()

#: The game-wide counts' write (``dense_union.lua``).
UNION_APPLY = Script(DENSE_LIB + Path(__file__).with_name("dense_union.lua").read_text())

#: Drops a shard partition's queued entries up to an offset the game-wide counts hold;
#: answers {entries left, microseconds Redis spent}.
TRIM_OUTBOX = Script(
    """
local t0 = redis.call('TIME')
local upto, keep, out = tonumber(ARGV[2]), false, {}
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. '@') or '-1')
if last <= upto then  -- all of them (the usual case): no need to read them
  redis.call('HDEL', KEYS[1], ARGV[1])
  local t1 = redis.call('TIME')
  return {0, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
end
local pending = redis.call('HGET', KEYS[1], ARGV[1]) or ''
for line in string.gmatch(pending, '[^\\n]+') do
  if string.sub(line, 1, 1) == '=' then keep = tonumber(string.match(line, '^=(%d+)')) > upto end
  if keep then out[#out + 1] = line .. '\\n' end
end
if #out == 0 then redis.call('HDEL', KEYS[1], ARGV[1]) else
  redis.call('HSET', KEYS[1], ARGV[1], table.concat(out)) end
local t1 = redis.call('TIME')
return {#out, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
"""
)

#: The field of the game's ``meta:dense:wm`` that says its counts are broken.
BROKEN = "!"

#: Per (shard outbox key, watermark field): the entries queued there.
Queued = dict[tuple[str, str], str]


def queued(replies: Sequence[Any]) -> Queued:
    """The queued entries the group writes' answers carry (the last answer per field wins)."""
    out: Queued = {}
    for reply in replies:
        if isinstance(reply, list | tuple) and len(reply) == 5 and int(reply[0]) >= 0:
            out[(text(reply[2]), text(reply[3]))] = text(reply[4])
    return out


def game_keys(outbox: str) -> tuple[GroupKeys, str]:
    """The game-wide keys of a shard's outbox key, and the shard's index."""
    game, _, shard = tag_of(outbox).rpartition("/")
    namespace = outbox.split("{", 1)[0].removesuffix(":")
    return GroupKeys(namespace, game), shard


def union_call(outbox: str, field: str, entries: str, per: int) -> tuple[list[str], list[Any]]:
    """The game-wide write of one shard partition's queued entries (``dense_union.lua``)."""
    union, shard = game_keys(outbox)
    keys = [union.dense_applied]
    key_index = key_indexer(keys)

    parsed: list[tuple[list[Any], list[Any]]] = []  # per entry: (offset, previous), boards
    for line in entries.splitlines():
        if line.startswith("="):
            offset, prev = line[1:].split(" ")
            parsed.append(([int(offset), int(prev)], []))
            continue
        window, expiry, *moves = line.split(" ")
        parsed[-1][1].append(
            [
                key_index(union.dense_counts(window)),
                key_index(union.dense_scores(window)),
                int(expiry),
                len(moves) // 2,
                *moves,
            ]
        )
    args: list[Any] = [f"{shard}|{field}", per, len(parsed)]
    for head, boards in parsed:
        args += [*head, len(boards)]
        for board in boards:
            args += board
    return keys, args


def last_offset(entries: str) -> int:
    """The offset of the last of some queued changes."""
    head = entries[entries.rindex("\n=") + 1 :] if "\n=" in entries else entries
    return int(head[1:].split(" ", 1)[0])


def apply_all(
    calls: Sequence[tuple[list[str], list[Any]]],
    run: Callable[[Script, Sequence[tuple[list[str], list[Any]]]], list[Any]],
) -> list[int | None]:
    """Run the game-wide writes; per call the watermark applied, None when refused (broken)."""
    out: list[int | None] = []
    for reply in run(UNION_APPLY, calls):
        if isinstance(reply, Exception):
            raise reply
        out.append(int(reply[1]) if int(reply[0]) >= 0 else None)
    return out
