from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import EncodingError, QueryError
from domain.windows import (
    Window,
    WindowKind,
    parse_window,
    window_for,
    window_from_id,
    windows_for,
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ONE_MS = dt.timedelta(milliseconds=1)
# The whole range the ids can spell (years 0001..9999), in epoch ms.
MIN_TS = (dt.datetime(1, 1, 1, tzinfo=dt.UTC) - EPOCH) // ONE_MS
MAX_TS = (dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC) - EPOCH) // ONE_MS


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, millis: int = 0) -> int:
    moment = dt.datetime(year, month, day, hour, minute, tzinfo=dt.UTC)
    return (moment - EPOCH) // ONE_MS + millis


def oracle(kind: WindowKind, ts_ms: int) -> Window:
    """Independent reading via datetime arithmetic and date.isocalendar()."""
    if kind is WindowKind.ALLTIME:
        return Window(kind, "alltime", None, None)
    date = (EPOCH + ts_ms * ONE_MS).date()
    if kind is WindowKind.DAILY:
        start = dt.datetime.combine(date, dt.time(), tzinfo=dt.UTC)
        start_ms = (start - EPOCH) // ONE_MS
        return Window(kind, f"daily:{date.isoformat()}", start_ms, start_ms + 86_400_000)
    iso = date.isocalendar()
    monday = date - dt.timedelta(days=iso.weekday - 1)
    start_ms = (dt.datetime.combine(monday, dt.time(), tzinfo=dt.UTC) - EPOCH) // ONE_MS
    return Window(kind, f"weekly:{iso.year:04d}-W{iso.week:02d}", start_ms, start_ms + 604_800_000)


@pytest.mark.parametrize(
    ("ts", "daily", "weekly"),
    [
        (ms(2020, 12, 31, 23, 59, 59_999), "daily:2020-12-31", "weekly:2020-W53"),
        (ms(2021, 1, 1), "daily:2021-01-01", "weekly:2020-W53"),
        (ms(2021, 1, 3, 23, 59, 59_999), "daily:2021-01-03", "weekly:2020-W53"),
        (ms(2021, 1, 4), "daily:2021-01-04", "weekly:2021-W01"),
        (ms(2024, 12, 29, 23, 59, 59_999), "daily:2024-12-29", "weekly:2024-W52"),
        (ms(2024, 12, 30), "daily:2024-12-30", "weekly:2025-W01"),
        (ms(2026, 5, 4, 12), "daily:2026-05-04", "weekly:2026-W19"),
        (ms(2026, 5, 3, 23, 59, 59_999), "daily:2026-05-03", "weekly:2026-W18"),
        (ms(2026, 12, 28), "daily:2026-12-28", "weekly:2026-W53"),
        (ms(2026, 12, 31, 18), "daily:2026-12-31", "weekly:2026-W53"),
        (ms(2027, 1, 1), "daily:2027-01-01", "weekly:2026-W53"),
        (ms(2027, 1, 3, 23, 59, 59_999), "daily:2027-01-03", "weekly:2026-W53"),
        (ms(2027, 1, 4), "daily:2027-01-04", "weekly:2027-W01"),
        (ms(2024, 2, 29, 13), "daily:2024-02-29", "weekly:2024-W09"),
        (0, "daily:1970-01-01", "weekly:1970-W01"),
        (-1, "daily:1969-12-31", "weekly:1970-W01"),
        (ms(1969, 12, 29), "daily:1969-12-29", "weekly:1970-W01"),
        (ms(1969, 12, 28, 23, 59, 59_999), "daily:1969-12-28", "weekly:1969-W52"),
        (ms(1900, 2, 28, 5), "daily:1900-02-28", "weekly:1900-W09"),
        (MIN_TS, "daily:0001-01-01", "weekly:0001-W01"),
        (MAX_TS, "daily:9999-12-31", "weekly:9999-W52"),
    ],
)
def test_window_ids_at_boundaries(ts: int, daily: str, weekly: str) -> None:
    assert window_for(WindowKind.DAILY, ts).id == daily
    assert window_for(WindowKind.WEEKLY, ts).id == weekly
    for kind in (WindowKind.ALLTIME, WindowKind.WEEKLY, WindowKind.DAILY):
        assert window_for(kind, ts) == oracle(kind, ts)


def test_known_bounds() -> None:
    week = window_for(WindowKind.WEEKLY, ms(2026, 5, 1, 9))
    assert week == Window(WindowKind.WEEKLY, "weekly:2026-W18", ms(2026, 4, 27), ms(2026, 5, 4))
    day = window_for(WindowKind.DAILY, -1)
    assert day == Window(WindowKind.DAILY, "daily:1969-12-31", -86_400_000, 0)
    assert window_for(WindowKind.ALLTIME, 123) == Window(WindowKind.ALLTIME, "alltime", None, None)


