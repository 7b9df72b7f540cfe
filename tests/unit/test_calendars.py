"""Hourly and monthly boards, per-game time zones and week starts, seasons and asc order.

The DST cases are the two 2026 transitions of America/Los_Angeles (the
Google Play reset zone) and Europe/Berlin: a local day is 23 or 25 hours
long, starts at local midnight, and the hour 01:00 that a fall-back repeats
gives two boards with different ids. The oracle is ``datetime`` + ``zoneinfo``
arithmetic written independently of :mod:`domain.windows`.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import ConfigError, EncodingError, QueryError
from domain.games import GameCatalog, GameConfig, Operator, Order
from domain.operators import apply_composite, apply_composite_asc
from domain.scoring import TieCodec, TieResolution
from domain.windows import Calendar, WindowKind, window_for, window_from_id

LA = Calendar("America/Los_Angeles", 6)
BERLIN = Calendar("Europe/Berlin", 0)
HOUR = 3_600_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def local_midnight(day: date, zone: str) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(zone)).timestamp() * 1000)


@pytest.mark.parametrize(
    ("calendar", "ts", "day", "hours"),
    [
        (LA, "2026-03-08T09:59:59.999+00:00", "daily:2026-03-08", 23),  # spring forward
        (LA, "2026-03-08T10:00:00+00:00", "daily:2026-03-08", 23),
        (LA, "2026-11-01T08:30:00+00:00", "daily:2026-11-01", 25),  # fall back
        (LA, "2026-11-01T09:30:00+00:00", "daily:2026-11-01", 25),
        (BERLIN, "2026-03-29T00:59:59.999+00:00", "daily:2026-03-29", 23),
        (BERLIN, "2026-10-25T01:00:00+00:00", "daily:2026-10-25", 25),
        (BERLIN, "2026-10-24T22:00:00+00:00", "daily:2026-10-25", 25),  # local midnight
        (BERLIN, "2026-10-24T21:59:59.999+00:00", "daily:2026-10-24", 24),
    ],
)
def test_local_days_across_both_2026_dst_changes(
    calendar: Calendar, ts: str, day: str, hours: int
) -> None:
    window = window_for(WindowKind.DAILY, ms(ts), calendar)
    assert window.id == day
    assert window.start_ms == local_midnight(date.fromisoformat(day[6:]), calendar.zone)
    assert window.end_ms is not None and window.start_ms is not None
    assert window.end_ms - window.start_ms == hours * HOUR
    assert window_from_id(day, calendar) == window


def test_the_repeated_hour_has_two_boards() -> None:
    first = window_for(WindowKind.HOURLY, ms("2026-11-01T08:30:00+00:00"), LA)
    second = window_for(WindowKind.HOURLY, ms("2026-11-01T09:30:00+00:00"), LA)
    assert (first.id, second.id) == ("hourly:2026-11-01T01-0700", "hourly:2026-11-01T01-0800")
    assert first.end_ms == second.start_ms
    skipped = window_for(WindowKind.HOURLY, ms("2026-03-08T10:00:00+00:00"), LA)
    assert skipped.id == "hourly:2026-03-08T03-0700"  # 02:00 never happened
    for window in (first, second, skipped):
        assert window_from_id(window.id, LA) == window
    with pytest.raises(QueryError):
        window_from_id("hourly:2026-03-08T02-0800", LA)


def test_weeks_start_on_the_configured_day_and_months_are_local() -> None:
    ts = ms("2026-11-04T12:00:00+00:00")  # a Wednesday
    week = window_for(WindowKind.WEEKLY, ts, LA)
    assert week.id == "weekly:2026-11-01"  # the Sunday, local midnight, 25-hour first day
    assert week.start_ms == local_midnight(date(2026, 11, 1), LA.zone)
    assert week.end_ms == local_midnight(date(2026, 11, 8), LA.zone)
    assert window_for(WindowKind.WEEKLY, ts, BERLIN).id == "weekly:2026-W45"
    month = window_for(WindowKind.MONTHLY, ms("2026-11-01T06:59:59+00:00"), LA)
    assert month.id == "monthly:2026-10"  # still Halloween night in Los Angeles
    assert window_from_id("monthly:2026-10", LA) == month
    with pytest.raises(QueryError):
        window_from_id("weekly:2026-11-02", LA)  # a Monday, but LA weeks start on Sunday


@given(
    ts=st.integers(ms("2025-12-25T00:00:00+00:00"), ms("2027-01-05T00:00:00+00:00")),
    calendar=st.sampled_from((LA, BERLIN, Calendar("Asia/Kolkata", 2), Calendar())),
    kind=st.sampled_from(
        (WindowKind.HOURLY, WindowKind.DAILY, WindowKind.WEEKLY, WindowKind.MONTHLY)
    ),
)
def test_windows_contain_their_time_and_round_trip(
    ts: int, calendar: Calendar, kind: WindowKind
) -> None:
    window = window_for(kind, ts, calendar)
    assert window.start_ms is not None and window.end_ms is not None
    assert window.start_ms <= ts < window.end_ms
    assert window_from_id(window.id, calendar) == window
    local = datetime.fromtimestamp(ts / 1000, tz=ZoneInfo(calendar.zone))
    if kind is WindowKind.DAILY:
        assert window.start_ms == local_midnight(local.date(), calendar.zone)
    if kind is WindowKind.MONTHLY:
        assert window.start_ms == local_midnight(local.date().replace(day=1), calendar.zone)
    if kind is WindowKind.WEEKLY:
        first = local.date() - timedelta(days=(local.weekday() - calendar.week_start) % 7)
        assert window.start_ms == local_midnight(first, calendar.zone)


def test_unknown_zone_and_weekday_are_one_line_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"reset_timezone.*Mars/Olympus"):
        GameCatalog.from_toml('[games."a"]\nreset_timezone = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match="week_start"):
        GameCatalog.from_toml('[games."a"]\nweek_start = "caturday"\n')
    with pytest.raises(EncodingError):
        Calendar("Nowhere/Nothing")


# --- seasons ------------------------------------------------------------------------------

SEASONS = """
[games."g"]
reset_timezone = "America/Los_Angeles"
windows = ["alltime", "daily"]
[games."g".seasons]
s3 = { start = 2026-06-01, end = 2026-09-01 }
s4 = { start = "2026-09-01T07:00:00Z", end = "2026-12-01T08:00:00Z" }
"""


def test_seasons_are_local_ranges_with_their_own_board() -> None:
    game = GameCatalog.from_toml(SEASONS).lookup("g")
    assert game is not None
    s3, s4 = game.seasons
    assert s3.start_ms == local_midnight(date(2026, 6, 1), "America/Los_Angeles")
    assert s3.end_ms == s4.start_ms  # 2026-09-01 00:00 PDT is 07:00Z
    inside = game.windows_at(s3.end_ms - 1)
    assert [w.id for w in inside] == ["daily:2026-08-31", "season:s3", "alltime"]
    assert [w.id for w in game.windows_at(s3.start_ms - 1)] == ["daily:2026-05-31", "alltime"]
    assert game.window("season:s4") == s4.window
    assert game.parse_window("season:s3", 0).end_ms == s3.end_ms
    assert game.expire_at_ms(s3.window) is None  # kept until archived, like all-time
    with pytest.raises(QueryError, match="s9"):
        game.window("season:s9")


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("s1 = { start = 2026-06-01, end = 2026-05-01 }", "must end after"),
        ('s1 = { start = "2026-06-01T00:07:00Z", end = 2026-07-01 }', "quarter hour"),
        ("s1 = { start = 2026-06-01 }", "start = ..., end = ..."),
        ('"bad name" = { start = 2026-06-01, end = 2026-07-01 }', "season name"),
        ('s1 = { start = "2026-06-01T00:00:00", end = 2026-07-01 }', "offset"),
    ],
)
def test_bad_seasons_are_refused(table: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        GameCatalog.from_toml(f'[games."g"]\n[games."g".seasons]\n{table}\n')


def test_a_season_too_long_for_max_score_is_refused() -> None:
    text = (
        '[games."g"]\nwindows = ["daily"]\ntie_resolution = "ms"\nmax_score = 100000000\n'
        '[games."g".seasons]\nlong = { start = 2026-01-01, end = 2027-01-01 }\n'
    )
    with pytest.raises(ConfigError, match="season 'long'"):
        GameCatalog.from_toml(text)


def test_only_nested_wider_boards_end_a_best_fold() -> None:
    game = GameConfig(
        windows=(WindowKind.DAILY, WindowKind.WEEKLY, WindowKind.MONTHLY, WindowKind.ALLTIME)
    )
    assert game.stops_after(WindowKind.DAILY)  # every later board contains the day
    assert not game.stops_after(WindowKind.WEEKLY)  # a week straddles two months
    assert game.stops_after(WindowKind.MONTHLY)


# --- lowest wins --------------------------------------------------------------------------


@given(
    score=st.integers(0, 1000),
    slot=st.integers(0, 59),
    other=st.integers(0, 1000),
    other_slot=st.integers(0, 59),
)
def test_asc_composites_rank_lower_scores_and_earlier_slots_higher(
    score: int, slot: int, other: int, other_slot: int
) -> None:
    codec = TieCodec(0, 60_000, TieResolution.S, ascending=True, ceiling=1000)
    a, b = codec.compose(score, slot), codec.compose(other, other_slot)
    assert codec.split(a) == (score, slot)
    assert (a > b) == ((score, slot) < (other, other_slot))


@given(
    events=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), min_size=1, max_size=12),
    op=st.sampled_from(tuple(Operator)),
)
def test_asc_fold_matches_the_plain_rules(events: list[tuple[int, int]], op: Operator) -> None:
    """The packed asc fold equals the operator rules on real (score, slot) pairs."""
    cap, slots = 50, 10
    codec = TieCodec(0, 10, TieResolution.MS, ascending=True, ceiling=cap)
    current: int | None = None
    truth: tuple[int, int] | None = None
    for score, slot in events:
        current = apply_composite_asc(op, current, score, slot, slots, cap)
        if truth is None:
            truth = (score, slot)
        elif op is Operator.BEST:
            truth = min(truth, (score, slot))
        elif op is Operator.INCR:
            truth = (min(truth[0] + score, cap), max(truth[1], slot))
        elif slot >= truth[1]:
            truth = (score, slot)
    assert current is not None and codec.split(current) == truth
    # The descending fold is untouched by the asc one.
    assert apply_composite(Operator.BEST, None, 3, 0, slots, cap) == 3 * slots + 9


def test_asc_order_in_the_catalog() -> None:
    game = GameCatalog.from_toml('[games."race"]\norder = "asc"\nmax_score = 600000\n').lookup(
        "race"
    )
    assert game is not None and game.order is Order.ASC and game.ascending
    codec = game.codec(window_for(WindowKind.ALLTIME, 0))
    assert codec.split(codec.encode(61_234, ms("2026-05-04T10:00:00+00:00")))[0] == 61_234
    with pytest.raises(ConfigError, match="order"):
        GameCatalog.from_toml('[games."race"]\norder = "up"\n')
    with pytest.raises(ConfigError, match="14271045"):  # the same bound as a descending board
        GameCatalog.from_toml('[games."race"]\norder = "asc"\nmax_score = 20000000\n')


def test_the_validator_memo_never_serves_a_window_that_misses_the_event() -> None:
    """Quarter-hour memo buckets, checked at DST edges and at a historic LMT offset."""
    from domain.validation import _GameRules

    game = GameConfig(
        windows=(WindowKind.HOURLY, WindowKind.DAILY, WindowKind.MONTHLY),
        calendar=Calendar("Europe/Amsterdam"),
    )
    rules = _GameRules(game)
    moments = [ms("2026-03-29T00:59:59.999+00:00"), ms("2026-03-29T01:00:00+00:00")]
    moments += [ms("1900-01-01T00:00:00+00:00") + i * 300_000 for i in range(-12, 12)]
    for ts in moments + list(reversed(moments)):
        windows, _ = rules.windows_of(ts)
        for window in windows:
            assert window.start_ms is not None and window.end_ms is not None
            assert window.start_ms <= ts < window.end_ms, (ts, window)
