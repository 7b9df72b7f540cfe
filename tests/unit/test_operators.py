from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import EncodingError
from domain.games import Operator
from domain.operators import Entry, apply, saturates
from domain.scoring import TieCodec, TieResolution

MAX = 1_000
events_st = st.lists(st.tuples(st.integers(0, MAX), st.integers(0, 50)), min_size=1, max_size=40)


def fold(op: Operator, events: list[tuple[int, int]], max_score: int = MAX) -> Entry:
    current: Entry | None = None
    for score, slot in events:
        current = apply(op, current, score, slot, max_score)
    assert current is not None
    return current


# --- oracles written from the rules, not from the implementation -------------------------


def best_oracle(events: list[tuple[int, int]]) -> tuple[int, int]:
    top_score = max(score for score, _ in events)
    return top_score, min(slot for score, slot in events if score == top_score)


def incr_oracle(events: list[tuple[int, int]], max_score: int) -> tuple[int, int]:
    return min(sum(score for score, _ in events), max_score), max(slot for _, slot in events)


def set_oracle(events: list[tuple[int, int]]) -> tuple[int, int]:
    latest = max(slot for _, slot in events)
    return [(score, slot) for score, slot in events if slot == latest][-1]


@given(events_st)
def test_best_matches_oracle(events: list[tuple[int, int]]) -> None:
    entry = fold(Operator.BEST, events)
    assert (entry.score, entry.slot) == best_oracle(events)


@given(events_st, st.integers(1, 3 * MAX))
def test_incr_matches_oracle(events: list[tuple[int, int]], max_score: int) -> None:
    bounded = [(min(score, max_score), slot) for score, slot in events]
    entry = fold(Operator.INCR, bounded, max_score)
    assert (entry.score, entry.slot) == incr_oracle(bounded, max_score)
    assert entry.score <= max_score


@given(events_st)
def test_set_matches_oracle(events: list[tuple[int, int]]) -> None:
    entry = fold(Operator.SET, events)
    assert (entry.score, entry.slot) == set_oracle(events)


@given(events_st, st.randoms(use_true_random=False))
def test_best_and_incr_ignore_arrival_order(
    events: list[tuple[int, int]], rnd: random.Random
) -> None:
    shuffled = list(events)
    rnd.shuffle(shuffled)
    for op in (Operator.BEST, Operator.INCR):
        assert fold(op, events) == fold(op, shuffled)


@given(events_st)
def test_best_agrees_with_zadd_gt_on_composites(events: list[tuple[int, int]]) -> None:
    """BEST in memory must pick what ``ZADD GT`` on the composite would keep in Redis."""
    codec = TieCodec(0, 51_000, TieResolution.S)  # slots 0..50
    current: Entry | None = None
    stored: int | None = None
    for score, slot in events:
        current = apply(Operator.BEST, current, score, slot, MAX)
        composite = codec.compose(score, slot)
        stored = composite if stored is None else max(stored, composite)
        assert codec.split(float(stored)) == (current.score, current.slot)


def test_best_examples() -> None:
    first = Entry(100, 5)
    assert apply(Operator.BEST, None, 100, 5, MAX) == first
    assert apply(Operator.BEST, first, 99, 0, MAX) is first
    assert apply(Operator.BEST, first, 100, 9, MAX) is first
    assert apply(Operator.BEST, first, 100, 5, MAX) is first
    assert apply(Operator.BEST, first, 100, 4, MAX) == Entry(100, 4)
    assert apply(Operator.BEST, first, 101, 40, MAX) == Entry(101, 40)


def test_incr_examples() -> None:
    assert apply(Operator.INCR, None, 7, 3, MAX) == Entry(7, 3)
    assert apply(Operator.INCR, Entry(7, 3), 5, 1, MAX) == Entry(12, 3)
    assert apply(Operator.INCR, Entry(7, 3), 5, 8, MAX) == Entry(12, 8)
    assert apply(Operator.INCR, Entry(990, 3), 50, 4, MAX) == Entry(MAX, 4)
    capped = Entry(MAX, 4)
    assert apply(Operator.INCR, capped, 1, 2, MAX) is capped
    assert apply(Operator.INCR, capped, 0, 4, MAX) is capped
    assert apply(Operator.INCR, capped, 1, 9, MAX) == Entry(MAX, 9)


def test_set_examples() -> None:
    current = Entry(500, 10)
    assert apply(Operator.SET, current, 1, 11, MAX) == Entry(1, 11)
    assert apply(Operator.SET, current, 900, 9, MAX) is current
    assert apply(Operator.SET, current, 3, 10, MAX) == Entry(3, 10)  # same slot: log order
    assert apply(Operator.SET, current, 500, 10, MAX) is current
    assert apply(Operator.SET, None, 0, 0, MAX) == Entry(0, 0)


@pytest.mark.parametrize("op", list(Operator))
@pytest.mark.parametrize(("score", "slot"), [(-1, 0), (MAX + 1, 0), (0, -1)])
def test_out_of_bounds_events_raise(op: Operator, score: int, slot: int) -> None:
    with pytest.raises(EncodingError):
        apply(op, None, score, slot, MAX)
    with pytest.raises(EncodingError):
        apply(op, Entry(1, 1), score, slot, MAX)


def test_saturates() -> None:
    assert saturates(Operator.INCR, Entry(990, 0), 11, MAX) is True
    assert saturates(Operator.INCR, Entry(990, 0), 10, MAX) is False
    assert saturates(Operator.INCR, None, MAX, MAX) is False
    assert saturates(Operator.INCR, Entry(MAX, 0), 1, MAX) is True
    assert saturates(Operator.INCR, Entry(MAX, 0), 0, MAX) is False
    assert saturates(Operator.BEST, Entry(990, 0), 999, MAX) is False
    assert saturates(Operator.SET, Entry(990, 0), 999, MAX) is False


@given(events_st)
def test_saturates_predicts_the_cap(events: list[tuple[int, int]]) -> None:
    current: Entry | None = None
    for score, slot in events:
        expected_raw = (current.score if current else 0) + score
        capped = saturates(Operator.INCR, current, score, MAX)
        current = apply(Operator.INCR, current, score, slot, MAX)
        assert capped == (expected_raw > MAX)
        assert current.score == min(expected_raw, MAX)


def test_entry_is_frozen_and_hashable() -> None:
    entry = Entry(1, 2)
    assert {entry, Entry(1, 2)} == {entry}
    with pytest.raises(AttributeError):
        entry.score = 3  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(list(Operator)),
    slots=st.integers(min_value=1, max_value=10_000),
    cur=st.none() | st.tuples(st.integers(0, 500), st.integers(0, 9_999)),
    score=st.integers(0, 500),
    slot=st.integers(0, 9_999),
)
def test_apply_composite_agrees_with_apply(
    op: Operator, slots: int, cur: tuple[int, int] | None, score: int, slot: int
) -> None:
    from domain.operators import apply_composite

    slot %= slots
    max_score = 600
    entry = None if cur is None else Entry(cur[0], cur[1] % slots)
    packed = None if entry is None else entry.score * slots + (slots - 1 - entry.slot)
    expected = apply(op, entry, score, slot, max_score)
    got = apply_composite(op, packed, score, slot, slots, max_score)
    assert divmod(got, slots) == (expected.score, slots - 1 - expected.slot)
