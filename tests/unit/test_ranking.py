"""Read-side ranking math against brute-force oracles that share no code with it.

The oracle board order is written out independently: composite descending,
then the member's UTF-8 bytes descending (what ``ZREVRANGE`` does).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import random
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from domain.errors import EncodingError, QueryError
from domain.ranking import (
    Cursor,
    Entry,
    Member,
    competition_ranks,
    composite_of,
    count_before,
    entries,
    jittered_ttl_ms,
    mapping_members,
    merge_top,
    neighbours,
    page_after,
    percentile,
    rank_members,
    rank_mode,
    score_floor,
    split_window,
    visible_rank,
)
from domain.scoring import TieCodec, TieResolution

# --- the oracle --------------------------------------------------------------------------


def _cmp(a: Member, b: Member) -> int:
    """-1 when ``a`` is listed before ``b`` by ZREVRANGE."""
    if a.composite != b.composite:
        return -1 if a.composite > b.composite else 1
    ab, bb = a.player_id.encode(), b.player_id.encode()
    if ab == bb:
        return 0
    return -1 if ab > bb else 1


def oracle_sorted(members: list[Member]) -> list[Member]:
    return sorted(members, key=functools.cmp_to_key(_cmp))


def before(a: Member, b: Member) -> bool:
    return _cmp(a, b) < 0


players = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6
)


@st.composite
def boards(draw: st.DrawFn, max_size: int = 60) -> list[Member]:
    """Boards with many ties: composites from a small range, ids of mixed scripts."""
    ids = draw(st.lists(players, max_size=max_size, unique=True))
    top = draw(st.integers(0, 40))
    return [Member(pid, draw(st.integers(0, top))) for pid in ids]


def shard(members: list[Member], shards: int, seed: int) -> list[list[Member]]:
    rng = random.Random(seed)
    out: list[list[Member]] = [[] for _ in range(shards)]
    for member in members:
        out[rng.randrange(shards)].append(member)
    return [oracle_sorted(part) for part in out]


# --- percentile and score floor -----------------------------------------------------------


@given(st.integers(1, 10**9), st.data())
def test_percentile_is_truncated_share_of_lower(total: int, data: st.DataObject) -> None:
    lower = data.draw(st.integers(0, total))
    got = percentile(lower, total)
    exact = Fraction(100 * lower, total)
    assert Fraction(got).limit_denominator(100) == Fraction(int(exact * 100), 100)
    assert 0 <= got <= 100
    assert (got == 100) == (lower == total)


def test_percentile_refuses_impossible_counts() -> None:
    for lower, total in ((0, 0), (2, 1), (-1, 3)):
        with pytest.raises(ValueError):
            percentile(lower, total)


@given(
    st.sampled_from(list(TieResolution)),
    st.integers(1, 10**9),
    st.data(),
)
def test_score_floor_separates_lower_scores_exactly(
    resolution: TieResolution, span_ms: int, data: st.DataObject
) -> None:
    codec = TieCodec(0, span_ms, resolution)
    assume(codec.max_score >= 0)
    slots = codec.slots
    top = min(codec.max_score, 50)
    board = [
        (
            data.draw(st.integers(0, top), label="score"),
            data.draw(st.integers(0, slots - 1), label="slot"),
        )
        for _ in range(data.draw(st.integers(1, 25)))
    ]
    composites = [codec.compose(s, slot) for s, slot in board]
    for (score, _slot), composite in zip(board, composites, strict=True):
        floor = score_floor(composite, slots)
        assert floor == score * slots  # independent formula
        # ZCOUNT key -inf (floor  ==  players with a strictly lower score.
        assert sum(c < floor for c in composites) == sum(s < score for s, _ in board)


# --- order, merge, paging -----------------------------------------------------------------


@given(boards(), st.integers(1, 5), st.integers(0, 70), st.integers(0, 10**6))
def test_merge_top_of_shard_tops_is_global_top(
    board: list[Member], shards: int, k: int, seed: int
) -> None:
    pages = [part[:k] for part in shard(board, shards, seed)]
    assert merge_top(pages, k) == oracle_sorted(board)[:k]


@given(boards(), st.integers(1, 4), st.integers(1, 20), st.integers(0, 10**6), st.data())
def test_page_after_and_count_before_match_the_oracle(
    board: list[Member], shards: int, limit: int, seed: int, data: st.DataObject
) -> None:
    # The position may be a member, or a (composite, id) that is not on the board.
    if board and data.draw(st.booleans()):
        position = data.draw(st.sampled_from(board))
    else:
        position = Member(data.draw(players), data.draw(st.integers(0, 41)))
    parts = shard(board, shards, seed)
    ties = [m for m in board if m.composite == position.composite]
    below = [[m for m in part if m.composite < position.composite][:limit] for part in parts]
    above = sum(m.composite > position.composite for m in board)
    ordered = oracle_sorted(board)
    assert (
        page_after(position, ties, below, limit)
        == [m for m in ordered if before(position, m)][:limit]
    )
    assert count_before(position, above, ties) == sum(before(m, position) for m in board)


@given(boards(), st.integers(1, 4), st.integers(0, 8), st.integers(0, 10**6), st.data())
def test_neighbours_match_the_oracle(
    board: list[Member], shards: int, k: int, seed: int, data: st.DataObject
) -> None:
    assume(board)
    position = data.draw(st.sampled_from(board))
    parts = shard(board, shards, seed)
    ties = [m for m in board if m.composite == position.composite]
    # ZRANGE (c +inf BYSCORE: ascending, equal composites by id ascending.
    ups = [
        sorted(
            [m for m in part if m.composite > position.composite],
            key=lambda m: (m.composite, m.player_id.encode()),
        )[:k]
        for part in parts
    ]
    downs = [[m for m in part if m.composite < position.composite][:k] for part in parts]
    ordered = oracle_sorted(board)
    at = ordered.index(position)
    got_before, got_after = neighbours(position, ties, ups, downs, k)
    assert got_before == ordered[max(0, at - k) : at]
    assert got_after == ordered[at + 1 : at + 1 + k]


@given(boards(), st.data())
def test_split_window(board: list[Member], data: st.DataObject) -> None:
    assume(board)
    index = data.draw(st.integers(0, len(board) - 1))
    a, me, b = split_window(board, index)
    assert [*a, me, *b] == board and me == board[index]


@given(st.lists(st.tuples(players, st.integers(0, 30)), max_size=80))
def test_rank_members_is_the_board_restricted_to_them(pairs: list[tuple[str, int]]) -> None:
    best: dict[str, int] = {}
    for pid, value in pairs:
        best[pid] = max(value, best.get(pid, -1))
    got = rank_members(Member(pid, value) for pid, value in pairs)
    assert got == oracle_sorted([Member(p, v) for p, v in best.items()])
    assert len({m.player_id for m in got}) == len(got)


def test_mapping_members_skips_absent_and_reads_floats() -> None:
    got = mapping_members({"a": 5.0, "b": None, "c": b"7", "d": 9})
    assert got == [Member("a", 5), Member("c", 7), Member("d", 9)]


def test_entries_hide_ranks_beyond_the_exact_tier() -> None:
    codec = TieCodec(0, 10_000, TieResolution.S)  # 10 slots
    members = [Member("a", 95), Member("b", 90), Member("c", 49)]
    assert entries(members, 4, codec, 5) == [
        {"rank": 4, "playerId": "a", "score": 9},
        {"rank": 5, "playerId": "b", "score": 9},
        {"rank": None, "playerId": "c", "score": 4},
    ]
    assert visible_rank(5, 5) == 5 and visible_rank(6, 5) is None


def test_composite_of_refuses_inexact_values() -> None:
    assert composite_of(b"9007199254740991") == 2**53 - 1
    assert composite_of(12.0) == 12
    for bad in (1.5, float("nan"), float("inf"), -1, 2**53, b"x", True):
        with pytest.raises(EncodingError):
            composite_of(bad)


@given(st.integers(1, 10**7), st.floats(0, 0.99), st.floats(0, 1))
def test_jittered_ttl_stays_within_the_band(base: int, jitter: float, unit: float) -> None:
    ttl = jittered_ttl_ms(base, jitter, unit)
    assert max(1, base * (1 - jitter)) - 1 <= ttl <= base * (1 + jitter) + 1


def test_jittered_ttl_with_a_seeded_rng_is_reproducible_and_spread() -> None:
    draws = [jittered_ttl_ms(5000, 0.2, random.Random(7).random()) for _ in range(3)]
    assert len(set(draws)) == 1
    rng = random.Random(1)
    spread = {jittered_ttl_ms(5000, 0.2, rng.random()) for _ in range(200)}
    assert min(spread) >= 4000 and max(spread) <= 6000 and len(spread) > 100


# --- cursors ------------------------------------------------------------------------------


@given(
    st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
    st.sampled_from(["alltime", "daily:2026-05-04", "weekly:2026-W18"]),
    st.integers(0, 2**53 - 1),
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=128
    ),
)
def test_cursor_round_trip(game: str, window: str, composite: int, player: str) -> None:
    cursor = Cursor(game, window, composite, player)
    text = cursor.encode()
    assert text.isascii() and "=" not in text and "/" not in text and "+" not in text
    assert Cursor.decode(text) == cursor


def _b64(doc: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "!!!",
        "a" * 2000,
        _b64([1, 2]),
        _b64({"v": 2, "g": "g", "w": "alltime", "c": 1, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": 1.5, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": True, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": -1, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": 2**53, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": 1, "p": ""}),
        _b64({"v": 1, "g": "", "w": "alltime", "c": 1, "p": "p"}),
        _b64({"v": 1, "g": "g", "w": "alltime", "c": 1, "p": "p", "x": 0}),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_invalid_cursors_are_query_errors(text: str) -> None:
    with pytest.raises(QueryError):
        Cursor.decode(text)


@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(raw: bytes) -> None:
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with contextlib.suppress(QueryError):
        Cursor.decode(text)


# --- paging through a changing board --------------------------------------------------------


class _Paging:
    """A board that changes between pages, read page by page with a cursor."""

    def __init__(self, board: dict[str, int]) -> None:
        self.board = board

    def page(self, after: Member | None, limit: int) -> list[Member]:
        members = [Member(p, c) for p, c in self.board.items()]
        if after is None:
            return merge_top([oracle_sorted(members)], limit)
        ties = [m for m in members if m.composite == after.composite]
        below = [oracle_sorted([m for m in members if m.composite < after.composite])[:limit]]
        return page_after(after, ties, below, limit)


@settings(max_examples=200)
@given(
    st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), st.integers(0, 20), max_size=60),
    st.integers(1, 7),
    st.lists(
        st.tuples(st.text("abcdefghij", min_size=1, max_size=3), st.integers(0, 25)),
        max_size=40,
    ),
    st.booleans(),
)
def test_cursor_paging_over_a_changing_board(
    start: dict[str, int],
    limit: int,
    changes: list[tuple[str, int]],
    only_up: bool,
) -> None:
    """Stable players appear exactly once, in order; rising ones never twice.

    Between pages, players gain points (the ``best`` operator), join, or (when
    not ``only_up``) lose points or leave. A player who never changed is listed
    exactly once and in board order; a player whose score only ever rose is
    never listed twice (offset paging fails both when someone rises past the
    page boundary).
    """
    paging = _Paging(dict(start))
    touched: set[str] = set()
    served: list[Member] = []
    after: Member | None = None
    pending = list(changes)
    while True:
        page = paging.page(after, limit)
        assert page == oracle_sorted(page)  # each page is in board order
        if after is not None:
            assert all(before(after, m) for m in page)  # strictly after the cursor
        served += page
        if len(page) < limit:
            break
        after = page[-1]
        for _ in range(min(3, len(pending))):
            player, value = pending.pop()
            current = paging.board.get(player)
            if only_up and current is not None and value < current:
                continue
            if not only_up and value == 25 and current is not None:
                del paging.board[player]
            else:
                paging.board[player] = value
            if current != paging.board.get(player):
                touched.add(player)
    names = [m.player_id for m in served]
    stable = [p for p in start if p not in touched]
    for player in stable:
        assert names.count(player) == 1, player
    stable_order = [m.player_id for m in oracle_sorted([Member(p, start[p]) for p in stable])]
    assert [n for n in names if n in set(stable)] == stable_order
    if only_up:
        assert len(names) == len(set(names))


# --- competition ranks ("1224") ------------------------------------------------------------


@given(
    scores=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    start=st.integers(0, 29),
    tier=st.integers(1, 40),
)
def test_competition_ranks_of_any_slice_match_counting_better_scores(
    scores: list[int], start: int, tier: int
) -> None:
    board = sorted(scores, reverse=True)
    assume(start < len(board))
    lines = [
        Entry(rank=i + 1 if i + 1 <= tier else None, playerId=f"p{i}", score=s)
        for i, s in enumerate(board)
    ][start:]
    first = 1 + sum(1 for s in board if s > board[start])
    got = competition_ranks(lines, first if lines[0]["rank"] is not None else None)
    expected = [
        None if line["rank"] is None else 1 + sum(1 for s in board if s > line["score"])
        for line in lines
    ]
    assert got == expected
    assert rank_mode("competition") == "competition"
    with pytest.raises(QueryError):
        rank_mode("sparse")
