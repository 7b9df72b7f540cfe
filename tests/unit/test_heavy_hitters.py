"""Activity heavy hitters against exact counts, within the sketches' stated bounds."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import EncodingError
from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig
from domain.heavy_hitters import ActivityCounts, HotSettings, count_activity, hot_key
from domain.records import Accepted, CheckedBatch
from domain.windows import Window, WindowKind

SMALL = HotSettings(lg_max_k=4, relative_error=0.05, confidence=0.95)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.sampled_from([f"p{i}" for i in range(40)]), max_size=600))
def test_estimates_stay_within_the_stated_bounds(items: list[str]) -> None:
    exact = Counter(items)
    counts = ActivityCounts(SMALL)
    counts.add_all(items)
    assert counts.total == len(items)
    bound = counts.maximum_error
    assert bound <= SMALL.epsilon * len(items) + 1
    listed = {h.item: h for h in counts.top(100)}
    for item, n in exact.items():
        if n > bound:  # every item heavier than the bound is reported
            assert item in listed
        if item in listed:
            hit = listed[item]
            assert hit.lower_bound <= n <= hit.upper_bound
            assert abs(hit.estimate - n) <= bound
        estimate, lower = counts.estimate(item)
        # Count-min never undercounts; its lower bound (estimate - error) only
        # holds with the configured confidence, so it is not asserted per item.
        assert n <= estimate and lower <= estimate
    # bytes round trip and merge equal one sketch of everything
    again = ActivityCounts.decode(counts.encode())
    assert again.top(100) == counts.top(100) and again.total == counts.total
    half = len(items) // 2
    a, b = ActivityCounts(SMALL), ActivityCounts(SMALL)
    a.add_all(items[:half])
    b.add_all(items[half:])
    a.merge(b)
    assert a.total == len(items)
    assert all(a.estimate(i)[0] >= n for i, n in exact.items())


def test_a_bot_stands_out_of_a_crowd() -> None:
    counts = ActivityCounts()
    counts.add_all([f"p{i % 5000}" for i in range(50_000)])
    counts.add("bot", 2_000)
    top = counts.top(3)
    assert top[0].item == "bot" and top[0].lower_bound <= 2_000 <= top[0].upper_bound
    assert counts.estimate("bot")[0] >= 2_000


def test_bad_bytes_and_settings_are_refused() -> None:
    with pytest.raises(EncodingError):
        ActivityCounts.decode(b"nonsense")
    with pytest.raises(EncodingError):
        ActivityCounts(SMALL).merge(ActivityCounts())
    with pytest.raises(EncodingError):
        HotSettings(lg_max_k=2)
    assert hot_key("lb", "g1", "daily:2026-05-04") == "lb:{g1}:hot:daily:2026-05-04"


def test_count_activity_counts_scores_in_the_period_by_player_and_game() -> None:
    game = GameConfig()
    window = Window(WindowKind.DAILY, "daily:1970-01-02", 86_400_000, 2 * 86_400_000)

    def rec(offset: int, game_id: str, player: str, ts: int, kind: EventKind) -> Accepted:
        event = ScoreEvent(f"e{offset}", game_id, player, 1, ts, kind, "k1", b"")
        return Accepted(offset, ts, event, game, ())

    batch = CheckedBatch(
        "t",
        0,
        (
            rec(0, "g", "a", 86_400_000, EventKind.SCORE),
            rec(1, "g", "a", 90_000_000, EventKind.SCORE),
            rec(2, "g", "b", 90_000_000, EventKind.RETRACT),  # not activity of a score
            rec(3, "h", "c", 90_000_000, EventKind.SCORE),
            rec(4, "g", "d", 2 * 86_400_000, EventKind.SCORE),  # the next day
        ),
        (),
        4,
    )
    players, games = count_activity([batch], "g", window)
    assert [(h.item, h.estimate) for h in players.top(5)] == [("a", 2)]
    assert [(h.item, h.estimate) for h in games.top(5)] == [("g", 2), ("h", 1)]
