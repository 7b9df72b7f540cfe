"""Cut a staged board group over the live one while the live job keeps writing.

Delivery guarantee: one group at a time, **atomically** (one Lua call on the
group's slot: staged and live names share the hash tag), so a reader sees the
old group or the new one, never a mix, and the live job sees the change as a
whole the next time it writes the group.

*Replace* (:data:`REPLACE_GROUP`): the staged group holds every record of the
replayed topic up to ``through[p]`` for each partition ``p``. The call checks
that the live group has applied nothing the replay has not (its watermark
below ``through``; strictly below unless ``strict`` is off, see below), then
renames every staged key over its live name, drops live projection keys the
replay did not produce, and writes ``through`` as the group's watermarks.
The live job's next write to the group finds a watermark it did not expect
and heals (``sinks.redis_boards``): a batch at or below ``through`` is a no-op,
a later one is re-planned from what Redis now holds and applies only records
after ``through``. So nothing is lost or applied twice across the cut-over.

*Strict* means the live watermark must be strictly below ``through``: then
the stored watermark differs from every belief the live job can hold, so it
notices the cut-over before it writes the group with a cached value (which
matters when the replay used other rules than the live job had cached:
a scoring fix, a new window). When a partition stays idle the live job may
sit exactly at ``through``; after a while the caller cuts over non-strictly.

*Fill* (:data:`FILL_GROUP`): staged boards are moved in only where the live
group has no such board; the registry learns the window; nothing else moves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from domain.errors import ServiceError
from domain.keys import GroupKeys, tag_of
from sinks.namespace_swap import is_projection_key

#: The live group has applied records the replay has not read yet: read more, retry.
BEHIND = -1
#: The live group holds watermarks of another topic: replacing it would drop their effects.
FOREIGN = -3

REPLACE_GROUP = """
-- KEYS[1] live meta:wm, KEYS[2..n+1] staged keys, KEYS[n+2..2n+1] their live names,
-- then live projection keys to drop.
-- ARGV: n, strict (1/0), topic prefix ('<topic>/'), m, then m (field, through offset).
local n = tonumber(ARGV[1]); local strict = ARGV[2] == '1'; local prefix = ARGV[3]
local through = {}
for j = 0, tonumber(ARGV[4]) - 1 do through[ARGV[5 + 2 * j]] = tonumber(ARGV[6 + 2 * j]) end
local live = redis.call('HGETALL', KEYS[1])
local fields = {}
for j = 1, #live, 2 do
  local f = live[j]; local v = tonumber(live[j + 1])
  if string.sub(f, 1, #prefix) ~= prefix then return -3 end
  local t = through[f]
  if t == nil or v > t or (strict and v == t) then return -1 end
  fields[f] = true
end
for i = 1, n do
  redis.call('UNLINK', KEYS[n + 1 + i])
  redis.call('RENAME', KEYS[1 + i], KEYS[n + 1 + i])
end
for i = 2 * n + 2, #KEYS do redis.call('UNLINK', KEYS[i]) end
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do fields[f] = true end
for f, _ in pairs(fields) do
  if through[f] ~= nil then redis.call('HSET', KEYS[1], f, through[f]) end
end
return n
"""

FILL_GROUP = """
-- KEYS[1] live registry (meta:boards), KEYS[2..n+1] staged boards, KEYS[n+2..2n+1] live names.
-- ARGV: n, then n window ids. Returns 1 (moved) or 0 (the live board exists) per board.
local n = tonumber(ARGV[1]); local out = {}
for i = 1, n do
  if redis.call('EXISTS', KEYS[n + 1 + i]) == 0 then
    redis.call('RENAME', KEYS[1 + i], KEYS[n + 1 + i])
    redis.call('SADD', KEYS[1], ARGV[1 + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

#: Board key suffixes (what fill mode may move).
_BOARDS = ("alltime", "daily:", "weekly:")


@dataclass
class FillResult:
    """Per group: windows moved in, windows left alone because the live group has them."""

    moved: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob(tag: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]\\" else c for c in tag)


def _scan(client: Any, pattern: str) -> list[str]:
    return [_text(k) for k in client.scan_iter(match=pattern, count=1000)]


def group_keys(client: Any, namespace: str, tag: str) -> list[str]:
    """Every projection key of one group (boards and bookkeeping the job writes)."""
    return sorted(
        key for key in _scan(client, f"{namespace}:{{{_glob(tag)}}}:*") if is_projection_key(key)
    )


def tags(client: Any, namespace: str) -> set[str]:
    """Board groups with projection keys in ``namespace`` (progress hashes excluded)."""
    out: set[str] = set()
    for key in _scan(client, f"{namespace}:*"):
        if "{" in key and is_projection_key(key):
            tag = tag_of(key)
            if not tag.startswith("@"):
                out.add(tag)
    return out


def replace_group(
    client: Any,
    staging: str,
    live: str,
    tag: str,
    topic: str,
    through: Mapping[int, int],
    *,
    strict: bool,
) -> int:
    """Swap one staged group over the live one (see the module docstring).

    Returns the number of keys moved, :data:`BEHIND` or :data:`FOREIGN`.
    """
    staged = group_keys(client, staging, tag)
    targets = [live + key[len(staging) :] for key in staged]
    stale = sorted(set(group_keys(client, live, tag)) - set(targets))
    args: list[Any] = [len(staged), 1 if strict else 0, f"{topic}/", len(through)]
    for partition, offset in sorted(through.items()):
        args += [f"{topic}/{partition}", offset]
    keys = [GroupKeys(live, tag).watermarks, *staged, *targets, *stale]
    try:
        return int(client.eval(REPLACE_GROUP, len(keys), *keys, *args))
    except redis.RedisError as exc:
        raise ServiceError(f"cutting over the board group {tag!r} failed: {exc}") from exc


def fill_group(
    client: Any, staging: str, live: str, tag: str, windows: Collection[str] = ()
) -> FillResult:
    """Move the staged boards the live group lacks (only ``windows`` when given)."""
    staged = [
        key
        for key in group_keys(client, staging, tag)
        if key.split("}:", 1)[1].startswith(_BOARDS)
        and (not windows or key.split("}:", 1)[1] in windows)
    ]
    result = FillResult()
    if not staged:
        return result
    names = [key.split("}:", 1)[1] for key in staged]
    targets = [live + key[len(staging) :] for key in staged]
    keys = [GroupKeys(live, tag).boards, *staged, *targets]
    try:
        answer = client.eval(FILL_GROUP, len(keys), *keys, len(staged), *names)
    except redis.RedisError as exc:
        raise ServiceError(f"moving the rebuilt boards of {tag!r} failed: {exc}") from exc
    for window, moved in zip(names, answer, strict=True):
        (result.moved if int(moved) else result.kept).append(window)
    return result
