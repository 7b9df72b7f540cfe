"""Per-game board configuration and the catalog read from ``LB_GAMES``.

A game's bounds decide whether its composite scores stay exact in a double,
so every configuration is checked when the catalog is built, before the job
touches Kafka or Redis: a game that cannot fit is refused at start-up with a
message saying what would fit, instead of corrupting ranks later.

The TOML reference (every key, its default and how to choose it) is
``docs/GAMES.md``.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from domain.errors import ConfigError, EncodingError, QueryError
from domain.scoring import TieCodec, TieResolution
from domain.windows import (
    CONTAINED_IN,
    DAY_MS,
    HOUR_MS,
    LISTED_KINDS,
    NARROW_FIRST,
    UTC_CALENDAR,
    WEEK_MS,
    Calendar,
    Window,
    WindowKind,
    local_midnight_ms,
    parse_window,
    weekday_of,
    window_for,
    window_from_id,
    zone_of,
)

__all__ = [
    "GameCatalog",
    "GameConfig",
    "Operator",
    "Order",
    "Season",
    "Tournament",
    "valid_game_id",
]

_GAME_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SEASON_NAME = re.compile(r"[A-Za-z0-9._-]{1,32}")
#: The keys of one tournament's table.
_TOURNAMENT_KEYS = ("start", "end", "max_entries", "max_attempts")
#: Every real UTC offset and DST transition is on a quarter hour; seasons must be
#: too, so the validator can memoise a game's windows per quarter hour of event time.
QUARTER_HOUR_MS = 900_000


def _utc_ms(year: int, month: int, day: int) -> int:
    return int(dt.datetime(year, month, day, tzinfo=dt.UTC).timestamp()) * 1000


class Order(enum.StrEnum):
    """Which end of the board wins: ``desc`` (highest score first) or ``asc`` (lowest)."""

    DESC = "desc"
    ASC = "asc"


@dataclass(frozen=True, slots=True)
class Season:
    """A named, configured event-time range with its own board (``season:<name>``)."""

    name: str
    start_ms: int
    end_ms: int

    @property
    def window(self) -> Window:
        return Window(WindowKind.SEASON, f"season:{self.name}", self.start_ms, self.end_ms)


@dataclass(frozen=True, slots=True)
class Tournament:
    """A named event-time range with its own board (``tournament:<name>``) and optional caps.

    ``max_entries`` caps how many players get on the board and ``max_attempts``
    how many of one player's events count (Nakama's ``max_size`` and
    ``max_num_score``); ``None`` leaves it uncapped. Which players take the
    seats is decided per source partition, so a replay decides the same
    way whatever order the partitions are read in (:meth:`seats`).
    """

    name: str
    start_ms: int
    end_ms: int
    max_entries: int | None = None
    max_attempts: int | None = None

    @property
    def window(self) -> Window:
        return Window(WindowKind.TOURNAMENT, f"tournament:{self.name}", self.start_ms, self.end_ms)

    def seats(self, cell: int, cells: int) -> int | None:
        """How many players one *cell* may admit (``None``: no ``max_entries``).

        A cell is one source partition of one board group (cell
        ``partition * shards + shard`` of ``partitions * shards``): only the
        worker that owns the partition writes its players, so counting per
        cell, atomically with the watermark, is deterministic under replay,
        where "the first N players of the whole topic" is not (partitions
        interleave differently on every run). The seats are split evenly; the
        first ``max_entries % cells`` cells get one more.
        """
        if self.max_entries is None:
            return None
        share, extra = divmod(self.max_entries, max(1, cells))
        return share + (1 if cell < extra else 0)


class Operator(enum.StrEnum):
    """How a new score combines with the player's current board value."""

    BEST = "best"
    INCR = "incr"
    SET = "set"


def valid_game_id(s: str) -> bool:
    """Whether ``s`` can name a game.

    Game ids go inside Redis hash tags (``lb:{<game>}:…``) and key names, so
    only characters that cannot close a tag or split a key are allowed.
    """
    return _GAME_ID.fullmatch(s) is not None


