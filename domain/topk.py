"""The global top-K of a sharded board: its key, its depth, and which windows it covers.

A game split over ``S`` shards keeps one sorted set per shard tag
``<game>/<i>`` (``domain.keys``). Reading a top page then means merging ``S``
listings on every call. ``jobs.topk_merger`` instead rebuilds, every second
or so, one *global* key per (game, window) holding the board's first
``K + 1`` members, and ``readers.boards`` serves offset pages from it.

**Exactness.** Every member of the global top-K lives in exactly one shard
(``shard = crc32(playerId) % S``), and within that shard it is preceded only
by members that also precede it globally, so it is inside its own shard's
top-K. Hence merging each shard's top-K (:func:`domain.ranking.merge_top`)
and cutting at K is the global top-K, ties at equal composite included
(board order is total: composite, then playerId bytes).

**Depth.** The key holds ``K + 1`` members: ranks 1..K, plus one more so that
a page ending exactly at rank K can tell whether a next page exists (readers
fetch ``limit + 1`` members). So a page with ``offset + limit <= K`` is served
from the key; with the default ``K = MAX_SHARDED_DEPTH = 1000`` that is every
offset page a sharded board serves at all.

**Key.** ``<ns>:{<game>}:top:<window id>``: the hash tag is the *game* (the
unsharded tag, shared with the friends keys), never a shard tag, so the whole
key lives in one slot and is replaced atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from domain.errors import QueryError
from domain.games import GameConfig
from domain.keys import GroupKeys, shard_tag
from domain.ranking import Member, merge_top
from domain.windows import Window

__all__ = [
    "DEFAULT_K",
    "global_top_key",
    "live_windows",
    "merge_shard_tops",
    "stored_members",
]

#: Default depth K: the deepest ``offset + limit`` a sharded board serves by offset
#: (``readers.boards.MAX_SHARDED_DEPTH``; a unit test keeps the two equal).
DEFAULT_K = 1000


def global_top_key(namespace: str, game_id: str, window_id: str) -> str:
    """``<ns>:{<game>}:top:<window id>``: the global top-K of one sharded board."""
    return f"{GroupKeys(namespace, shard_tag(game_id, None)).prefix}top:{window_id}"


def stored_members(k: int) -> int:
    """How many members the global key holds for depth ``k``: ranks 1..k plus one lookahead."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"K must be a positive integer, got {k!r}")
    return k + 1


def merge_shard_tops(pages: Iterable[Sequence[Member]], k: int) -> list[Member]:
    """The global key's content: the first ``k + 1`` of the shards' tops, in board order.

    Each page must be its shard's first ``k + 1`` members in board order
    (``ZREVRANGE key 0 k WITHSCORES``).
    """
    return merge_top(pages, stored_members(k))


def live_windows(window_ids: Iterable[str], config: GameConfig, now_ms: int) -> list[Window]:
    """The registered windows worth merging: kept by the game and not yet expired.

    ``window_ids`` come from the shards' ``meta:boards`` registries, which the
    job never prunes, so expired windows (and any id that does not parse) are
    dropped here. Sorted by id for a stable order.
    """
    out: dict[str, Window] = {}
    for window_id in window_ids:
        try:
            window = config.window(window_id)
        except QueryError:
            continue
        if not config.keeps(window.kind):
            continue
        expire_at = config.expire_at_ms(window)
        if expire_at is not None and expire_at <= now_ms:
            continue
        out[window.id] = window
    return [out[key] for key in sorted(out)]
