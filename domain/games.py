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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from domain.errors import ConfigError, QueryError
from domain.game_checks import check_config
from domain.scoring import TieCodec, TieResolution
from domain.teams import TeamAggregate
from domain.windows import (
    CONTAINED_IN,
    LISTED_KINDS,
    NARROW_FIRST,
    UTC_CALENDAR,
    Calendar,
    Window,
    WindowKind,
    parse_window,
    window_for,
    window_from_id,
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


def utc_ms(year: int, month: int, day: int) -> int:
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
    alltime_origin_ms: int = utc_ms(2020, 1, 1)
    alltime_until_ms: int = utc_ms(2040, 1, 1)
    """Exclusive end of the all-time tie-break range; later events cannot be encoded."""
    order: Order = Order.DESC
    calendar: Calendar = UTC_CALENDAR
    """The time zone and first weekday the hourly..monthly boards reset in."""
    hourly_retention_s: int = 172_800
    monthly_retention_s: int = 5_356_800
    """62 days: a closed month stays readable for two more months."""
    seasons: tuple[Season, ...] = ()
    tournaments: tuple[Tournament, ...] = ()
    metadata_max_bytes: int = 512
    """Longest metadata (schema v2) an event may carry, in UTF-8 bytes; 0: none at all.

    Longer is dead-lettered ``METADATA_TOO_LARGE``. At 0 the readers also skip
    looking for entries' metadata, which saves a read per answer."""
    dense_ranks: bool = False
    """Keep distinct-score counts with every board, so reads can give dense ranks."""
    teams: TeamAggregate | None = None
    """Team boards' aggregate of the members' scores (``None``: no team boards)."""

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
        check_config(self, name)


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
            if default.teams is not None:
                raise ConfigError(
                    '[default]: teams is set per game, in [games."<gameId>"]: membership '
                    "records are applied to the games named there"
                )
        self._games = dict(games)
        self._default = default

    def team_games(self) -> dict[str, GameConfig]:
        """The games with team boards (only named games can have them), by id."""
        return {g: config for g, config in self._games.items() if config.teams is not None}

    @classmethod
    def builtin(cls) -> GameCatalog:
        """The catalog without ``LB_GAMES``: every game takes the built-in defaults."""
        return cls({}, GameConfig())

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> GameCatalog:
        """Parse a catalog; ``source`` names the file in error messages."""
        from domain.game_tables import layer  # builds GameConfig values: imports this module

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
            default = layer(GameConfig(), doc["default"], source, "[default]")
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
            games[game_id] = layer(base, table, source, where)
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
