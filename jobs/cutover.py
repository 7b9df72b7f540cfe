"""Cut a staged board group over the live one while the live job keeps writing.

Delivery guarantee: one group at a time, **atomically** (one Lua call on the
group's slot: staged and live names share the hash tag), so a reader sees the
old group or the new one, never a mix, and the live job sees the change as a
whole the next time it writes the group.

*Replace* (:data:`REPLACE_GROUP`): the staged group holds every record of the
replayed topic up to ``through[p]`` for each partition ``p``, and none of the
group's records after its staged watermark ``low[p]`` (the last replayed batch
with one of them ended there). So any ``w[p]`` in ``[low[p], through[p]]`` is a
true watermark of the staged group. The call renames every staged key over its
live name, drops live projection keys the replay did not produce, and writes,
per partition, a ``w[p]`` chosen *different from the live watermark* ``v[p]``:

* ``v < through``: ``w = through``. The live job's next write of the group is a
  no-op (a batch up to ``through``; the sink then drops its cache) or refused
  (a later one; it heals: re-plans from what Redis holds and applies only
  records after ``w``).
* ``v == through`` and ``low < through``: ``w = through - 1``. The live job
  takes it for a loss and re-reads from ``through``, a record with nothing for
  this group: nothing changes, but it has dropped its cache.
* otherwise (the live job is as far or further) the call answers
  :data:`BEHIND` and the replay reads on. After a while (``relaxed``):
  ``v > through`` gives ``w = through``, which the live job takes for a loss and
  heals (re-applying exactly the group's records after ``through``; readers see
  the group as of ``through`` until then), and ``v == through == low`` gives
  ``w = through``, the one case the live job cannot notice (reported).

Why "different": a live job whose belief equals the stored watermark writes on
with its cache, which matters when the replay used other rules than the cache
was built with (a scoring fix, a new window).

The live keys to drop are listed by a ``SCAN`` before the call (a scan inside
it would block Redis for the whole keyspace). A live write of the group in
between can create keys that list lacks (a new window's board, a dedupe bag of
a new bucket or part): left behind, they would keep the effects of records
after ``w``, and the live job's dedupe would then take those records for
copies of themselves when it re-applies them. So the live watermarks are read
before the listing and the call checks them unchanged (every write of the group
moves one); if a write came in between, nothing moves and the group is listed
and tried again (:data:`LISTED_BEFORE_A_WRITE` times, then :data:`BEHIND`).

*Fill* (:data:`FILL_GROUP`): staged boards are moved in only where the live
group has no such board, each with its entry metadata and its distinct-score
counts (dense ranks); the registry learns the window; nothing else moves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from adapters.redis import RedisClient, Script, text_of
from domain.errors import ServiceError
from domain.keys import GroupKeys, entry_metadata_key, is_board_suffix, tag_of
from domain.windows import WindowKind
from jobs.namespace_swap import is_projection_key

#: The live group has applied records the replay has not read yet: read more, retry.
BEHIND = -1
#: The live group holds watermarks of another topic: replacing it would drop their effects.
FOREIGN = -3
#: The live job wrote the group while its keys were being listed: list them again.
WRITTEN_MEANWHILE = -4
#: Listings tried in one :func:`replace_group` call before it answers :data:`BEHIND`.
LISTED_BEFORE_A_WRITE = 3

REPLACE_GROUP = Script(
    """
-- KEYS[1] live meta:wm, KEYS[2] staged meta:wm, KEYS[3..n+2] staged keys,
-- KEYS[n+3..2n+2] their live names, then live projection keys to drop.
-- ARGV: n, relaxed (1/0), topic prefix ('<topic>/'), m, then m (field, through offset),
-- then s, then s (field, value): the live watermarks read before the keys were listed.
-- Returns {moved keys, 1 if a watermark was left equal to the live one} or -1 / -3 / -4.
local n = tonumber(ARGV[1]); local relaxed = ARGV[2] == '1'; local prefix = ARGV[3]
local m = tonumber(ARGV[4])
local through = {}
for j = 0, m - 1 do through[ARGV[5 + 2 * j]] = tonumber(ARGV[6 + 2 * j]) end
local live = redis.call('HGETALL', KEYS[1])
-- A write of the group since the listing may have made keys it lacks: list again.
local s = tonumber(ARGV[5 + 2 * m])
if #live ~= 2 * s then return -4 end
local listed = {}
for j = 0, s - 1 do listed[ARGV[6 + 2 * m + 2 * j]] = ARGV[7 + 2 * m + 2 * j] end
for j = 1, #live, 2 do
  if listed[live[j]] ~= live[j + 1] then return -4 end