@given(st.integers(MIN_TS, MAX_TS))
def test_windows_match_oracle_and_contain_ts(ts: int) -> None:
    for kind in (WindowKind.DAILY, WindowKind.WEEKLY):
        window = window_for(kind, ts)
        assert window == oracle(kind, ts)
        assert window.start_ms is not None and window.end_ms is not None
        assert window.start_ms <= ts < window.end_ms
        assert window_from_id(window.id) == window


@given(st.integers(MIN_TS, MAX_TS - 604_800_000))
def test_adjacent_windows_tile_time(ts: int) -> None:
    for kind in (WindowKind.DAILY, WindowKind.WEEKLY):
        window = window_for(kind, ts)
        assert window.end_ms is not None
        following = window_for(kind, window.end_ms)
        assert following.start_ms == window.end_ms
        assert following.id > window.id  # ids sort chronologically


@pytest.mark.parametrize("ts", [MIN_TS - 1, MAX_TS + 1, -(10**18), 10**18])
def test_unspellable_days_are_refused(ts: int) -> None:
    with pytest.raises(EncodingError):
        window_for(WindowKind.DAILY, ts)
    assert window_for(WindowKind.ALLTIME, ts).id == "alltime"


def test_unspellable_weeks_are_refused() -> None:
    # 10000-01-01 is a Saturday: still in 9999-W52, whose Monday is a real date.
    assert window_for(WindowKind.WEEKLY, MAX_TS + 1).id == "weekly:9999-W52"
    last_monday_ms = ms(9999, 12, 27)
    for ts in (last_monday_ms + 604_800_000, MIN_TS - 1, -(10**18), 10**18):
        with pytest.raises(EncodingError):
            window_for(WindowKind.WEEKLY, ts)


def test_windows_for_keeps_order() -> None:
    ts = ms(2026, 5, 4, 10)
    kinds = (WindowKind.DAILY, WindowKind.ALLTIME, WindowKind.WEEKLY)
    assert [w.id for w in windows_for(kinds, ts)] == [
        "daily:2026-05-04",
        "alltime",
        "weekly:2026-W19",
    ]
    assert windows_for(iter([WindowKind.WEEKLY]), ts)[0].id == "weekly:2026-W19"
    assert windows_for((), ts) == ()


def test_parse_window_relative_uses_now() -> None:
    now = ms(2027, 1, 2, 8)
    assert parse_window("daily", now).id == "daily:2027-01-02"
    assert parse_window("weekly", now).id == "weekly:2026-W53"
    assert parse_window("alltime", now).id == "alltime"
    assert parse_window("daily:2026-05-04", now) == window_for(WindowKind.DAILY, ms(2026, 5, 4))
    assert parse_window("weekly:2026-W18", now).start_ms == ms(2026, 4, 27)


@pytest.mark.parametrize(
    ("spec", "start"),
    [
        ("daily:2024-02-29", ms(2024, 2, 29)),
        ("weekly:2020-W53", ms(2020, 12, 28)),
        ("weekly:2026-W53", ms(2026, 12, 28)),
        ("weekly:2025-W01", ms(2024, 12, 30)),
        ("weekly:2015-W53", ms(2015, 12, 28)),
        ("weekly:0001-W01", ms(1, 1, 1)),
    ],
)
def test_window_from_id_valid(spec: str, start: int) -> None:
    window = window_from_id(spec)
    assert window.id == spec
    assert window.start_ms == start


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "Alltime",
        " alltime",
        "yearly",
        "daily:",
        "daily:2026-5-4",
        "daily:2026-02-29",
        "daily:2026-13-01",
        "daily:2026-04-31",
        "daily:0000-01-01",
        "daily:\uff12\uff10\uff12\uff16-05-04",  # fullwidth digits
        "daily:2026-05-04 ",
        "weekly:2026-18",
        "weekly:2026-W00",
        "weekly:2025-W53",
        "weekly:2026-W54",
        "weekly:2026-W1",
        "weekly:0000-W01",
        "weekly:2026-w18",
        "monthly:2026-13",
    ],
)
def test_bad_window_specs_are_query_errors(spec: str) -> None:
    with pytest.raises(QueryError):
        parse_window(spec, 0)
    if spec not in ("daily", "weekly"):
        with pytest.raises(QueryError):
            window_from_id(spec)


def test_window_from_id_refuses_relative_forms() -> None:
    with pytest.raises(QueryError, match=r"weekly:YYYY-Www"):
        window_from_id("weekly")
    with pytest.raises(QueryError, match=r"W01\.\.W52"):
        window_from_id("weekly:2025-W53")


def test_parse_window_relative_out_of_range_is_query_error() -> None:
    with pytest.raises(QueryError):
        parse_window("daily", 10**18)
