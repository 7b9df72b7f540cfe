"""Dense ranks ("1223"): the pure numbering of a page, and the game setting that enables them.

The counts behind them are tested against real Redis in
``tests/integration/test_dense_ranks.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from domain.errors import ConfigError, QueryError
from domain.games import GameCatalog
from domain.ranking import Entry, dense_ranks, rank_mode


def _oracle(board: list[int], score: int) -> int:
    """1 + the distinct scores strictly better than ``score`` (sort + distinct)."""
    return 1 + len({s for s in board if s > score})


@given(
    scores=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    start=st.integers(0, 29),
    tier=st.integers(1, 40),
)
def test_dense_ranks_of_any_slice_match_counting_distinct_better_scores(
    scores: list[int], start: int, tier: int
) -> None:
    board = sorted(scores, reverse=True)
    assume(start < len(board))
    lines = [
        Entry(rank=i + 1 if i + 1 <= tier else None, playerId=f"p{i}", score=s)
        for i, s in enumerate(board)
    ][start:]
    first = _oracle(board, board[start]) if lines[0]["rank"] is not None else None
    expected = [None if line["rank"] is None else _oracle(board, line["score"]) for line in lines]
    assert dense_ranks(lines, first) == expected


def test_the_three_modes_are_accepted_and_others_named() -> None:
    assert [rank_mode(m) for m in ("unique", "competition", "dense")] == [
        "unique",
        "competition",
        "dense",
    ]
    with pytest.raises(QueryError, match="'unique', 'competition' or 'dense'"):
        rank_mode("sparse")


def test_a_sharded_game_may_keep_dense_ranks() -> None:
    game = GameCatalog.from_toml('[games."a"]\ndense_ranks = true\nshards = 4\n').lookup("a")
    assert game is not None and game.dense_ranks and game.shards == 4


def test_dense_ranks_is_a_game_setting_off_by_default() -> None:
    catalog = GameCatalog.from_toml('[games."a"]\ndense_ranks = true\n[games."b"]\n')
    a, b = catalog.lookup("a"), catalog.lookup("b")
    assert a is not None and a.dense_ranks
    assert b is not None and not b.dense_ranks


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('dense_ranks = "yes"', "expected true or false"),
    ],
)
def test_a_wrong_dense_ranks_setting_is_refused_at_start(table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GameCatalog.from_toml(f'[games."a"]\n{table}\n')
