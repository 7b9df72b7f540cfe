"""A sharded dense-ranked game's game-wide distinct-score counts: checked and recounted.

The game-wide counts (``<ns>:{<game>}:meta:dense:n|s:<window>``) are the sum of
the shards' own counts once every change a shard queued has been applied
(:mod:`sinks.boards.dense_union`). Two tools read them against the shards:

* :func:`check` (``lb verify``): reads the game-wide counts and watermarks
  atomically, then every shard's counts and outbox atomically per shard, and
  compares the game-wide counts plus the changes still queued after each
  watermark with the shards' sum, while a live job writes.
* :func:`recount` (``lb rebuild`` and ``lb backfill`` after a shard group was
  cut over or filled, whose counts then changed without queued changes):
  replaces the game-wide counts by the shards' sum and sets each watermark to
  its shard's last change, in one call on the game's slot that first checks
  that no change was applied since the shards were read (otherwise it reads
  again). Changes still queued are in the shards' counts already, so the
  watermarks skip them; a change applied meanwhile would be lost, hence the
  check.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from adapters.redis import RedisClient, Script, text_of
from domain.keys import GroupKeys, shard_tag
from jobs.topk_merger import glob_escape
from jobs.verify_report import Difference
from sinks.boards.dense_union import BROKEN, TRIM_OUTBOX

#: One shard's registry size, outbox and counts (with their expiry), atomically.
READ_SHARD = Script(
    """