end
local low = {}
local staged = redis.call('HGETALL', KEYS[2])
for j = 1, #staged, 2 do low[staged[j]] = tonumber(staged[j + 1]) end
local set = {}; local equal = 0
for j = 1, #live, 2 do
  local f = live[j]; local v = tonumber(live[j + 1])
  if string.sub(f, 1, #prefix) ~= prefix then return -3 end
  local t = through[f]
  if t == nil then return -1 end
  local l = low[f] or -1
  if v < t then set[f] = t
  elseif v == t and l < t then set[f] = t - 1
  elseif not relaxed then return -1
  else
    set[f] = t
    if v == t then equal = 1 end
  end
end
for f, _ in pairs(low) do
  if set[f] == nil and through[f] ~= nil then set[f] = through[f] end
end
for i = 1, n do
  redis.call('UNLINK', KEYS[n + 2 + i])
  redis.call('RENAME', KEYS[2 + i], KEYS[n + 2 + i])
end
for i = 2 * n + 3, #KEYS do redis.call('UNLINK', KEYS[i]) end
for f, w in pairs(set) do redis.call('HSET', KEYS[1], f, w) end
return {n, equal}
"""
)

FILL_GROUP = Script(
    """
-- KEYS[1] live registry (meta:boards), KEYS[2..n+1] staged boards, KEYS[n+2..2n+1] live names,
-- then per board the keys that move with it: staged entry metadata, distinct counts and
-- distinct floors (dense ranks), then the same three live names. ARGV: n, then n window
-- ids. Returns 1 (moved) or 0 (the live board exists) per board.
local n = tonumber(ARGV[1]); local out = {}
for i = 1, n do
  if redis.call('EXISTS', KEYS[n + 1 + i]) == 0 then
    redis.call('RENAME', KEYS[1 + i], KEYS[n + 1 + i])
    redis.call('SADD', KEYS[1], ARGV[1 + i])
    local d = 2 * n + 1 + 6 * (i - 1)
    for j = 1, 3 do
      redis.call('UNLINK', KEYS[d + 3 + j])
      if redis.call('EXISTS', KEYS[d + j]) == 1 then
        redis.call('RENAME', KEYS[d + j], KEYS[d + 3 + j])
      end
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""
)


def _fillable(suffix: str) -> bool:
    """A board fill mode may move in: any window but a tournament.

    A tournament's board depends on seats and attempts counted from its first
    record on (kept in the group's ``meta:entries:``/``meta:attempts:``, which
    fill mode never moves), so a bounded range cannot rebuild it; its archive
    (docs/ARCHIVE.md) keeps the final board.
    """
    return is_board_suffix(suffix) and not suffix.startswith(f"{WindowKind.TOURNAMENT.value}:")


@dataclass
class FillResult:
    """Per group: windows moved in, windows left alone because the live group has them."""

    moved: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _glob(tag: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]\\" else c for c in tag)


def _scan(client: RedisClient, pattern: str) -> list[str]:
    return [text_of(k) for k in client.scan_iter(match=pattern, count=1000)]


def group_keys(client: RedisClient, namespace: str, tag: str) -> list[str]:
    """Every projection key of one group (boards and bookkeeping the job writes)."""
    return sorted(
        key for key in _scan(client, f"{namespace}:{{{_glob(tag)}}}:*") if is_projection_key(key)
    )


