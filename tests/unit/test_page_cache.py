"""A cached page may be kept after a change only if a fresh read would give the same page.

The oracle is a board written out here: members ordered by composite value
descending, then playerId descending (``ZREVRANGE``); a page is the members at
``offset .. offset + limit - 1`` with their scores and ranks, plus whether a
member follows (``nextCursor``), whose value is the last entry's. A lowest-wins
board stores ``max_score - score`` (so its composite order is score ascending)
while changes and pages carry the player's own score, as the job's stream does.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.live import StreamChange
from api.pages import CachedPage

SLOTS = 4
MAX_SCORE = 30
PLAYERS = [f"p{i}" for i in range(12)]

# player -> (stored value, tie slot); composite = stored * SLOTS + (SLOTS - 1 - slot)
Board = dict[str, tuple[int, int]]


def _composite(value: tuple[int, int]) -> int:
    stored, slot = value
    return stored * SLOTS + (SLOTS - 1 - slot)


def _score(value: tuple[int, int], ascending: bool) -> int:
    return MAX_SCORE - value[0] if ascending else value[0]


def _page(board: Board, limit: int, offset: int, ascending: bool) -> tuple[object, ...]:
    order = sorted(board, key=lambda p: (_composite(board[p]), p), reverse=True)
    shown = order[offset : offset + limit]
    entries = tuple(
        (offset + i + 1, p, _score(board[p], ascending), _composite(board[p]))
        for i, p in enumerate(shown)
    )
    return entries, len(order) > offset + limit


def _cached(board: Board, limit: int, offset: int, ascending: bool) -> CachedPage:
    entries, more = _page(board, limit, offset, ascending)
    assert isinstance(entries, tuple)
    return CachedPage(
        b"",
        "alltime",
        frozenset(entry[1] for entry in entries),
        entries[-1][2] if more and entries else None,
        ascending,
        0.0,
        None,
    )


values = st.tuples(st.integers(0, MAX_SCORE), st.integers(0, SLOTS - 1))


@settings(max_examples=3000, deadline=None)
@given(
    board=st.dictionaries(st.sampled_from(PLAYERS), values, max_size=len(PLAYERS)),
    limit=st.integers(1, 5),
    offset=st.integers(0, 6),
    player=st.sampled_from([*PLAYERS, "newcomer"]),
    new=st.none() | values,
    ascending=st.booleans(),
    unknown_old=st.booleans(),
)
def test_a_page_kept_after_a_change_is_what_a_fresh_read_gives(
    board: Board,
    limit: int,
    offset: int,
    player: str,
    new: tuple[int, int] | None,
    ascending: bool,
    unknown_old: bool,
) -> None:
    before = _page(board, limit, offset, ascending)
    cached = _cached(board, limit, offset, ascending)
    old = board.get(player)
    after_board = dict(board)
    if new is None:
        after_board.pop(player, None)
    else:
        after_board[player] = new
    change = StreamChange(
        "alltime",
        player,
        # A RETRACT of a value the job had not read carries no old score.
        None if old is None or (new is None and unknown_old) else _score(old, ascending),
        None if new is None else _score(new, ascending),
    )
    if not cached.altered_by(change):
        assert _page(after_board, limit, offset, ascending) == before


def test_changes_of_other_windows_never_alter_a_page() -> None:
    page = CachedPage(b"", "weekly:2026-W19", frozenset({"a"}), None, False, 0.0, None)
    assert not page.altered_by(StreamChange("alltime", "a", None, 5))
    assert page.altered_by(StreamChange("weekly:2026-W19", "zz", None, 0))


@pytest.mark.parametrize(
    ("change", "altered"),
    [
        (StreamChange("alltime", "a", 50, 60), True),  # on the page
        (StreamChange("alltime", "z", None, 40), True),  # ties the last score
        (StreamChange("alltime", "z", None, 39), False),  # below the page
        (StreamChange("alltime", "z", 39, 38), False),
        (StreamChange("alltime", "z", 45, 30), True),  # was above the last score
        (StreamChange("alltime", "z", 10, None), True),  # any removal
    ],
)
def test_a_full_page_is_altered_only_at_or_above_its_last_score(
    change: StreamChange, altered: bool
) -> None:
    page = CachedPage(b"", "alltime", frozenset({"a", "b"}), 40, False, 0.0, None)
    assert page.altered_by(change) is altered
