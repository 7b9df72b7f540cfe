"""Leaderboard windows: which board an event belongs to, by its own timestamp.

Windows are computed from event time with integer arithmetic only, never the
wall clock, so a replay of the same log lands every event on the same boards.
Days are UTC calendar days; weeks are ISO weeks (Monday 00:00 UTC), named by
their ISO year, so the days around New Year fall in the week the ISO calendar
says (2027-01-01 is in ``2026-W53``, 2024-12-30 in ``2025-W01``).

All times are epoch milliseconds, UTC. Window ids are the last part of the
Redis key (``lb:{game}:weekly:2026-W18``), so their spelling is a contract.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from domain.errors import EncodingError, QueryError

__all__ = [
    "DAY_MS",
    "WEEK_MS",
    "Window",
    "WindowKind",
    "parse_window",
    "window_for",
    "window_from_id",
    "windows_for",
]

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS

# date.toordinal() of 1970-01-01: converts between proleptic ordinals and epoch days.
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
# 1970-01-01 was a Thursday, so Mondays are the epoch days congruent to 4 (mod 7).
_MONDAY_OFFSET = 3

_DAILY_ID = re.compile(r"daily:([0-9]{4})-([0-9]{2})-([0-9]{2})")
_WEEKLY_ID = re.compile(r"weekly:([0-9]{4})-W([0-9]{2})")
_FORMS = (
    "'alltime', 'daily', 'weekly' (the current window), "
    "'daily:YYYY-MM-DD' or 'weekly:YYYY-Www' (ISO week)"
)


class WindowKind(enum.StrEnum):
    """The kinds of board one event can update."""

    ALLTIME = "alltime"
    WEEKLY = "weekly"
    DAILY = "daily"


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


def window_for(kind: WindowKind, ts_ms: int) -> Window:
    """The window of ``kind`` that contains ``ts_ms`` (epoch ms, UTC).

    Floor division keeps negative (pre-1970) timestamps in the right day and
    week. Raises :class:`EncodingError` only for timestamps outside the years
    1..9999, whose ids could not be spelled.
    """
    if kind is WindowKind.ALLTIME:
        return _ALLTIME
    day = ts_ms // DAY_MS
    if kind is WindowKind.DAILY:
        return _daily(day)
    if kind is WindowKind.WEEKLY:
        return _weekly(day - (day + _MONDAY_OFFSET) % 7)
    raise ValueError(f"unknown window kind {kind!r}")  # pragma: no cover - exhaustive


def windows_for(kinds: Iterable[WindowKind], ts_ms: int) -> tuple[Window, ...]:
    """Every window of ``kinds`` containing ``ts_ms``, in the order of ``kinds``."""
    return tuple(window_for(kind, ts_ms) for kind in kinds)


def window_from_id(window_id: str) -> Window:
    """The window named by an explicit id: ``alltime``, ``daily:…`` or ``weekly:…``.

    Used to turn a reader's request or a stored key back into bounds; raises
    :class:`QueryError` for anything that is not a real day or ISO week.
    """
    if window_id == WindowKind.ALLTIME.value:
        return _ALLTIME
    if match := _DAILY_ID.fullmatch(window_id):
        year, month, day = (int(part) for part in match.groups())
        try:
            date = dt.date(year, month, day)
        except ValueError as exc:
            raise QueryError(f"window {window_id!r}: not a real date ({exc})") from exc
        return _daily(_epoch_day_of(date))
    if match := _WEEKLY_ID.fullmatch(window_id):
        year, week = int(match.group(1)), int(match.group(2))
        if year < 1:
            raise QueryError(f"window {window_id!r}: year must be 0001..9999")
        # Dec 28 is always in the last ISO week of its year.
        weeks = dt.date(year, 12, 28).isocalendar().week
        if not 1 <= week <= weeks:
            raise QueryError(f"window {window_id!r}: ISO year {year} has weeks W01..W{weeks:02d}")
        return _weekly(_epoch_day_of(dt.date.fromisocalendar(year, week, 1)))
    raise QueryError(f"unknown window {window_id!r}; expected {_FORMS}")


def parse_window(spec: str, now_ms: int) -> Window:
    """A reader's window argument: a kind (the window containing ``now_ms``) or an id.

    ``now_ms`` is passed in rather than read so that "the current weekly board"
    is testable and answers the same way wherever the caller's clock comes from.
    """
    for kind in (WindowKind.DAILY, WindowKind.WEEKLY):
        if spec == kind.value:
            try:
                return window_for(kind, now_ms)
            except EncodingError as exc:
                raise QueryError(f"window {spec!r} at {now_ms} ms: {exc}") from exc
    return window_from_id(spec)
