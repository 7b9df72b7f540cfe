"""The ``LB_GAMES`` TOML tables -> :class:`~domain.games.GameConfig` values.

One table (``[default]`` or ``[games."<id>"]``) is laid over a base
configuration by :func:`layer`: every key is parsed and checked on its own
(an unknown key, a wrong type or range is one message naming the key), then
the calendar keys that depend on each other (time zone, week start, seasons,
tournaments). The reference of every key is ``docs/GAMES.md``.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from domain.errors import ConfigError, EncodingError
from domain.game_checks import SEASON_NAME
from domain.games import GameConfig, Operator, Order, Season, Tournament, utc_ms
from domain.scoring import TieResolution
from domain.teams import TeamAggregate
from domain.windows import (
    LISTED_KINDS,
    Calendar,
    WindowKind,
    local_midnight_ms,
    weekday_of,
    zone_of,
)

#: The keys of one tournament's table.
_TOURNAMENT_KEYS = ("start", "end", "max_entries", "max_attempts")


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _enum_parser(enum_type: type[enum.StrEnum]) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        allowed = ", ".join(repr(member.value) for member in enum_type)
        if not isinstance(value, str) or value not in enum_type._value2member_map_:
            raise ValueError(f"expected one of {allowed}, got {value!r}")
        return enum_type(value)

    return parse


def _windows(value: Any) -> tuple[WindowKind, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a non-empty list of window kinds, got {value!r}")
    allowed = ", ".join(repr(kind.value) for kind in LISTED_KINDS)
    for item in value:
        if item not in LISTED_KINDS:
            raise ValueError(
                f"expected one of {allowed}, got {item!r} (seasons have their own table)"
            )
    kinds = tuple(WindowKind(item) for item in value)
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"lists a window twice: {value!r}")
    return kinds


def _date_ms(value: Any) -> int:
    if isinstance(value, str):
        try:
            value = dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f'expected an ISO date like "2020-01-01", got {value!r}') from None
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        raise ValueError(f'expected an ISO date like "2020-01-01", got {value!r}')
    return utc_ms(value.year, value.month, value.day)


def _seconds_to_ms(parse: Callable[[Any], int]) -> Callable[[Any], int]:
    return lambda value: parse(value) * 1000


# TOML key -> (GameConfig field, parser of the raw TOML value).
_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "operator": ("operator", _enum_parser(Operator)),
    "max_score": ("max_score", _positive_int),
    "tie_resolution": ("tie_resolution", _enum_parser(TieResolution)),
    "windows": ("windows", _windows),
    "shards": ("shards", _positive_int),
    "exact_tier": ("exact_tier", _positive_int),
    "lateness_seconds": ("lateness_ms", _seconds_to_ms(_non_negative_int)),
    "future_skew_seconds": ("future_skew_ms", _seconds_to_ms(_non_negative_int)),
    "daily_retention_seconds": ("daily_retention_s", _positive_int),
    "weekly_retention_seconds": ("weekly_retention_s", _positive_int),
    "alltime_origin": ("alltime_origin_ms", _date_ms),
    "alltime_until": ("alltime_until_ms", _date_ms),
    "order": ("order", _enum_parser(Order)),
    "hourly_retention_seconds": ("hourly_retention_s", _positive_int),
    "monthly_retention_seconds": ("monthly_retention_s", _positive_int),
    "metadata_max_bytes": ("metadata_max_bytes", _non_negative_int),
    "dense_ranks": ("dense_ranks", _bool),
    "teams": ("teams", _enum_parser(TeamAggregate)),
}
#: Keys parsed after the others because they depend on each other or on the zone.
_CALENDAR_KEYS = ("reset_timezone", "week_start", "seasons", "tournaments")


def _zone(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f'expected an IANA time zone like "America/Los_Angeles", got {value!r}')
    try:
        zone_of(value)
    except EncodingError as exc:
        raise ValueError(str(exc)) from None
    return value


def _weekday(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError(f'expected a weekday like "sunday", got {value!r}')
    try:
        return weekday_of(value)
    except EncodingError as exc:
        raise ValueError(str(exc)) from None


def _instant_ms(value: Any, calendar: Calendar) -> int:
    """A season bound: a date (local midnight in the game's zone) or an offset datetime."""
    if isinstance(value, str):
        try:
            parse = dt.date.fromisoformat if len(value) == 10 else dt.datetime.fromisoformat
            value = parse(value)
        except ValueError:
            raise ValueError(
                f"expected a date or a datetime with an offset, got {value!r}"
            ) from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError(
                f"a datetime needs a UTC offset (e.g. 2026-06-01T00:00:00Z), got {value}"
            )
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return local_midnight_ms(value, calendar.tz)
    raise ValueError(f"expected a date or a datetime with an offset, got {value!r}")


def _seasons(value: Any, calendar: Calendar) -> tuple[Season, ...]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a table of name = {{start = ..., end = ...}}, got {value!r}")
    out = []
    for name, bounds in value.items():
        if not SEASON_NAME.fullmatch(name):
            raise ValueError(f"season name {name!r}: allowed A-Z a-z 0-9 . _ - (1 to 32)")
        if not isinstance(bounds, dict) or set(bounds) != {"start", "end"}:
            raise ValueError(
                f"season {name!r}: expected {{start = ..., end = ...}}, got {bounds!r}"
            )
        try:
            start = _instant_ms(bounds["start"], calendar)
            end = _instant_ms(bounds["end"], calendar)
        except ValueError as exc:
            raise ValueError(f"season {name!r}: {exc}") from None
        out.append(Season(name, start, end))
    return tuple(out)


def _optional_count(table: dict[str, Any], key: str) -> int | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
    return value


def _tournaments(value: Any, calendar: Calendar) -> tuple[Tournament, ...]:
    if not isinstance(value, dict):
        raise ValueError(
            f"expected a table of name = {{start = ..., end = ..., max_entries = ..., "
            f"max_attempts = ...}}, got {value!r}"
        )
    out = []
    for name, table in value.items():
        if not SEASON_NAME.fullmatch(name):
            raise ValueError(f"tournament name {name!r}: allowed A-Z a-z 0-9 . _ - (1 to 32)")
        if not isinstance(table, dict):
            raise ValueError(f"tournament {name!r}: expected a table, got {table!r}")
        unknown = sorted(set(table) - set(_TOURNAMENT_KEYS))
        if unknown:
            raise ValueError(
                f"tournament {name!r}: unknown key {unknown[0]!r} "
                f"(known keys: {', '.join(_TOURNAMENT_KEYS)})"
            )
        missing = [key for key in ("start", "end") if key not in table]
        if missing:
            raise ValueError(f"tournament {name!r}: {missing[0]} is required")
        try:
            start = _instant_ms(table["start"], calendar)
            end = _instant_ms(table["end"], calendar)
            entries = _optional_count(table, "max_entries")
            attempts = _optional_count(table, "max_attempts")
        except ValueError as exc:
            raise ValueError(f"tournament {name!r}: {exc}") from None
        out.append(Tournament(name, start, end, entries, attempts))
    return tuple(out)


def layer(base: GameConfig, table: Any, source: str, where: str) -> GameConfig:
    """``base`` with the keys of one TOML table applied; unknown keys are refused."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: {where} must be a table, got {table!r}")
    changes: dict[str, Any] = {}
    for key, raw in table.items():
        if key in _CALENDAR_KEYS:
            continue
        if key not in _KEYS:
            known = ", ".join(sorted([*_KEYS, *_CALENDAR_KEYS]))
            raise ConfigError(f"{source}: {where} unknown key {key!r} (known keys: {known})")
        field, parse = _KEYS[key]
        try:
            changes[field] = parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {where} {key}: {exc}") from exc
    key = "reset_timezone"
    try:
        zone = _zone(table["reset_timezone"]) if "reset_timezone" in table else base.calendar.zone
        key = "week_start"
        week_start = (
            _weekday(table["week_start"]) if "week_start" in table else base.calendar.week_start
        )
        calendar = Calendar(zone, week_start)
        if calendar != base.calendar:
            changes["calendar"] = calendar
        key = "seasons"
        if "seasons" in table:
            changes["seasons"] = _seasons(table["seasons"], calendar)
        key = "tournaments"
        if "tournaments" in table:
            changes["tournaments"] = _tournaments(table["tournaments"], calendar)
    except ValueError as exc:
        raise ConfigError(f"{source}: {where} {key}: {exc}") from exc
    return replace(base, **changes)
