"""MicroBatcher: a deadline fixed by the first item, a size bound, nothing due when empty."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.batching import MicroBatcher


def test_empty_is_never_due() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=50, max_items=3)
    assert batcher.deadline_ms is None
    assert not batcher.due(0)
    assert not batcher.due(10**12)
    batcher.add([], now_ms=5)  # nothing arrived: no deadline starts
    assert batcher.deadline_ms is None
    assert not batcher.due(10**12)
    assert len(batcher) == 0


def test_deadline_is_fixed_by_the_first_item() -> None:
    batcher: MicroBatcher[str] = MicroBatcher(max_ms=50, max_items=1000)
    batcher.add(["a"], now_ms=1_000)
    assert batcher.deadline_ms == 1_050
    batcher.add(["b"], now_ms=1_030)
    batcher.add(["c"], now_ms=1_049)
    assert batcher.deadline_ms == 1_050  # later items do not push it back
    assert not batcher.due(1_049)
    assert batcher.due(1_050)
    assert batcher.due(1_051)


def test_a_steady_trickle_still_flushes_at_first_plus_max_ms() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=100, max_items=10_000)
    flushed_at: list[int] = []
    for now in range(0, 1_000, 10):  # one item every 10 ms: a resetting timer never fires
        batcher.add([now], now)
        if batcher.due(now):
            flushed_at.append(now)
            batcher.take()
    # First item at 0 -> flush at 100; the next batch starts at 110 -> flush at 210; ...
    assert flushed_at == list(range(100, 1_000, 110))


def test_size_bound_makes_the_batch_due_at_once() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=10_000, max_items=3)
    batcher.add([1, 2], now_ms=0)
    assert not batcher.due(0)
    assert batcher.room == 1
    batcher.add([3], now_ms=1)
    assert batcher.due(1)
    assert batcher.room == 0
    batcher.add([4, 5], now_ms=2)  # add never drops items; room stays at 0
    assert batcher.room == 0
    assert batcher.take() == [1, 2, 3, 4, 5]


def test_take_resets_items_and_deadline() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=50, max_items=10)
    batcher.add([1, 2], now_ms=100)
    assert batcher.take() == [1, 2]
    assert (len(batcher), batcher.deadline_ms) == (0, None)
    assert not batcher.due(10**6)
    assert batcher.room == 10
    batcher.add([3], now_ms=500)  # a new batch gets a new deadline
    assert batcher.deadline_ms == 550
    assert not batcher.due(549)
    assert batcher.take() == [3]
    assert batcher.take() == []


def test_zero_max_ms_is_due_as_soon_as_anything_arrives() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=0, max_items=10)
    assert not batcher.due(0)
    batcher.add([1], now_ms=7)
    assert batcher.due(7)


@pytest.mark.parametrize(("max_ms", "max_items"), [(-1, 1), (10, 0), (10, -5)])
def test_invalid_bounds_are_refused(max_ms: int, max_items: int) -> None:
    with pytest.raises(ValueError):
        MicroBatcher(max_ms=max_ms, max_items=max_items)


@settings(max_examples=200, deadline=None)
@given(
    max_ms=st.integers(0, 200),
    max_items=st.integers(1, 20),
    arrivals=st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 5)), max_size=60
    ),  # (gap ms, items)
)
def test_a_batch_is_due_exactly_when_full_or_first_plus_max_ms(
    max_ms: int, max_items: int, arrivals: list[tuple[int, int]]
) -> None:
    batcher: MicroBatcher[int] = MicroBatcher(max_ms=max_ms, max_items=max_items)
    now = 0
    first: int | None = None
    held: list[int] = []
    seq = 0
    for gap, count in arrivals:
        now += gap
        items = list(range(seq, seq + count))
        seq += count
        batcher.add(items, now)
        if items and first is None:
            first = now
        held += items
        expected_due = bool(held) and (
            len(held) >= max_items or (first is not None and now >= first + max_ms)
        )
        assert batcher.due(now) == expected_due
        assert batcher.deadline_ms == (None if first is None else first + max_ms)
        assert batcher.room == max(0, max_items - len(held))
        if expected_due:
            assert batcher.take() == held  # in arrival order, nothing lost
            held, first = [], None
    assert batcher.take() == held