def tags(client: RedisClient, namespace: str) -> set[str]:
    """Board groups with projection keys in ``namespace`` (progress hashes excluded)."""
    out: set[str] = set()
    for key in _scan(client, f"{namespace}:*"):
        if "{" in key and is_projection_key(key):
            tag = tag_of(key)
            if not tag.startswith("@"):
                out.add(tag)
    return out


@dataclass(frozen=True)
class Replaced:
    """A group cut over: keys moved, and whether a watermark stayed equal to the live one."""

    keys: int
    unnoticed: bool


def replace_group(
    client: RedisClient,
    staging: str,
    live: str,
    tag: str,
    topic: str,
    through: Mapping[int, int],
    *,
    relaxed: bool,
) -> Replaced | int:
    """Swap one staged group over the live one (see the module docstring).

    Returns what was done, or :data:`BEHIND` / :data:`FOREIGN`.
    """
    for _ in range(LISTED_BEFORE_A_WRITE):
        answer = _replace_listed(client, staging, live, tag, topic, through, relaxed=relaxed)
        if answer != WRITTEN_MEANWHILE:
            return answer
    return BEHIND


def _replace_listed(
    client: RedisClient,
    staging: str,
    live: str,
    tag: str,
    topic: str,
    through: Mapping[int, int],
    *,
    relaxed: bool,
) -> Replaced | int:
    """One try: the live watermarks, then both groups' keys, then the call."""
    live_wm = GroupKeys(live, tag).watermarks
    try:
        listed = {text_of(k): text_of(v) for k, v in client.hgetall(live_wm).items()}
    except redis.RedisError as exc:
        raise ServiceError(f"reading the board group {tag!r}'s watermarks failed: {exc}") from exc
    staged = group_keys(client, staging, tag)
    targets = [live + key[len(staging) :] for key in staged]
    stale = sorted(set(group_keys(client, live, tag)) - set(targets))
    args: list[Any] = [len(staged), 1 if relaxed else 0, f"{topic}/", len(through)]
    for partition, offset in sorted(through.items()):
        args += [f"{topic}/{partition}", offset]
    args.append(len(listed))
    for name, value in sorted(listed.items()):
        args += [name, value]
    keys = [
        live_wm,
        GroupKeys(staging, tag).watermarks,
        *staged,
        *targets,
        *stale,
    ]
    try:
        answer = REPLACE_GROUP(client, keys, args)
    except redis.RedisError as exc:
        raise ServiceError(f"cutting over the board group {tag!r} failed: {exc}") from exc
    if isinstance(answer, list):
        return Replaced(keys=int(answer[0]), unnoticed=bool(int(answer[1])))
    return int(answer)


def fill_group(
    client: RedisClient, staging: str, live: str, tag: str, windows: Collection[str] = ()
) -> FillResult:
    """Move the staged boards the live group lacks (only ``windows`` when given)."""
    staged = [
        key
        for key in group_keys(client, staging, tag)
        if _fillable(key.split("}:", 1)[1]) and (not windows or key.split("}:", 1)[1] in windows)
    ]
    result = FillResult()
    if not staged:
        return result
    names = [key.split("}:", 1)[1] for key in staged]
    targets = [live + key[len(staging) :] for key in staged]
    keys = [GroupKeys(live, tag).boards, *staged, *targets]
    staged_group, live_group = GroupKeys(staging, tag), GroupKeys(live, tag)
    for window, board, target in zip(names, staged, targets, strict=True):
        # entry metadata and distinct-score counts move with their board
        keys += [
            entry_metadata_key(board),
            staged_group.dense_counts(window),
            staged_group.dense_scores(window),
        ]
        keys += [
            entry_metadata_key(target),
            live_group.dense_counts(window),
            live_group.dense_scores(window),
        ]
    try:
        answer = FILL_GROUP(client, keys, [len(staged), *names])
    except redis.RedisError as exc:
        raise ServiceError(f"moving the rebuilt boards of {tag!r} failed: {exc}") from exc
    for window, moved in zip(names, answer, strict=True):
        (result.moved if int(moved) else result.kept).append(window)
    return result