@dataclass(frozen=True)
class GameConfig:
    """The board rules of one game. Defaults are the built-in game.

    Durations are milliseconds except the retentions, which are seconds
    because they become Redis expiry offsets.
    """

    operator: Operator = Operator.BEST
    max_score: int = 10_000_000
    tie_resolution: TieResolution = TieResolution.S
    windows: tuple[WindowKind, ...] = (WindowKind.ALLTIME, WindowKind.WEEKLY, WindowKind.DAILY)
    shards: int = 1
    exact_tier: int = 1_000_000
    lateness_ms: int = 3_600_000
    """Grace after a windowed board closes during which late events still update it."""
    future_skew_ms: int = 300_000
    daily_retention_s: int = 172_800
    """How long a closed daily board's key lives after the day ends."""
    weekly_retention_s: int = 1_209_600
    alltime_origin_ms: int = _utc_ms(2020, 1, 1)
    alltime_until_ms: int = _utc_ms(2040, 1, 1)
    """Exclusive end of the all-time tie-break range; later events cannot be encoded."""
    order: Order = Order.DESC
    calendar: Calendar = UTC_CALENDAR
    """The time zone and first weekday the hourly..monthly boards reset in."""
    hourly_retention_s: int = 172_800
    monthly_retention_s: int = 5_356_800
    """62 days: a closed month stays readable for two more months."""
    seasons: tuple[Season, ...] = ()
    tournaments: tuple[Tournament, ...] = ()

    @property
    def ascending(self) -> bool:
        """Whether the lowest score wins (``order = "asc"``)."""
        return self.order is Order.ASC

    def codec(self, window: Window) -> TieCodec:
        """The composite encoding of ``window``'s board.

        A windowed board only needs slots for its own period, which is why daily
        boards can hold far larger scores than the all-time board at the same
        resolution. An ascending game's boards store ``max_score - score``.
        """
        if window.start_ms is None or window.end_ms is None:
            origin, end = self.alltime_origin_ms, self.alltime_until_ms
        else:
            origin, end = window.start_ms, window.end_ms
        return TieCodec(
            origin, end - origin, self.tie_resolution, self.order is Order.ASC, self.max_score
        )

    def keeps(self, kind: WindowKind) -> bool:
        """Whether this game has boards of ``kind`` (seasons, tournaments: when configured)."""
        if kind is WindowKind.SEASON:
            return bool(self.seasons)
        if kind is WindowKind.TOURNAMENT:
            return bool(self.tournaments)
        return kind in self.windows

    def kept_kinds(self) -> tuple[WindowKind, ...]:
        """The kinds of board the game keeps, seasons and tournaments included, for messages."""
        return (
            self.windows
            + ((WindowKind.SEASON,) if self.seasons else ())
            + ((WindowKind.TOURNAMENT,) if self.tournaments else ())
        )

    def windows_at(self, ts_ms: int) -> tuple[Window, ...]:
        """Every board an event at ``ts_ms`` updates, narrowest first.

        Seasons and tournaments are included while ``ts_ms`` lies in them;
        tournaments come first, so the planner counts every attempt before a
        ``best`` fold may stop early. Raises :class:`EncodingError` for a time
        no window id can name.
        """
        kinds = sorted(self.windows, key=NARROW_FIRST.__getitem__)
        out = [window_for(kind, ts_ms, self.calendar) for kind in kinds if kind in LISTED_KINDS]
        seasons = [s.window for s in self.seasons if s.start_ms <= ts_ms < s.end_ms]
        if seasons:
            at = next((i for i, w in enumerate(out) if w.kind is WindowKind.ALLTIME), len(out))
            out[at:at] = seasons
        if self.tournaments:
            out[0:0] = [t.window for t in self.tournaments if t.start_ms <= ts_ms < t.end_ms]
        return tuple(out)

    def stops_after(self, kind: WindowKind) -> bool:
        """Whether an unchanged ``best`` on a board of ``kind`` leaves every wider one unchanged.

        True when every board listed after ``kind`` (narrowest first) always
        contains its window: a wider board's best is then never below this one's.
        Weekly and monthly boards overlap without nesting, and seasons nest in
        nothing but all-time, so those games keep folding past them. A
        tournament nests in nothing (and counts attempts), so never.
        """
        later = [k for k in self.kept_kinds() if NARROW_FIRST[k] > NARROW_FIRST[kind]]
        return all(k in CONTAINED_IN[kind] for k in later) and (
            kind is not WindowKind.SEASON or len(self.seasons) == 1 or not later
        )

    def window(self, window_id: str) -> Window:
        """The window an explicit id names in this game's calendar and seasons.

        :class:`QueryError` for an id that is malformed, unknown, or of a kind the
        game does not keep.
        """
        if window_id.startswith("season:"):
            name = window_id.removeprefix("season:")
            for season in self.seasons:
                if season.name == name:
                    return season.window
            known = ", ".join(s.name for s in self.seasons) or "none"
            raise QueryError(f"unknown season {name!r} (seasons: {known})")
        if window_id.startswith("tournament:"):
            return self.tournament(window_id.removeprefix("tournament:")).window
        return window_from_id(window_id, self.calendar)

    def tournament(self, name: str) -> Tournament:
        """The configured tournament ``name``; :class:`QueryError` when there is none."""
        for tournament in self.tournaments:
            if tournament.name == name:
                return tournament
        known = ", ".join(t.name for t in self.tournaments) or "none"
        raise QueryError(f"unknown tournament {name!r} (tournaments: {known})")

    def parse_window(self, spec: str, now_ms: int) -> Window:
        """A reader's window argument: a kind, an id, ``season:<name>`` or ``tournament:<name>``."""
        if spec.startswith(("season:", "tournament:")):
            return self.window(spec)
        return parse_window(spec, now_ms, self.calendar)

    def expire_at_ms(self, window: Window) -> int | None:
        """When a window's key may be dropped (``None``: never: all-time, seasons, tournaments)."""
        if window.end_ms is None or window.kind in (WindowKind.SEASON, WindowKind.TOURNAMENT):
            return None
        retention_s = {
            WindowKind.HOURLY: self.hourly_retention_s,
            WindowKind.DAILY: self.daily_retention_s,
            WindowKind.MONTHLY: self.monthly_retention_s,
        }.get(window.kind, self.weekly_retention_s)
        return window.end_ms + retention_s * 1000

    def is_late(self, window: Window, record_ts_ms: int) -> bool:
        """Whether a record (by its Kafka timestamp) arrives after the board's grace.

        Judged on the record timestamp, not the wall clock, so a replay decides
        every record the same way. The all-time board never closes.
        """
        if window.end_ms is None:
            return False
        return record_ts_ms > window.end_ms + self.lateness_ms

    def validate(self, name: str) -> None:
        """Refuse a configuration that cannot be served exactly; ``name`` is for messages."""
        for key in (
            "max_score",
            "shards",
            "exact_tier",
            "hourly_retention_s",
            "daily_retention_s",
            "weekly_retention_s",
            "monthly_retention_s",
        ):
            value = getattr(self, key)
            if value <= 0:
                raise ConfigError(f"game {name!r}: {key} must be positive, got {value}")
        for key in ("lateness_ms", "future_skew_ms"):
            value = getattr(self, key)
            if value < 0:
                raise ConfigError(f"game {name!r}: {key} must be >= 0, got {value}")
        if not self.windows:
            raise ConfigError(f"game {name!r}: windows must name at least one window")
        if len(set(self.windows)) != len(self.windows):
            raise ConfigError(f"game {name!r}: windows lists a window twice: {self.windows}")
        if self.alltime_until_ms <= self.alltime_origin_ms:
            raise ConfigError(f"game {name!r}: alltime_until must be after alltime_origin")
        # A late write after the key expired would recreate the board with only
        # the late players in it, so the key must outlive the grace period.
        for kind, retention_s in (
            (WindowKind.HOURLY, self.hourly_retention_s),
            (WindowKind.DAILY, self.daily_retention_s),
            (WindowKind.WEEKLY, self.weekly_retention_s),
            (WindowKind.MONTHLY, self.monthly_retention_s),
        ):
            if kind in self.windows and retention_s * 1000 < self.lateness_ms:
                raise ConfigError(
                    f"game {name!r}: {kind.value} retention ({retention_s} s) is shorter "
                    f"than the lateness grace ({self.lateness_ms // 1000} s); late events "
                    f"would recreate an expired board"
                )
        for kind in self.windows:
            fits = self.codec(_representative(kind, self.calendar)).max_score
            if self.max_score > fits:
                raise ConfigError(_bound_message(name, kind, self, fits))
        names = [season.name for season in self.seasons]
        if len(set(names)) != len(names):
            raise ConfigError(f"game {name!r}: a season is named twice: {names}")
        for season in self.seasons:
            self._check_range(name, f"season {season.name!r}", season.window)
        self._validate_tournaments(name, set(names))

    def _check_range(self, game: str, what: str, window: Window) -> None:
        """Refuse a season's or tournament's range that cannot be served (``what`` names it).

        It must end after it starts, on quarter hours, and ``max_score`` must fit its board.
        """
        assert window.start_ms is not None and window.end_ms is not None
        if window.end_ms <= window.start_ms:
            raise ConfigError(f"game {game!r}: {what} must end after it starts")
        if window.start_ms % QUARTER_HOUR_MS or window.end_ms % QUARTER_HOUR_MS:
            raise ConfigError(f"game {game!r}: {what} must start and end on a quarter hour")
        fits = self.codec(window).max_score
        if self.max_score > fits:
            raise ConfigError(
                f"game {game!r}: max_score {self.max_score} does not fit {what} "
                f"exactly at tie_resolution {self.tie_resolution.value!r}; the largest "
                f"max_score that fits is {fits}; shorten the {window.kind.value} or use "
                f"a coarser tie_resolution"
            )

    def _validate_tournaments(self, name: str, seasons: set[str]) -> None:
        names = [tournament.name for tournament in self.tournaments]
        if len(set(names)) != len(names):
            raise ConfigError(f"game {name!r}: a tournament is named twice: {names}")
        for t in self.tournaments:
            what = f"tournament {t.name!r}"
            if not _SEASON_NAME.fullmatch(t.name):
                raise ConfigError(f"game {name!r}: {what}: name allows A-Z a-z 0-9 . _ - (1 to 32)")
            if t.name in seasons:
                raise ConfigError(f"game {name!r}: {what}: a season has the same name")
            for key in ("max_entries", "max_attempts"):
                value = getattr(t, key)
                if value is not None and (isinstance(value, bool) or value < 1):
                    raise ConfigError(
                        f"game {name!r}: {what}: {key} must be at least 1, got {value}"
                    )
            self._check_range(name, what, t.window)


