"""Swap a freshly built namespace over the live one, one board group at a time.

``lb rebuild`` replays Kafka into a staging namespace; this module then, for
every hash tag (game or game shard), runs one Lua call that deletes the live
keys the rebuild did not produce and renames every staged key over its live
name. Both names carry the same hash tag, so they share a cluster slot and
the swap of one group is atomic: a reader sees the old boards or the new
ones, never an empty or half-built board. Only keys the job writes are
replaced; friend sets, the merged top-K, sketches and archive markers stay.
"""

from __future__ import annotations

from collections import defaultdict

import redis

from adapters.redis import RedisClient, Script, text
from domain.errors import ServiceError
from domain.keys import BOARD_PREFIXES, ENTRY_METADATA, tag_of

SWAP_GROUP = Script(
    """
-- KEYS: staged keys (n = ARGV[1]), then their live names (n), then live keys to drop.
-- UNLINK first: RENAME over a live key would free the old value in this call,
-- blocking Redis for seconds on a 10M-member board; UNLINK frees it in the
-- background while the key disappears atomically with the rename.
local n = tonumber(ARGV[1])
for i = 1, n do
  redis.call('UNLINK', KEYS[n + i])
  redis.call('RENAME', KEYS[i], KEYS[n + i])
end
for i = 2 * n + 1, #KEYS do redis.call('UNLINK', KEYS[i]) end
return n
"""
)


#: What the streaming job writes (and a replay therefore rebuilds); friend sets,
#: the merged top-K, sketches and archive markers are someone else's and survive.
_PROJECTION_SUFFIXES = (
    *BOARD_PREFIXES,
    "meta:attempts:",
    ENTRY_METADATA,
    "meta:entries:",
    "meta:wm",
    "meta:seen:",
    "meta:boards",
    "meta:stats",
    "meta:progress",
    "meta:dense:",
)


def is_projection_key(key: str) -> bool:
    """Whether ``key`` is a board or bookkeeping key the streaming job writes."""
    suffix = key.split("}:", 1)[1] if "}:" in key else ""
    return suffix.startswith(_PROJECTION_SUFFIXES)


def _scan(client: RedisClient, pattern: str) -> list[str]:
    return [text(k) for k in client.scan_iter(match=pattern, count=1000)]


def swap_namespace(client: RedisClient, staging: str, live: str) -> dict[str, int]:
    """Rename every ``staging`` key over ``live``; returns renamed keys per tag."""
    staged: dict[str, list[str]] = defaultdict(list)
    for key in _scan(client, f"{staging}:*"):
        staged[tag_of(key)].append(key)
    script = SWAP_GROUP.registered(client)
    done: dict[str, int] = {}
    # A group the replay no longer produces at all loses its projection keys too.
    for key in _scan(client, f"{live}:*"):
        if is_projection_key(key):
            staged.setdefault(tag_of(key), [])
    for tag, keys in sorted(staged.items()):
        targets = [live + key[len(staging) :] for key in keys]
        glob_tag = "".join(f"[{c}]" if c in "*?[]\\" else c for c in tag)
        stale = {
            key for key in _scan(client, f"{live}:{{{glob_tag}}}:*") if is_projection_key(key)
        } - set(targets)
        try:
            done[tag] = int(script(keys=[*keys, *targets, *sorted(stale)], args=[len(keys)]))
        except redis.RedisError as exc:
            raise ServiceError(f"swapping the rebuilt boards of {tag!r} failed: {exc}") from exc
    return done


def drop_namespace(client: RedisClient, namespace: str) -> int:
    """Delete every key of ``namespace`` (a leftover staging area); returns the count."""
    count = 0
    pipe = client.pipeline(transaction=False)
    for key in _scan(client, f"{namespace}:*"):
        pipe.delete(key)
        count += 1
    pipe.execute()
    return count
