"""Leaderboard windows: which board an event belongs to, by its own timestamp.

Windows are computed from event time only, never the wall clock, so a replay
of the same log lands every event on the same boards. By default days are UTC
calendar days and weeks are ISO weeks (Monday 00:00 UTC), named by their ISO
year, so the days around New Year fall in the week the ISO calendar says
(2027-01-01 is in ``2026-W53``, 2024-12-30 in ``2025-W01``); that path is pure
integer arithmetic.

A game may instead reset in its own time zone (:class:`Calendar`: an IANA zone
and the first day of its week). Then hours, days, weeks and months are the
local ones, computed with :mod:`zoneinfo`, so a day that loses or gains an
hour to daylight saving is 23 or 25 hours long and still starts at local
midnight. Hourly ids carry their UTC offset (``hourly:2026-11-01T01-0700``),
because the hour 01:00 happens twice on the night clocks fall back.

All times are epoch milliseconds, UTC. Window ids are the last part of the
Redis key (``lb:{game}:weekly:2026-W18``), so their spelling is a contract.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field

from domain.errors import EncodingError, QueryError

__all__ = [
    "DAY_MS",
    "HOUR_MS",
    "UTC_CALENDAR",
    "WEEK_MS",
    "Calendar",
    "Window",
    "WindowKind",
    "parse_window",
    "window_for",
    "window_from_id",
    "windows_for",
]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS

# date.toordinal() of 1970-01-01: converts between proleptic ordinals and epoch days.
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
# 1970-01-01 was a Thursday, so Mondays are the epoch days congruent to 4 (mod 7).
_MONDAY_OFFSET = 3

_DAILY_ID = re.compile(r"daily:([0-9]{4})-([0-9]{2})-([0-9]{2})")
_WEEKLY_ID = re.compile(r"weekly:([0-9]{4})-W([0-9]{2})")
_WEEKLY_DATE_ID = re.compile(r"weekly:([0-9]{4})-([0-9]{2})-([0-9]{2})")
_HOURLY_ID = re.compile(
    r"hourly:([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2})([+-])([0-9]{2})([0-9]{2})"
)
_MONTHLY_ID = re.compile(r"monthly:([0-9]{4})-([0-9]{2})")
_FORMS = (
    "'alltime', 'hourly', 'daily', 'weekly', 'monthly' (the current window), "
    "'hourly:YYYY-MM-DDTHH+hhmm', 'daily:YYYY-MM-DD', 'weekly:YYYY-Www' (ISO week; "
    "'weekly:YYYY-MM-DD' for weeks not starting on Monday), 'monthly:YYYY-MM', "
    "'season:NAME' or 'tournament:NAME' (a season or tournament of the game in LB_GAMES)"
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class WindowKind(enum.StrEnum):
    """The kinds of board one event can update."""

    ALLTIME = "alltime"
    WEEKLY = "weekly"
    DAILY = "daily"
    HOURLY = "hourly"
    MONTHLY = "monthly"
    SEASON = "season"
    """A named, configured range (``season:s3``); never listed in ``windows``."""
    TOURNAMENT = "tournament"
    """A named, configured range with entry and attempt caps (``tournament:cup``)."""


#: The kinds a game's ``windows`` list may name (seasons come from their own table).
LISTED_KINDS = (
    WindowKind.ALLTIME,
    WindowKind.WEEKLY,
    WindowKind.DAILY,
    WindowKind.HOURLY,
    WindowKind.MONTHLY,
)

#: Which kinds always contain a window of the key kind (same calendar): used to
#: know when "this board did not change" implies "no wider board changes".
CONTAINED_IN: dict[WindowKind, frozenset[WindowKind]] = {
    WindowKind.HOURLY: frozenset(
        {WindowKind.DAILY, WindowKind.WEEKLY, WindowKind.MONTHLY, WindowKind.ALLTIME}
    ),
    WindowKind.DAILY: frozenset({WindowKind.WEEKLY, WindowKind.MONTHLY, WindowKind.ALLTIME}),
    WindowKind.WEEKLY: frozenset({WindowKind.ALLTIME}),
    WindowKind.MONTHLY: frozenset({WindowKind.ALLTIME}),
    WindowKind.SEASON: frozenset({WindowKind.ALLTIME}),
    WindowKind.TOURNAMENT: frozenset(),
    WindowKind.ALLTIME: frozenset(),
}

#: Narrowest first: the order a record's windows are listed in. Tournaments come
#: before everything: a capped board must see every attempt, so no "cannot improve"
#: shortcut of a ``best`` fold may skip it (``domain.planner``).
NARROW_FIRST: dict[WindowKind, int] = {
    WindowKind.TOURNAMENT: -1,
    WindowKind.HOURLY: 0,
    WindowKind.DAILY: 1,
    WindowKind.WEEKLY: 2,
    WindowKind.MONTHLY: 3,
    WindowKind.SEASON: 4,
    WindowKind.ALLTIME: 5,
}


@dataclass(frozen=True, slots=True)
class Calendar:
    """Where a game's periods reset: an IANA time zone and the first weekday.

    ``week_start`` is 0 for Monday .. 6 for Sunday. The default (UTC, Monday)
    is the historic behaviour and keeps its integer-only fast path.
    """

    zone: str = "UTC"
    week_start: int = 0
    _tz: dt.tzinfo = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not 0 <= self.week_start <= 6:
            raise EncodingError(f"week_start must be 0..6, got {self.week_start}")
        object.__setattr__(self, "_tz", zone_of(self.zone))

    @property
    def is_utc(self) -> bool:
        """Whether this is the default calendar (the integer-only path)."""
        return self.zone == "UTC" and self.week_start == 0

    @property
    def tz(self) -> dt.tzinfo:
        return self._tz

    @property
    def week_start_name(self) -> str:
        return _WEEKDAYS[self.week_start]


@functools.cache
def zone_of(name: str) -> dt.tzinfo:
    """The tzinfo of an IANA name; :class:`EncodingError` for an unknown one."""
    if name == "UTC":
        return dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise EncodingError(f"unknown time zone {name!r} (expected an IANA name)") from exc


def weekday_of(name: str) -> int:
    """0 for ``"monday"`` .. 6 for ``"sunday"``; :class:`EncodingError` otherwise."""
    try:
        return _WEEKDAYS.index(name.lower())
    except ValueError:
        raise EncodingError(f"unknown week_start {name!r}; expected one of {_WEEKDAYS}") from None


UTC_CALENDAR = Calendar()


@dataclass(frozen=True, slots=True)
class Window:
    """One concrete board period.

    ``end_ms`` is exclusive. Both bounds are ``None`` for the all-time board,
    which never closes (its tie-break range comes from the game config).
    """

    kind: WindowKind
    id: str
    start_ms: int | None
    end_ms: int | None


_ALLTIME = Window(WindowKind.ALLTIME, "alltime", None, None)


def _date_of_epoch_day(day: int) -> dt.date:
    """The calendar date of an epoch day; refuses days ``datetime`` cannot name."""
    ordinal = _EPOCH_ORDINAL + day
    if not dt.date.min.toordinal() <= ordinal <= dt.date.max.toordinal():
        raise EncodingError(f"epoch day {day} is outside the years 1..9999")
    return dt.date.fromordinal(ordinal)


def _epoch_day_of(date: dt.date) -> int:
    return date.toordinal() - _EPOCH_ORDINAL


def _daily(day: int) -> Window:
    date = _date_of_epoch_day(day)
    start = day * DAY_MS
    return Window(WindowKind.DAILY, f"daily:{date.isoformat()}", start, start + DAY_MS)


def _weekly(monday: int) -> Window:
    # The ISO year of a week is the ISO year of its Monday (and of every other day).
    iso = _date_of_epoch_day(monday).isocalendar()
    start = monday * DAY_MS
    return Window(
        WindowKind.WEEKLY,
        f"weekly:{iso.year:04d}-W{iso.week:02d}",
        start,
        start + WEEK_MS,
    )


def window_for(kind: WindowKind, ts_ms: int, calendar: Calendar = UTC_CALENDAR) -> Window:
    """The window of ``kind`` that contains ``ts_ms`` (epoch ms), in ``calendar``.

    On the UTC calendar floor division keeps negative (pre-1970) timestamps in
    the right day and week. Raises :class:`EncodingError` only for timestamps
    outside the years 1..9999, whose ids could not be spelled.
    """
    if kind is WindowKind.ALLTIME:
        return _ALLTIME
    if kind in (WindowKind.SEASON, WindowKind.TOURNAMENT):
        raise ValueError(f"{kind.value} windows come from the game's {kind.value}s table")
    if calendar.is_utc:
        day = ts_ms // DAY_MS
        if kind is WindowKind.DAILY:
            return _daily(day)
        if kind is WindowKind.WEEKLY:
            return _weekly(day - (day + _MONDAY_OFFSET) % 7)
    return _local_window(kind, ts_ms, calendar)


def windows_for(
    kinds: Iterable[WindowKind], ts_ms: int, calendar: Calendar = UTC_CALENDAR
) -> tuple[Window, ...]:
    """Every window of ``kinds`` containing ``ts_ms``, in the order of ``kinds``."""
    return tuple(window_for(kind, ts_ms, calendar) for kind in kinds)


# --- local (zoned) calendars -------------------------------------------------------------


def _instant(ts_ms: int, tz: dt.tzinfo) -> dt.datetime:
    try:
        return dt.datetime.fromtimestamp(ts_ms // 1000, tz=dt.UTC).astimezone(tz)
    except (OverflowError, OSError, ValueError) as exc:
        raise EncodingError(f"time {ts_ms} ms is outside the years 1..9999") from exc


def _ms(moment: dt.datetime) -> int:
    """Epoch ms of an aware datetime (whole seconds: every boundary is on one)."""
    return int(moment.timestamp()) * 1000


def local_midnight_ms(date: dt.date, tz: dt.tzinfo) -> int:
    """The instant a local date starts.

    ``fold=0`` picks the first of two instants for a midnight a fall-back
    repeats; for a midnight a spring-forward skips (zones that move at 00:00)
    it gives the pre-transition offset, i.e. exactly the transition instant,
    the first moment of that day the clocks show.
    """
    return _ms(dt.datetime(date.year, date.month, date.day, tzinfo=tz))


def _offset_text(offset: dt.timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{sign}{minutes // 60:02d}{minutes % 60:02d}"


def _hourly(local: dt.datetime) -> Window:
    """The clock hour of an aware local time, at the UTC offset in effect."""
    offset = local.utcoffset() or dt.timedelta(0)
    start = local.replace(minute=0, second=0, microsecond=0)
    start_ms = _ms(start.replace(tzinfo=dt.timezone(offset)))
    wid = f"hourly:{start:%Y-%m-%dT%H}{_offset_text(offset)}"
    return Window(WindowKind.HOURLY, wid, start_ms, start_ms + HOUR_MS)


def _local_daily(date: dt.date, tz: dt.tzinfo) -> Window:
    start = local_midnight_ms(date, tz)
    end = local_midnight_ms(date + dt.timedelta(days=1), tz)
    return Window(WindowKind.DAILY, f"daily:{date.isoformat()}", start, end)


def _local_weekly(first: dt.date, calendar: Calendar) -> Window:
    tz = calendar.tz
    if calendar.week_start == 0:
        iso = first.isocalendar()
        wid = f"weekly:{iso.year:04d}-W{iso.week:02d}"
    else:
        wid = f"weekly:{first.isoformat()}"
    start = local_midnight_ms(first, tz)
    end = local_midnight_ms(first + dt.timedelta(days=7), tz)
    return Window(WindowKind.WEEKLY, wid, start, end)


def _local_monthly(year: int, month: int, tz: dt.tzinfo) -> Window:
    first = dt.date(year, month, 1)
    following = dt.date(year + month // 12, month % 12 + 1, 1)
    start = local_midnight_ms(first, tz)
    end = local_midnight_ms(following, tz)
    return Window(WindowKind.MONTHLY, f"monthly:{year:04d}-{month:02d}", start, end)


def _local_window(kind: WindowKind, ts_ms: int, calendar: Calendar) -> Window:
    local = _instant(ts_ms, calendar.tz)
    date = local.date()
    try:
        if kind is WindowKind.HOURLY:
            return _hourly(local)
        if kind is WindowKind.DAILY:
            return _local_daily(date, calendar.tz)
        if kind is WindowKind.WEEKLY:
            first = date - dt.timedelta(days=(date.weekday() - calendar.week_start) % 7)
            return _local_weekly(first, calendar)
        if kind is WindowKind.MONTHLY:
            return _local_monthly(date.year, date.month, calendar.tz)
    except (OverflowError, ValueError) as exc:
        raise EncodingError(f"time {ts_ms} ms has no {kind.value} window: {exc}") from exc
    raise ValueError(f"unknown window kind {kind!r}")  # pragma: no cover - exhaustive


def window_from_id(window_id: str, calendar: Calendar = UTC_CALENDAR) -> Window:
    """The window named by an explicit id (``alltime``, ``daily:…``, ``hourly:…`` ...).

    Used to turn a reader's request or a stored key back into bounds; raises
    :class:`QueryError` for anything that is not a real period of ``calendar``.
    Season and tournament ids need the game's tables (``GameConfig.window``).
    """
    if window_id == WindowKind.ALLTIME.value:
        return _ALLTIME
    try:
        return _from_id(window_id, calendar)
    except (ValueError, OverflowError, EncodingError) as exc:
        raise QueryError(f"window {window_id!r}: not a real period ({exc})") from exc


def _from_id(window_id: str, calendar: Calendar) -> Window:
    tz = calendar.tz
    if match := _DAILY_ID.fullmatch(window_id):
        date = dt.date(*(int(part) for part in match.groups()))
        if calendar.is_utc:
            return _daily(_epoch_day_of(date))
        return _local_daily(date, tz)
    if calendar.week_start == 0 and (match := _WEEKLY_ID.fullmatch(window_id)):
        year, week = int(match.group(1)), int(match.group(2))
        if year < 1:
            raise QueryError(f"window {window_id!r}: year must be 0001..9999")
        # Dec 28 is always in the last ISO week of its year.
        weeks = dt.date(year, 12, 28).isocalendar().week
        if not 1 <= week <= weeks:
            raise QueryError(f"window {window_id!r}: ISO year {year} has weeks W01..W{weeks:02d}")
        monday = dt.date.fromisocalendar(year, week, 1)
        if calendar.is_utc:
            return _weekly(_epoch_day_of(monday))
        return _local_weekly(monday, calendar)
    if calendar.week_start != 0 and (match := _WEEKLY_DATE_ID.fullmatch(window_id)):
        first = dt.date(*(int(part) for part in match.groups()))
        if first.weekday() != calendar.week_start:
            raise QueryError(
                f"window {window_id!r}: weeks of this game start on {calendar.week_start_name}"
            )
        return _local_weekly(first, calendar)
    if match := _MONTHLY_ID.fullmatch(window_id):
        year, month = int(match.group(1)), int(match.group(2))
        if year < 1:
            raise QueryError(f"window {window_id!r}: year must be 0001..9999")
        return _local_monthly(year, month, tz)
    if match := _HOURLY_ID.fullmatch(window_id):
        parts = match.groups()
        y, mo, d, h, oh, om = (int(parts[i]) for i in (0, 1, 2, 3, 5, 6))
        offset = dt.timedelta(hours=oh, minutes=om) * (1 if parts[4] == "+" else -1)
        start = dt.datetime(y, mo, d, h, tzinfo=dt.timezone(offset))
        window = _hourly(_instant(_ms(start), tz))
        if window.id != window_id:  # not an hour this zone's clocks ever showed
            raise QueryError(f"window {window_id!r}: no such hour in {calendar.zone}")
        return window
    raise QueryError(f"unknown window {window_id!r}; expected {_FORMS}")


def parse_window(spec: str, now_ms: int, calendar: Calendar = UTC_CALENDAR) -> Window:
    """A reader's window argument: a kind (the window containing ``now_ms``) or an id.

    ``now_ms`` is passed in rather than read so that "the current weekly board"
    is testable and answers the same way wherever the caller's clock comes from.
    """
    for kind in (WindowKind.HOURLY, WindowKind.DAILY, WindowKind.WEEKLY, WindowKind.MONTHLY):
        if spec == kind.value:
            try:
                return window_for(kind, now_ms, calendar)
            except EncodingError as exc:
                raise QueryError(f"window {spec!r} at {now_ms} ms: {exc}") from exc
    return window_from_id(spec, calendar)