-- KEYS[1] registry, KEYS[2] outbox, KEYS[3..] counts hashes
local out = {redis.call('SCARD', KEYS[1]), redis.call('HGETALL', KEYS[2])}
for k = 3, #KEYS do
  out[#out + 1] = redis.call('HGETALL', KEYS[k])
  out[#out + 1] = redis.call('PEXPIRETIME', KEYS[k])
end
return out
"""
)

#: The game-wide watermarks and counts, atomically.
READ_GAME = Script(
    """
-- KEYS[1] meta:dense:wm, KEYS[2..] counts hashes then floor sets
local out = {redis.call('HGETALL', KEYS[1])}
local n = (#KEYS - 1) / 2
for k = 2, n + 1 do
  out[#out + 1] = redis.call('HGETALL', KEYS[k])
  out[#out + 1] = redis.call('ZRANGE', KEYS[k + n], 0, -1)
end
return out
"""
)

#: Replace the game-wide counts, unless a change was applied since ``ARGV[1]`` was read.
WRITE_GAME = Script(
    """
-- KEYS[1] meta:dense:wm, KEYS[2..] (counts, floors) per window. ARGV: the watermarks
-- as read (flat, sorted), members per command, n watermarks, (field, offset)*, then
-- per window: expiry (ms, 0: none), n, (floor, count)*, '#' total.
local held = redis.call('HGETALL', KEYS[1])
local pairs_ = {}
for j = 1, #held, 2 do pairs_[#pairs_ + 1] = held[j] .. '=' .. held[j + 1] end
table.sort(pairs_)
if table.concat(pairs_, ',') ~= ARGV[1] then return 0 end
local per = tonumber(ARGV[2])
redis.call('DEL', KEYS[1])
local i = 4
local nw = tonumber(ARGV[3])
if nw > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, i, i + 2 * nw - 1)) end
i = i + 2 * nw
for k = 2, #KEYS, 2 do
  local h, z = KEYS[k], KEYS[k + 1]
  redis.call('DEL', h, z)
  local exp = tonumber(ARGV[i]); local n = tonumber(ARGV[i + 1]); i = i + 2
  for at = i, i + 2 * n - 1, 2 * per do
    local stop = math.min(at + 2 * per - 1, i + 2 * n - 1)
    redis.call('HSET', h, unpack(ARGV, at, stop))
    local floors = {}
    for j = at, stop, 2 do floors[#floors + 1] = ARGV[j]; floors[#floors + 1] = ARGV[j] end
    redis.call('ZADD', z, unpack(floors))
  end
  i = i + 2 * n
  if n > 0 then redis.call('HSET', h, '#', ARGV[i]) end
  i = i + 1
  if exp > 0 and n > 0 then redis.call('PEXPIREAT', h, exp); redis.call('PEXPIREAT', z, exp) end
end
return 1
"""
)

#: How often a moving game is read again before the comparison gives up.
ATTEMPTS = 20
PER_COMMAND = 1000


@dataclass
class Snapshot:
    """What the shards hold: summed counts per window, their expiry, last changes, queue."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    expiry_ms: dict[str, int] = field(default_factory=dict)
    #: ``<shard>|<partition field>`` -> the offset of that shard partition's last change.
    last: dict[str, int] = field(default_factory=dict)
    #: ``<shard>|<partition field>`` -> its queued changes (``sinks.boards.dense_union``).
    queued: dict[str, str] = field(default_factory=dict)


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {text_of(flat[j]): text_of(flat[j + 1]) for j in range(0, len(flat), 2)}


def _windows(client: RedisClient, keys: GroupKeys) -> list[str]:
    return sorted(text_of(w) for w in client.smembers(keys.boards))


def read_shards(client: RedisClient, namespace: str, game: str, shards: int) -> Snapshot:
    """Every shard's counts and queued changes, each shard read atomically."""
    snap = Snapshot()
    for shard in range(shards):
        keys = GroupKeys(namespace, shard_tag(game, shard))
        for _ in range(ATTEMPTS):
            windows = _windows(client, keys)
            counts = [keys.dense_counts(w) for w in windows]
            answer = READ_SHARD(client, [keys.boards, keys.dense_outbox, *counts], [])
            if int(answer[0]) == len(windows):  # no window appeared meanwhile
                break
        for name, value in _pairs(answer[1]).items():
            if name.endswith("@"):
                snap.last[f"{shard}|{name[:-1]}"] = int(value)
            elif value:
                snap.queued[f"{shard}|{name}"] = value
        for at, window in enumerate(windows):
            held = _pairs(answer[2 + 2 * at])
            held.pop("#", None)
            if held:
                snap.counts.setdefault(window, Counter()).update(
                    {f: int(n) for f, n in held.items()}
                )
                expiry = int(answer[3 + 2 * at])
                snap.expiry_ms[window] = max(snap.expiry_ms.get(window, 0), expiry)
    return snap


def _game_windows(
    client: RedisClient, union: GroupKeys, namespace: str, game: str, shards: int
) -> list[str]:
    """Windows the game-wide counts or any shard have (read before either side)."""
    pattern = f"{glob_escape(union.prefix)}meta:dense:n:*"
    skip = len(union.prefix) + len("meta:dense:n:")
    held = {text_of(k)[skip:] for k in client.scan_iter(match=pattern, count=1000)}
    for shard in range(shards):
        held |= set(_windows(client, GroupKeys(namespace, shard_tag(game, shard))))
    return sorted(held)


def _flat_watermarks(held: dict[str, str]) -> str:
    return ",".join(sorted(f"{k}={v}" for k, v in held.items()))


def recount(client: RedisClient, namespace: str, game: str, shards: int) -> None:
    """Replace the game-wide counts by the shards' sum (see the module docstring)."""
    union = GroupKeys(namespace, game)
    for _ in range(ATTEMPTS):
        windows = _game_windows(client, union, namespace, game, shards)
        before = {text_of(k): text_of(v) for k, v in client.hgetall(union.dense_applied).items()}
        snap = read_shards(client, namespace, game, shards)
        windows = sorted(set(windows) | set(snap.counts))
        keys = [union.dense_applied]
        args: list[Any] = [_flat_watermarks(before), PER_COMMAND, len(snap.last)]
        for name, offset in snap.last.items():
            args += [name, offset]
        for window in windows:
            keys += [union.dense_counts(window), union.dense_scores(window)]
            counts = {f: n for f, n in snap.counts.get(window, Counter()).items() if n > 0}
            args += [max(snap.expiry_ms.get(window, 0), 0), len(counts)]
            for floor, n in counts.items():
                args += [floor, n]
            args.append(sum(counts.values()))
        if WRITE_GAME(client, keys, args) == 1:
            for name, offset in snap.last.items():  # what the recount holds leaves the outboxes
                shard, _, partition = name.partition("|")
                outbox = GroupKeys(namespace, shard_tag(game, int(shard))).dense_outbox
                TRIM_OUTBOX(client, [outbox], [partition, offset])
            return
        time.sleep(0.05)
    raise RuntimeError(f"the counts of game {game!r} kept moving; recount not done")


def check(client: RedisClient, namespace: str, game: str, shards: int) -> list[Difference]:
    """The game-wide counts against the shards' sum (see the module docstring).

    The game-wide counts and offsets are read first (atomically), then each
    shard with its outbox (atomically per shard). Per shard partition the
    changes after the game-wide offset must then all be in the outbox, in a
    chain from that offset to the partition's last change; the game-wide
    counts plus those changes are what the shards must hold. A chain with a
    gap (a change applied and dropped between the two reads) reads again.
    """
    union = GroupKeys(namespace, game)
    for _ in range(ATTEMPTS):
        windows = _game_windows(client, union, namespace, game, shards)
        keys = [union.dense_applied]
        keys += [union.dense_counts(w) for w in windows]
        keys += [union.dense_scores(w) for w in windows]
        answer = READ_GAME(client, keys, [])
        applied = _pairs(answer[0])
        broken = applied.pop(BROKEN, None)
        if broken is not None:
            return [Difference(game, "meta:dense:wm", BROKEN, "wrong value", broken, None)]
        snap = read_shards(client, namespace, game, shards)
        pending = _pending(snap, {name: int(offset) for name, offset in applied.items()})
        if pending is not None:
            return _differences(game, windows, snap, answer[1:], pending)
        time.sleep(0.05)
    return [Difference(game, "meta:dense:wm", "*", "wrong value", "moving", "settled")]


def parse_changes(entries: str) -> list[tuple[int, int, dict[str, dict[str, int]]]]:
    """Queued changes as ``(offset, previous offset, {window: {floor: change}})``."""
    out: list[tuple[int, int, dict[str, dict[str, int]]]] = []
    for line in entries.splitlines():
        if line.startswith("="):
            offset, prev = line[1:].split(" ")
            out.append((int(offset), int(prev), {}))
            continue
        window, _, *moves = line.split(" ")
        out[-1][2][window] = {moves[j]: int(moves[j + 1]) for j in range(0, len(moves), 2)}
    return out


def _pending(snap: Snapshot, applied: dict[str, int]) -> dict[str, Counter[str]] | None:
    """Per window, the changes the shards hold and the game-wide counts do not yet.

    None when some shard partition's chain from its game-wide offset to its last
    change is not all in its outbox.
    """
    out: dict[str, Counter[str]] = {}
    for name, last in snap.last.items():
        at = applied.get(name, -1)
        for offset, prev, boards in parse_changes(snap.queued.get(name, "")):
            if offset <= at:
                continue
            if prev != at:
                return None
            for window, moves in boards.items():
                out.setdefault(window, Counter()).update(moves)
            at = offset
        if at != last:
            return None
    return out


def _differences(
    game: str,
    windows: list[str],
    snap: Snapshot,
    answer: list[Any],
    pending: dict[str, Counter[str]],
) -> list[Difference]:
    """The game-wide counts, with the changes still queued, against the shards' sum.

    And the game-wide floor set against the floors its own counts hold.
    """
    out: list[Difference] = []
    for at, window in enumerate(windows):
        held = {k: int(v) for k, v in _pairs(answer[2 * at]).items()}
        floors = {text_of(f) for f in answer[2 * at + 1]}
        wanted_floors = {f for f, n in held.items() if f != "#" and n > 0}
        moved = pending.get(window, Counter())
        after = Counter(held)
        after.update(moved)
        after["#"] += sum(moved.values())
        got_counts = {f: n for f, n in after.items() if n != 0}
        want = {f: n for f, n in snap.counts.get(window, Counter()).items() if n > 0}
        if want:
            want["#"] = sum(want.values())
        name = f"meta:dense:n:{window}"
        for key in sorted(set(got_counts) | set(want)):
            got, wanted = got_counts.get(key), want.get(key)
            if got != wanted:
                kind = "missing" if got is None else "extra" if wanted is None else "wrong value"
                out.append(Difference(game, name, key, kind, got, wanted))
        for floor in sorted(floors ^ wanted_floors):
            kind = "missing" if floor in wanted_floors else "extra"
            out.append(Difference(game, f"meta:dense:s:{window}", floor, kind, None, None))
    return out
