"""The benchmarks' load shapes against a brute-force oracle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.schedule import Phase, RateSchedule, drain_seconds


def _oracle_due(phases: list[Phase]) -> list[float]:
    """Every record's due time, by walking the phases record by record."""
    out: list[float] = []
    start = 0.0
    for phase in phases:
        out += [start + (i + 1) * phase.seconds / phase.events for i in range(phase.events)]
        start += phase.seconds
    return out


phase_lists = st.lists(
    st.builds(
        Phase,
        name=st.sampled_from(["a", "b", "c"]),
        seconds=st.floats(0.1, 5.0),
        rate=st.floats(1.0, 200.0),
    ),
    min_size=1,
    max_size=4,
)


@given(phase_lists)
def test_due_times_match_walking_the_phases(phases: list[Phase]) -> None:
    schedule = RateSchedule(phases)
    expected = _oracle_due(phases)
    assert schedule.total == len(expected)
    assert [schedule.due(i) for i in range(schedule.total)] == pytest.approx(expected)


@given(phase_lists)
def test_due_times_never_go_back(phases: list[Phase]) -> None:
    schedule = RateSchedule(phases)
    times = [schedule.due(i) for i in range(schedule.total)]
    assert times == sorted(times)


def test_a_3x_spike_sends_three_times_as_many_per_second() -> None:
    schedule = RateSchedule.spike(rate=100, seconds=30, factor=3, at_s=10, length_s=5)
    assert [p.rate for p in schedule.phases] == [100, 300, 100]
    assert schedule.total == 1000 + 1500 + 1500
    assert schedule.window("spike") == (10, 15)
    assert schedule.phase_at(12.5).name == "spike"
    assert schedule.phase_at(15.0).name == "after"
    # The 1000th record closes the first phase; the next one is the spike's first.
    assert schedule.due(999) == pytest.approx(10.0)
    assert schedule.due(1000) == pytest.approx(10 + 1 / 300)


def test_bad_spikes_are_refused() -> None:
    with pytest.raises(ValueError):
        RateSchedule.spike(rate=100, seconds=20, factor=3, at_s=10, length_s=10)
    with pytest.raises(ValueError):
        RateSchedule([Phase("x", 1, 0)])


def test_drain_is_measured_from_the_spike_end() -> None:
    samples = [(9.0, 10), (12.0, 900), (15.5, 700), (17.0, 30), (18.0, 5)]
    assert drain_seconds(samples, spike_end_s=15.0, normal_lag=40) == 2.0
    assert drain_seconds(samples, spike_end_s=15.0, normal_lag=800) == 0.5
    assert drain_seconds(samples, spike_end_s=15.0, normal_lag=1) is None