#: The longest a local period can be: one daylight-saving shift (at most an hour,
#: two for safety) longer than its nominal length.
_DST_MARGIN_MS = 2 * HOUR_MS


def _representative(kind: WindowKind, calendar: Calendar = UTC_CALENDAR) -> Window:
    """A window of ``kind`` as long as the longest one (UTC has no DST, zones may)."""
    margin = 0 if calendar.zone == "UTC" else _DST_MARGIN_MS
    if kind is WindowKind.HOURLY:
        return Window(kind, "hourly", 0, HOUR_MS + margin)
    if kind is WindowKind.DAILY:
        return Window(kind, "daily:1970-01-01", 0, DAY_MS + margin)
    if kind is WindowKind.WEEKLY:
        return Window(kind, "weekly:1970-W01", -3 * DAY_MS, -3 * DAY_MS + WEEK_MS + margin)
    if kind is WindowKind.MONTHLY:
        return Window(kind, "monthly", 0, 31 * DAY_MS + margin)
    return Window(kind, "alltime", None, None)


_COARSER = {
    TieResolution.MS: (TieResolution.S, TieResolution.MIN, TieResolution.NONE),
    TieResolution.S: (TieResolution.MIN, TieResolution.NONE),
    TieResolution.MIN: (TieResolution.NONE,),
    TieResolution.NONE: (),
}


