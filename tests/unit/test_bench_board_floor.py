"""bench.board_floor: the least a writer must send Redis, against a naive replay of the stream."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.board_floor import BestBoards, Updates

_updates = st.tuples(
    st.sampled_from(["p1", "p2", "p3", "p4"]),
    st.lists(st.tuples(st.sampled_from(["day", "week", "all"]), st.integers(0, 50)), max_size=3),
)


def test_a_batch_writes_each_raised_member_once_with_its_best_value() -> None:
    boards = BestBoards()
    assert boards.changes([("a", [("k", 5)]), ("a", [("k", 7)]), ("b", [("k", 1)])]) == {
        "k": {"a": 7, "b": 1}
    }
    assert boards.changes([("a", [("k", 6)]), ("b", [("k", 1)])]) == {}  # nothing rises
    assert boards.changes([("b", [("k", 2), ("j", 0)])]) == {"k": {"b": 2}, "j": {"b": 0}}


@given(st.lists(st.lists(_updates, max_size=8), max_size=6))
def test_the_floor_is_what_changed_per_batch_and_ends_at_the_boards_values(
    batches: list[list[Updates]],
) -> None:
    boards = BestBoards()
    naive: dict[tuple[str, str], int] = {}
    for batch in batches:
        before = dict(naive)
        for player, windows in batch:
            for key, value in windows:
                naive[(key, player)] = max(value, naive.get((key, player), value))
        expected: dict[str, dict[str, int]] = {}
        for (key, player), value in naive.items():
            if before.get((key, player)) != value:
                expected.setdefault(key, {})[player] = value
        assert boards.changes(batch) == expected
    assert {(k, p): v for k, board in boards.values.items() for p, v in board.items()} == naive
