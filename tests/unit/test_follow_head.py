"""A replay process folds on to the live head before it loads (``follow_head``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from domain.backfill_plan import FOLLOW_MIN_RECORDS, FOLLOW_PASSES, behind
from jobs.replay_workers import follow_head


def test_behind_names_each_partition_short_of_its_head_with_its_records() -> None:
    assert behind({0: 10, 1: 5, 2: 7}, {0: 15, 1: 5, 2: 6}) == {0: (10, 14)}
    assert behind({3: 0}, {0: 9}) == {}  # a head not given: nothing known to read


class GrowingLog:
    """A log whose heads move on by ``arrivals`` records per partition at every read of them."""

    def __init__(self, heads: dict[int, int], arrivals: list[dict[int, int]]) -> None:
        self.heads = dict(heads)
        self.arrivals = list(arrivals)
        self.folded: list[dict[int, tuple[int, int]]] = []

    def read_heads(self) -> dict[int, int]:
        heads = dict(self.heads)
        if self.arrivals:
            for p, n in self.arrivals.pop(0).items():
                self.heads[p] = self.heads.get(p, 0) + n
        return heads

    def fold(self, ranges: dict[int, tuple[int, int]]) -> None:
        self.folded.append(dict(ranges))


def test_a_replay_at_the_head_folds_nothing_more() -> None:
    log = GrowingLog({0: 100, 1: 50}, [])
    ends = {0: 100, 1: 50}
    follow_head(ends, log.read_heads, log.fold)
    assert ends == {0: 100, 1: 50} and log.folded == []


def test_a_few_records_behind_are_left_to_the_parents_catch_up() -> None:
    log = GrowingLog({0: 100 + FOLLOW_MIN_RECORDS - 1}, [])
    ends = {0: 100}
    follow_head(ends, log.read_heads, log.fold)
    assert ends == {0: 100} and log.folded == []


def test_it_folds_up_to_each_head_then_what_arrived_meanwhile_until_little_is_left() -> None:
    # Read 1: 5,000 behind (3,000 more arrive while they fold); read 2: those
    # 3,000; read 3: 500 arrived meanwhile, under the minimum: left to the parent.
    log = GrowingLog({0: 4_000, 1: 3_000}, [{0: 2_000, 1: 1_000}, {0: 400, 1: 100}])
    ends = {0: 1_000, 1: 1_000}
    follow_head(ends, log.read_heads, log.fold)
    assert log.folded == [
        {0: (1_000, 3_999), 1: (1_000, 2_999)},
        {0: (4_000, 5_999), 1: (3_000, 3_999)},
    ]
    assert ends == {0: 6_000, 1: 4_000}


def test_a_head_that_runs_away_is_followed_a_bounded_number_of_times() -> None:
    log = GrowingLog({0: 10 * FOLLOW_MIN_RECORDS}, [{0: 10 * FOLLOW_MIN_RECORDS}] * 50)
    ends = {0: 0}
    follow_head(ends, log.read_heads, log.fold)
    assert len(log.folded) == FOLLOW_PASSES
    assert ends == {0: log.folded[-1][0][1] + 1}


@given(
    st.dictionaries(st.integers(0, 7), st.integers(0, 10_000), min_size=1),
    st.lists(st.dictionaries(st.integers(0, 7), st.integers(0, 3_000)), max_size=8),
)
def test_every_offset_from_the_planned_end_to_where_it_stopped_is_folded_once_in_order(
    ends0: dict[int, int], arrivals: list[dict[int, int]]
) -> None:
    heads = {p: end + arrivals[0].get(p, 0) if arrivals else end for p, end in ends0.items()}
    log = GrowingLog(heads, arrivals[1:])
    ends = dict(ends0)
    follow_head(ends, log.read_heads, log.fold)
    for p, start in ends0.items():
        spans = [ranges[p] for ranges in log.folded if p in ranges]
        at = start
        for first, last in spans:
            assert first == at and last >= first  # contiguous, nothing read twice or skipped
            at = last + 1
        assert ends[p] == at <= log.heads[p]
    assert len(log.folded) <= FOLLOW_PASSES
    # Every fold was worth a pass: at least the minimum behind when it started.
    assert all(sum(b - a + 1 for a, b in r.values()) >= FOLLOW_MIN_RECORDS for r in log.folded)