def _bound_message(name: str, kind: WindowKind, config: GameConfig, fits: int) -> str:
    res = config.tie_resolution
    message = (
        f"game {name!r}: max_score {config.max_score} does not fit the {kind.value} board "
        f"exactly at tie_resolution {res.value!r}; the largest max_score that fits is {fits}"
    )
    span_ms = config.codec(_representative(kind, config.calendar)).span_ms
    hints = []
    for coarser in _COARSER[res]:
        room = TieCodec(0, span_ms, coarser).max_score
        if room >= config.max_score:
            hints.append(f"{coarser.value!r} (fits up to {room})")
    if hints:
        message += "; or use a coarser tie_resolution: " + ", ".join(hints)
    elif kind is WindowKind.ALLTIME and res is not TieResolution.NONE:
        message += "; or shorten alltime_origin..alltime_until"
    return message


# --- the TOML catalog -------------------------------------------------------------------


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
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
    return _utc_ms(value.year, value.month, value.day)


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
        if not _SEASON_NAME.fullmatch(name):
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
        if not _SEASON_NAME.fullmatch(name):
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


def _layer(base: GameConfig, table: Any, source: str, where: str) -> GameConfig:
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


class GameCatalog:
    """Which games exist and with what rules.

    ``lookup`` answers ``None`` for a game the catalog does not serve; the
    caller dead-letters its events as ``UNKNOWN_GAME``. Every configuration is
    validated when the catalog is built.
    """

    def __init__(self, games: Mapping[str, GameConfig], default: GameConfig | None) -> None:
        for game_id, config in games.items():
            if not valid_game_id(game_id):
                raise ConfigError(f"invalid game id {game_id!r}: allowed [A-Za-z0-9._-]{{1,64}}")
            config.validate(game_id)
        if default is not None:
            default.validate("[default]")
        self._games = dict(games)
        self._default = default

    @classmethod
    def builtin(cls) -> GameCatalog:
        """The catalog without ``LB_GAMES``: every game takes the built-in defaults."""
        return cls({}, GameConfig())

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> GameCatalog:
        """Parse a catalog; ``source`` names the file in error messages."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
        unknown = sorted(set(doc) - {"default", "games"})
        if unknown:
            raise ConfigError(
                f"{source}: unknown top-level key(s) {unknown}; "
                f'expected [default] and [games."<gameId>"] tables'
            )
        default: GameConfig | None = None
        if "default" in doc:
            default = _layer(GameConfig(), doc["default"], source, "[default]")
            _checked(default, "[default]", source, "[default]")
        base = default if default is not None else GameConfig()
        games_table = doc.get("games", {})
        if not isinstance(games_table, dict):
            raise ConfigError(f'{source}: games must hold [games."<gameId>"] tables')
        games: dict[str, GameConfig] = {}
        for game_id, table in games_table.items():
            where = f"[games.{_quoted(game_id)}]"
            if not valid_game_id(game_id):
                raise ConfigError(
                    f"{source}: {where} invalid game id {game_id!r}: "
                    f"allowed characters are A-Z a-z 0-9 . _ - (1 to 64 of them)"
                )
            games[game_id] = _layer(base, table, source, where)
            _checked(games[game_id], game_id, source, where)
        return cls(games, default)

    @classmethod
    def load(cls, path: Path) -> GameCatalog:
        """Read and parse the catalog file named by ``LB_GAMES``."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read game catalog: {exc}") from exc
        return cls.from_toml(text, source=str(path))

    def lookup(self, game_id: str) -> GameConfig | None:
        """The rules of ``game_id``; ``None`` if it is not served (or not a valid id)."""
        config = self._games.get(game_id)
        if config is not None:
            return config
        if self._default is None or not valid_game_id(game_id):
            return None
        return self._default

    @property
    def default(self) -> GameConfig | None:
        """The ``[default]`` rules of every other valid game id (``None``: they are refused)."""
        return self._default

    def games(self) -> Mapping[str, GameConfig]:
        """The explicitly configured games (not those served by ``[default]``)."""
        return MappingProxyType(self._games)


def _quoted(game_id: str) -> str:
    escaped = game_id.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _checked(config: GameConfig, name: str, source: str, where: str) -> None:
    """Validate one parsed table, naming the file and table in the message."""
    try:
        config.validate(name)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from exc
