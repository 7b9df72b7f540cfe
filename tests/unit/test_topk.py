"""The global top-K of a sharded board equals the top-K of the same board unsharded.

The oracle is written out here: board order is composite descending, then the
playerId's UTF-8 bytes descending (``ZREVRANGE``), and a player's shard is
``crc32(playerId) % S``, computed without the project's helpers.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.games import GameConfig
from domain.keys import shard_of
from domain.ranking import Member, merge_top
from domain.topk import (
    DEFAULT_K,
    global_top_key,
    live_windows,
    merge_shard_tops,
    stored_members,
)
from domain.windows import WindowKind


def oracle_order(members: list[Member]) -> list[Member]:
    return sorted(members, key=lambda m: (-m.composite, _desc_bytes(m.player_id)))


def _desc_bytes(player: str) -> tuple[int, ...]:
    # Greater bytes first; a proper prefix sorts after the longer id ("ab" > "a").
    return (*(255 - b for b in player.encode()), 256)


def split(board: dict[str, int], shards: int) -> list[list[Member]]:
    out: list[list[Member]] = [[] for _ in range(shards)]
    for player, composite in board.items():
        out[zlib.crc32(player.encode()) % shards].append(Member(player, composite))
    return [oracle_order(shard) for shard in out]


players = st.text(
    alphabet=st.sampled_from("abcXYZ019_-éü€"),  # non-ASCII on purpose
    min_size=1,
    max_size=6,
)
#: Few distinct composites, so ties at the composite are the rule, not the exception.
boards = st.dictionaries(players, st.integers(0, 12), max_size=150)


@settings(max_examples=400, deadline=None)
@given(board=boards, shards=st.integers(2, 9), k=st.integers(1, 160))
def test_merged_shard_tops_equal_the_unsharded_top_k(
    board: dict[str, int], shards: int, k: int
) -> None:
    unsharded = oracle_order([Member(p, c) for p, c in board.items()])
    per_shard = split(board, shards)
    assert sum(map(len, per_shard)) == len(unsharded)

    # What the merger reads: ZREVRANGE <shard> 0 K WITHSCORES (K + 1 members each).
    tops = [shard[: stored_members(k)] for shard in per_shard]
    assert merge_shard_tops(tops, k) == unsharded[: k + 1]

    # The plain statement: every shard's top-K merged and cut at K is the global top-K.
    assert merge_top([shard[:k] for shard in per_shard], k) == unsharded[:k]


@settings(max_examples=200, deadline=None)
@given(board=boards, shards=st.integers(2, 9), k=st.integers(1, 40), data=st.data())
def test_every_page_within_k_reads_the_same_from_the_global_key(
    board: dict[str, int], shards: int, k: int, data: st.DataObject
) -> None:
    """A reader's page (``limit + 1`` members from ``offset``) is the unsharded one."""
    unsharded = oracle_order([Member(p, c) for p, c in board.items()])
    stored = merge_shard_tops([s[: k + 1] for s in split(board, shards)], k)
    limit = data.draw(st.integers(1, k))
    offset = data.draw(st.integers(0, k - limit))
    page = stored[offset : offset + limit + 1]
    if len(page) == limit + 1:  # what readers.boards requires to serve from the key
        assert page == unsharded[offset : offset + limit + 1]
    else:  # only when the board itself ends inside the page
        assert len(unsharded) < offset + limit + 1


def test_the_oracle_shard_is_the_planners_shard() -> None:
    for player in ["p1", "é", "ü€", "x" * 128]:
        assert shard_of(player, 7) == zlib.crc32(player.encode()) % 7


def test_global_key_lives_in_the_games_own_slot() -> None:
    assert global_top_key("lb", "g1", "weekly:2026-W18") == "lb:{g1}:top:weekly:2026-W18"
    assert global_top_key("t1", "g.x-1", "alltime") == "t1:{g.x-1}:top:alltime"


def test_depth_and_its_default() -> None:
    from readers.boards import MAX_SHARDED_DEPTH

    assert DEFAULT_K == MAX_SHARDED_DEPTH
    assert stored_members(1000) == 1001
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            stored_members(bad)


def _ms(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


def test_live_windows_drop_expired_unkept_and_malformed_ids() -> None:
    now = _ms(2026, 5, 6, 12)
    config = GameConfig(daily_retention_s=2 * 86_400)
    ids = {
        "alltime",
        "daily:2026-05-06",
        "daily:2026-05-04",  # ended 05-05 00:00, expires 05-07 00:00: still live
        "daily:2026-05-03",  # expired 05-06 00:00
        "weekly:2026-W19",
        "daily:2026-02-30",  # not a date
        "junk",
    }
    got = [w.id for w in live_windows(ids, config, now)]
    assert got == ["alltime", "daily:2026-05-04", "daily:2026-05-06", "weekly:2026-W19"]
    daily_only = GameConfig(windows=(WindowKind.DAILY,))
    assert [w.id for w in live_windows(ids, daily_only, now)] == [
        "daily:2026-05-04",
        "daily:2026-05-06",
    ]
