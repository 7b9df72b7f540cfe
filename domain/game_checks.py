"""Whether a game's rules can be served exactly: the checks behind ``GameConfig.validate``.

A game's bounds decide whether its composite scores stay exact in a double
(``domain.scoring.TieCodec``), so every configuration is checked when the
catalog is built: a game that cannot fit is refused at start-up with a message
saying what would fit (a coarser tie resolution, a shorter range).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from domain.errors import ConfigError
from domain.scoring import TieCodec, TieResolution
from domain.teams import check_team_rules
from domain.windows import DAY_MS, HOUR_MS, UTC_CALENDAR, WEEK_MS, Calendar, Window, WindowKind

if TYPE_CHECKING:
    from domain.games import GameConfig

#: Every real UTC offset and DST transition is on a quarter hour; seasons must be
#: too, so the validator can memoise a game's windows per quarter hour of event time.
QUARTER_HOUR_MS = 900_000
#: A season's or tournament's name.
SEASON_NAME = re.compile(r"[A-Za-z0-9._-]{1,32}")


def check_config(config: GameConfig, name: str) -> None:
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
        value = getattr(config, key)
        if value <= 0:
            raise ConfigError(f"game {name!r}: {key} must be positive, got {value}")
    for key in ("lateness_ms", "future_skew_ms", "metadata_max_bytes"):
        value = getattr(config, key)
        if value < 0:
            raise ConfigError(f"game {name!r}: {key} must be >= 0, got {value}")
    if not config.windows:
        raise ConfigError(f"game {name!r}: windows must name at least one window")
    if len(set(config.windows)) != len(config.windows):
        raise ConfigError(f"game {name!r}: windows lists a window twice: {config.windows}")
    if config.alltime_until_ms <= config.alltime_origin_ms:
        raise ConfigError(f"game {name!r}: alltime_until must be after alltime_origin")
    # A late write after the key expired would recreate the board with only
    # the late players in it, so the key must outlive the grace period.
    for kind, retention_s in (
        (WindowKind.HOURLY, config.hourly_retention_s),
        (WindowKind.DAILY, config.daily_retention_s),
        (WindowKind.WEEKLY, config.weekly_retention_s),
        (WindowKind.MONTHLY, config.monthly_retention_s),
    ):
        if kind in config.windows and retention_s * 1000 < config.lateness_ms:
            raise ConfigError(
                f"game {name!r}: {kind.value} retention ({retention_s} s) is shorter "
                f"than the lateness grace ({config.lateness_ms // 1000} s); late events "
                f"would recreate an expired board"
            )
    for kind in config.windows:
        fits = config.codec(_representative(kind, config.calendar)).max_score
        if config.max_score > fits:
            raise ConfigError(_bound_message(name, kind, config, fits))
    names = [season.name for season in config.seasons]
    if len(set(names)) != len(names):
        raise ConfigError(f"game {name!r}: a season is named twice: {names}")
    for season in config.seasons:
        _check_range(config, name, f"season {season.name!r}", season.window)
    _check_tournaments(config, name, set(names))
    check_team_rules(name, config.teams, config.shards, config.ascending)


def _check_range(config: GameConfig, game: str, what: str, window: Window) -> None:
    """Refuse a season's or tournament's range that cannot be served (``what`` names it).

    It must end after it starts, on quarter hours, and ``max_score`` must fit its board.
    """
    assert window.start_ms is not None and window.end_ms is not None
    if window.end_ms <= window.start_ms:
        raise ConfigError(f"game {game!r}: {what} must end after it starts")
    if window.start_ms % QUARTER_HOUR_MS or window.end_ms % QUARTER_HOUR_MS:
        raise ConfigError(f"game {game!r}: {what} must start and end on a quarter hour")
    fits = config.codec(window).max_score
    if config.max_score > fits:
        raise ConfigError(
            f"game {game!r}: max_score {config.max_score} does not fit {what} "
            f"exactly at tie_resolution {config.tie_resolution.value!r}; the largest "
            f"max_score that fits is {fits}; shorten the {window.kind.value} or use "
            f"a coarser tie_resolution"
        )


def _check_tournaments(config: GameConfig, name: str, seasons: set[str]) -> None:
    names = [tournament.name for tournament in config.tournaments]
    if len(set(names)) != len(names):
        raise ConfigError(f"game {name!r}: a tournament is named twice: {names}")
    for t in config.tournaments:
        what = f"tournament {t.name!r}"
        if not SEASON_NAME.fullmatch(t.name):
            raise ConfigError(f"game {name!r}: {what}: name allows A-Z a-z 0-9 . _ - (1 to 32)")
        if t.name in seasons:
            raise ConfigError(f"game {name!r}: {what}: a season has the same name")
        for key in ("max_entries", "max_attempts"):
            value = getattr(t, key)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ConfigError(f"game {name!r}: {what}: {key} must be at least 1, got {value}")
        _check_range(config, name, what, t.window)


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
