"""Property tests of the board planner against an independent oracle.

The system under test is the whole write path of the Redis sink, minus Redis:
``BoardPlanner`` (lookups -> read -> remember_registries -> plan -> commit)
driving :class:`tests.unit.boardmodel.BoardModel`, a dictionary model of the
Redis data with the semantics of the ``APPLY_GROUP`` Lua script.

The oracle shares no code with the planner: plain dictionaries, its own
composite formula ``score * slots + (slots - 1 - slot)`` (``max_score - score``
in place of the score on a lowest-wins board), its own windows from
``datetime.isocalendar`` and ``zoneinfo`` local midnights (games that reset in
Los Angeles on Sundays or in Berlin, across both 2026 daylight-saving changes),
its own seasons, its own tournament rules (seats split per source partition and
shard, attempts per player; docs/GAMES.md) and its own key spelling from the
documented layout. Domain helpers (``GameConfig.windows_at``) are used only to
build the planner's input.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig, Operator, Order, Season, Tournament
from domain.planner import BoardPlanner, pieces
from domain.planner.dedupe import SeenLayout
from domain.records import Accepted, CheckedBatch
from domain.scoring import TieResolution
from domain.windows import Calendar, WindowKind, window_for
from tests.unit.boardmodel import BoardModel, project, write_batch

NS = "t"
TOPIC = "score-events"
HORIZON_MS = 1_000
PARTITIONS = (0, 1, 2)
PLAYERS = ("p0", "p1", "p2", "p3", "p4")
GAME_IDS = ("ga", "gb", "gc")
BIG_CACHE = 1_000_000

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000


def _ms(*parts: int) -> int:
    return (datetime(*parts, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)  # type: ignore[misc]


ORIGIN_MS = _ms(2020, 1, 1)
UNTIL_MS = _ms(2040, 1, 1)

#: Event times around day, ISO-week and ISO-year boundaries, and inside one second/minute.
MOMENTS = (
    ORIGIN_MS,
    _ms(2026, 12, 27, 23, 59, 59) + 999,  # Sunday, last ms of 2026-W52
    _ms(2026, 12, 28),  # Monday 00:00, 2026-W53
    _ms(2026, 12, 28) + 400,
    _ms(2026, 12, 28) + 999,
    _ms(2026, 12, 28, 0, 0, 1),
    _ms(2026, 12, 28, 0, 0, 59),
    _ms(2026, 12, 31, 23, 59, 59) + 999,
    _ms(2027, 1, 1),  # still 2026-W53
    _ms(2027, 1, 3, 23, 59, 59) + 999,
    _ms(2027, 1, 4),  # 2027-W01
    _ms(2027, 1, 4, 12),
    UNTIL_MS - 1,
    # Los Angeles springs forward at 2026-03-08 10:00Z and falls back at 2026-11-01 09:00Z
    # (01:00 happens twice: 08:00Z PDT and 09:00Z PST); Berlin at 03-29 01:00Z, 10-25 01:00Z.
    _ms(2026, 3, 8, 9, 59, 59) + 999,
    _ms(2026, 3, 8, 10),
    _ms(2026, 3, 9, 6, 59, 59) + 999,  # the last ms of the 23-hour day
    _ms(2026, 3, 9, 7),
    _ms(2026, 11, 1, 8, 30),
    _ms(2026, 11, 1, 9, 30),
    _ms(2026, 11, 2, 7, 59, 59) + 999,  # the last ms of the 25-hour day
    _ms(2026, 11, 2, 8),
    _ms(2026, 3, 28, 22, 59, 59) + 999,
    _ms(2026, 3, 29, 1),
    _ms(2026, 10, 25, 0, 59, 59) + 999,
    _ms(2026, 10, 25, 1),
    _ms(2026, 10, 31, 23),  # the end of October in Berlin and Los Angeles
    _ms(2026, 11, 1, 7),
)

#: The calendars games draw: (zone, week_start 0=Monday .. 6=Sunday).
CALENDARS = (("UTC", 0), ("America/Los_Angeles", 6), ("Europe/Berlin", 0), ("UTC", 3))
#: Seasons games draw from: ISO bounds read independently of the catalog.
SEASONS = (
    ("s1", "2026-10-25T00:00:00+00:00", "2026-11-02T08:00:00+00:00"),
    ("s2", "2026-12-28T00:00:00+00:00", "2027-01-04T00:00:00+00:00"),
    ("s3", "2026-03-08T09:45:00+00:00", "2026-03-08T10:15:00+00:00"),
)
#: Tournaments games draw from (bounds as above), each with drawn caps.
TOURNAMENTS = (
    ("t1", "2026-10-31T20:00:00+00:00", "2026-11-02T08:00:00+00:00"),
    ("t2", "2026-12-27T12:00:00+00:00", "2027-01-04T06:15:00+00:00"),
)


# --- the oracle --------------------------------------------------------------------------

_UNIT_MS = {"ms": 1, "s": 1_000, "min": 60_000, "none": None}


def _utc(ts_ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ts_ms)


def _epoch_ms(day: date) -> int:
    return (datetime(day.year, day.month, day.day, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class OracleWindow:
    id: str
    start_ms: int
    span_ms: int
    expire_at_s: int | None


def _midnight_ms(day: date, zone: str) -> int:
    local = datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(zone))
    return (local.astimezone(UTC) - EPOCH) // timedelta(milliseconds=1)


def _zoned_window(kind: str, ts_ms: int, game: GameConfig) -> OracleWindow:
    """Hourly, daily, weekly and monthly boards of a local calendar (midnight to midnight)."""
    zone, first = game.calendar.zone, game.calendar.week_start
    local = _utc(ts_ms).astimezone(ZoneInfo(zone))
    day = local.date()
    if kind == "hourly":
        offset = local.utcoffset() or timedelta(0)
        minutes = int(offset.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        start_local = local.replace(minute=0, second=0, microsecond=0, tzinfo=timezone(offset))
        start = (start_local - EPOCH) // timedelta(milliseconds=1)
        hh, mm = divmod(abs(minutes), 60)
        name = f"{day.isoformat()}T{local.hour:02d}{sign}{hh:02d}{mm:02d}"
        end, retention, wid = start + 3_600_000, game.hourly_retention_s, f"hourly:{name}"
    elif kind == "daily":
        start, end = _midnight_ms(day, zone), _midnight_ms(day + timedelta(days=1), zone)
        retention, wid = game.daily_retention_s, f"daily:{day.isoformat()}"
    elif kind == "weekly":
        first_day = day - timedelta(days=(day.weekday() - first) % 7)
        start = _midnight_ms(first_day, zone)
        end = _midnight_ms(first_day + timedelta(days=7), zone)
        iso = first_day.isocalendar()
        name = f"{iso.year:04d}-W{iso.week:02d}" if first == 0 else first_day.isoformat()
        retention, wid = game.weekly_retention_s, f"weekly:{name}"
    else:
        first_day = day.replace(day=1)
        following = (first_day + timedelta(days=32)).replace(day=1)
        start, end = _midnight_ms(first_day, zone), _midnight_ms(following, zone)
        retention, wid = game.monthly_retention_s, f"monthly:{day:%Y-%m}"
    return OracleWindow(wid, start, end - start, end // 1000 + retention)


def oracle_window(kind: WindowKind, ts_ms: int, game: GameConfig) -> OracleWindow:
    """The board of ``kind`` holding ``ts_ms``, from the calendar alone."""
    if kind.value == "alltime":
        return OracleWindow(
            "alltime", game.alltime_origin_ms, game.alltime_until_ms - game.alltime_origin_ms, None
        )
    if kind.value in ("hourly", "monthly") or (game.calendar.zone, game.calendar.week_start) != (
        "UTC",
        0,
    ):
        return _zoned_window(kind.value, ts_ms, game)
    day = _utc(ts_ms).date()
    if kind.value == "daily":
        start = _epoch_ms(day)
        return OracleWindow(
            f"daily:{day.isoformat()}",
            start,
            DAY_MS,
            (start + DAY_MS) // 1000 + game.daily_retention_s,
        )
    iso = day.isocalendar()
    start = _epoch_ms(day - timedelta(days=iso.weekday - 1))
    return OracleWindow(
        f"weekly:{iso.year:04d}-W{iso.week:02d}",
        start,
        7 * DAY_MS,
        (start + 7 * DAY_MS) // 1000 + game.weekly_retention_s,
    )


def oracle_slots(game: GameConfig, window: OracleWindow) -> int:
    unit = _UNIT_MS[game.tie_resolution.value]
    return 1 if unit is None else -(-window.span_ms // unit)


def oracle_slot(game: GameConfig, window: OracleWindow, ts_ms: int) -> int:
    unit = _UNIT_MS[game.tie_resolution.value]
    return 0 if unit is None else (ts_ms - window.start_ms) // unit


def oracle_tag(game_id: str, game: GameConfig, player: str) -> str:
    if game.shards <= 1:
        return game_id
    return f"{game_id}/{zlib.crc32(player.encode()) % game.shards}"


def prefix(tag: str) -> str:
    return f"{NS}:{{{tag}}}:"


def oracle_seasons(ts_ms: int, game: GameConfig) -> list[OracleWindow]:
    """The configured seasons holding ``ts_ms`` (never expiring boards)."""
    out = []
    for name, start_text, end_text in SEASONS:
        if name not in {season.name for season in game.seasons}:
            continue
        start = (datetime.fromisoformat(start_text) - EPOCH) // timedelta(milliseconds=1)
        end = (datetime.fromisoformat(end_text) - EPOCH) // timedelta(milliseconds=1)
        if start <= ts_ms < end:
            out.append(OracleWindow(f"season:{name}", start, end - start, None))
    return out


def _iso_ms(text: str) -> int:
    return (datetime.fromisoformat(text) - EPOCH) // timedelta(milliseconds=1)


def oracle_tournaments(ts_ms: int, game: GameConfig) -> list[tuple[OracleWindow, Tournament]]:
    """The configured tournaments holding ``ts_ms``, with their caps (never expiring boards)."""
    caps = {t.name: t for t in game.tournaments}
    out = []
    for name, start_text, end_text in TOURNAMENTS:
        if name not in caps:
            continue
        start, end = _iso_ms(start_text), _iso_ms(end_text)
        if start <= ts_ms < end:
            out.append((OracleWindow(f"tournament:{name}", start, end - start, None), caps[name]))
    return out


def oracle_seat_quota(max_entries: int, partition: int, shard: int, shards: int) -> int:
    """The documented split: cell ``partition * shards + shard`` of ``P * shards`` cells."""
    cells = len(PARTITIONS) * shards
    cell = partition * shards + shard
    return max_entries // cells + (1 if cell < max_entries % cells else 0)


def combine(
    op: str, cur: tuple[int, int] | None, score: int, slot: int, cap: int, asc: bool = False
) -> tuple[tuple[int, int], bool]:
    """(new (score, slot), saturated) by the documented operator rules."""
    if cur is None:
        return (score, slot), False
    if op == "best" and asc:  # the lowest score, earlier slot first
        return min(cur, (score, slot)), False
    if op == "best":  # the maximum of (score, earlier slot first)
        return max(cur, (score, slot), key=lambda e: (e[0], -e[1])), False
    if op == "incr":  # saturating sum, latest contributing slot
        return (min(cur[0] + score, cap), max(cur[1], slot)), cur[0] + score > cap
    # set: the latest event wins; an older one is ignored, an equal slot takes the later event
    return ((score, slot) if slot >= cur[1] else cur), False


@dataclass
class Expected:
    boards: dict[str, dict[str, int]] = field(default_factory=dict)
    registries: dict[str, set[str]] = field(default_factory=dict)
    watermarks: dict[str, dict[str, int]] = field(default_factory=dict)
    expire_at: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    accepted: int = 0
    #: ``meta:attempts:<t>`` (player -> attempts) and ``meta:entries:<t>`` (field -> seats).
    attempts: dict[str, dict[str, int]] = field(default_factory=dict)
    entries: dict[str, dict[str, int]] = field(default_factory=dict)


# --- the stream ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """One accepted record: where it sits in its partition and the boards it may update."""

    partition: int
    offset: int
    record_ts: int
    event: ScoreEvent
    kinds: tuple[WindowKind, ...]

    def __repr__(self) -> str:  # compact, for readable falsifying examples
        ev = self.event
        kinds = ",".join(k.value for k in self.kinds)
        what = "RETRACT" if ev.kind is EventKind.RETRACT else f"{ev.score}@{ev.ts_ms} [{kinds}]"
        return (
            f"<p{self.partition}#{self.offset} rts={self.record_ts} {ev.event_id} "
            f"{ev.game_id}/{ev.player_id} {what}>"
        )


@dataclass
class Scenario:
    games: dict[str, GameConfig]
    records: dict[int, list[Rec]]

    def __repr__(self) -> str:
        games = {
            g: f"{c.operator.value} max={c.max_score} tie={c.tie_resolution.value} "
            f"windows={[k.value for k in c.windows]} shards={c.shards} "
            f"tournaments={[(t.name, t.max_entries, t.max_attempts) for t in c.tournaments]}"
            for g, c in self.games.items()
        }
        return f"Scenario(games={games}, records={self.records})"

    def accepted(self, rec: Rec) -> Accepted:
        game = self.games[rec.event.game_id]
        windows = tuple(w for w in game.windows_at(rec.event.ts_ms) if w.kind in rec.kinds)
        return Accepted(rec.offset, rec.record_ts, rec.event, game, windows)

    @property
    def has_retracts(self) -> bool:
        return any(
            r.event.kind is EventKind.RETRACT for recs in self.records.values() for r in recs
        )


def oracle(scn: Scenario) -> Expected:
    out = Expected()
    values: dict[tuple[str, str], tuple[int, int]] = {}
    slots: dict[str, int] = {}
    ceiling: dict[str, int | None] = {}  # max_score of a lowest-wins board
    applied_at: dict[tuple[str, str], list[int]] = {}  # record times of applied copies
    stats = {
        "applied": 0,
        "noop": 0,
        "duplicate": 0,
        "saturated": 0,
        "tournament_full": 0,
        "attempts_used_up": 0,
    }
    for partition, recs in scn.records.items():
        for rec in recs:
            ev = rec.event
            game = scn.games[ev.game_id]
            pre = prefix(oracle_tag(ev.game_id, game, ev.player_id))
            out.accepted += 1
            out.watermarks.setdefault(pre + "meta:wm", {})[f"{TOPIC}/{partition}"] = rec.offset
            copies = applied_at.setdefault((pre, ev.event_id), [])
            if any(abs(rec.record_ts - t) <= HORIZON_MS for t in copies):
                stats["duplicate"] += 1
                continue
            copies.append(rec.record_ts)
            changed = False
            if ev.kind is EventKind.RETRACT:
                # Always counted as applied (knowing whether the player was on a
                # board would cost a read, and counts must not depend on the cache).
                changed = True
                for key, player in list(values):
                    if player == ev.player_id and key.startswith(pre):
                        del values[(key, player)]
            else:
                capped = False
                listed = [k for k in rec.kinds if k.value not in ("season", "tournament")]
                boards = [oracle_window(k, ev.ts_ms, game) for k in listed]
                if WindowKind.SEASON in rec.kinds:
                    boards += oracle_seasons(ev.ts_ms, game)
                if WindowKind.TOURNAMENT in rec.kinds:
                    for window, caps in oracle_tournaments(ev.ts_ms, game):
                        # Seats are counted per (partition, shard) cell; attempts per player.
                        seats_key = pre + f"meta:entries:{caps.name}"
                        tries_key = pre + f"meta:attempts:{caps.name}"
                        used = out.attempts.get(tries_key, {}).get(ev.player_id, 0)
                        seats = out.entries.get(seats_key, {})
                        taken = seats.get(f"{TOPIC}/{partition}", 0)
                        if used == 0 and caps.max_entries is not None:
                            shard = zlib.crc32(ev.player_id.encode()) % game.shards
                            quota = oracle_seat_quota(
                                caps.max_entries, partition, shard, game.shards
                            )
                            if taken >= quota:
                                stats["tournament_full"] += 1
                                continue
                            out.entries.setdefault(seats_key, {})[f"{TOPIC}/{partition}"] = (
                                taken + 1
                            )
                        if caps.max_attempts is not None and used >= caps.max_attempts:
                            stats["attempts_used_up"] += 1
                            continue
                        out.attempts.setdefault(tries_key, {})[ev.player_id] = used + 1
                        changed = True  # an attempt counted changes the projection
                        boards.append(window)
                for window in boards:
                    key = pre + window.id
                    slots[key] = oracle_slots(game, window)
                    ceiling[key] = game.max_score if game.order.value == "asc" else None
                    out.registries.setdefault(pre + "meta:boards", set()).add(window.id)
                    slot = oracle_slot(game, window, ev.ts_ms)
                    cur = values.get((key, ev.player_id))
                    new, saturated = combine(
                        game.operator.value,
                        cur,
                        ev.score,
                        slot,
                        game.max_score,
                        game.order.value == "asc",
                    )
                    capped = capped or saturated
                    if new != cur:
                        values[(key, ev.player_id)] = new
                        changed = True
                    if window.expire_at_s is not None:
                        out.expire_at[key] = window.expire_at_s
                stats["saturated"] += capped  # once per capped event, not per board
            stats["applied" if changed else "noop"] += 1
    for (key, player), (score, slot) in values.items():
        top = ceiling[key]
        stored = score if top is None else top - score
        out.boards.setdefault(key, {})[player] = stored * slots[key] + (slots[key] - 1 - slot)
    out.expire_at = {k: v for k, v in out.expire_at.items() if k in out.boards}
    out.stats = {k: v for k, v in stats.items() if v}
    return out


# --- strategies ----------------------------------------------------------------------------


def _oracle_fit(game: GameConfig) -> int:
    """The largest max_score the oracle's own formula allows for every board of ``game``."""
    margin = 0 if game.calendar.zone == "UTC" else 2 * 3_600_000  # one DST shift, doubled
    spans = {
        "alltime": UNTIL_MS - ORIGIN_MS,
        "hourly": 3_600_000 + margin,
        "daily": DAY_MS + margin,
        "weekly": 7 * DAY_MS + margin,
        "monthly": 31 * DAY_MS + margin,
    }
    unit = _UNIT_MS[game.tie_resolution.value]
    lengths = [spans[k.value] for k in game.windows]
    lengths += [season.end_ms - season.start_ms for season in game.seasons]
    lengths += [t.end_ms - t.start_ms for t in game.tournaments]
    slots = max(1 if unit is None else -(-span // unit) for span in lengths)
    return 2**53 // slots - 1


_LISTED = [
    WindowKind.ALLTIME,
    WindowKind.WEEKLY,
    WindowKind.DAILY,
    WindowKind.HOURLY,
    WindowKind.MONTHLY,
]


@st.composite
def game_configs(draw: st.DrawFn, operators: tuple[Operator, ...] = tuple(Operator)) -> GameConfig:
    zone, week_start = draw(st.sampled_from(CALENDARS))
    seasons = tuple(
        Season(
            name,
            (datetime.fromisoformat(start) - EPOCH) // timedelta(milliseconds=1),
            (datetime.fromisoformat(end) - EPOCH) // timedelta(milliseconds=1),
        )
        for name, start, end in SEASONS
        if draw(st.booleans())
    )
    tournaments = tuple(
        Tournament(
            name,
            _iso_ms(start),
            _iso_ms(end),
            draw(st.one_of(st.none(), st.integers(1, 7))),
            draw(st.one_of(st.none(), st.integers(1, 3))),
        )
        for name, start, end in TOURNAMENTS
        if draw(st.booleans())
    )
    game = GameConfig(
        operator=draw(st.sampled_from(operators)),
        tie_resolution=draw(st.sampled_from(TieResolution)),
        windows=tuple(draw(st.permutations(_LISTED))[: draw(st.integers(1, 5))]),
        shards=draw(st.integers(1, 3)),
        max_score=1,
        order=draw(st.sampled_from(Order)),
        calendar=Calendar(zone, week_start),
        seasons=seasons,
        tournaments=tournaments,
    )
    big = draw(st.booleans())
    max_score = _oracle_fit(game) if big else draw(st.integers(1, 40))
    game = replace(game, max_score=max_score)
    game.validate("g")  # the oracle's bound agrees with the catalog's
    return game


def narrow_first(game: GameConfig) -> tuple[WindowKind, ...]:
    order = (
        WindowKind.TOURNAMENT,
        WindowKind.HOURLY,
        WindowKind.DAILY,
        WindowKind.WEEKLY,
        WindowKind.MONTHLY,
        WindowKind.SEASON,
        WindowKind.ALLTIME,
    )
    return tuple(
        k
        for k in order
        if k in game.windows
        or (k.value == "season" and game.seasons)
        or (k.value == "tournament" and game.tournaments)
    )


def _scores(cap: int) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from(sorted({0, 1, cap // 2, max(cap - 1, 0), cap})), st.integers(0, cap)
    )


_TS = st.one_of(
    st.sampled_from(MOMENTS),
    st.integers(_ms(2026, 12, 27), _ms(2027, 1, 5)),
    st.integers(_ms(2026, 10, 31, 20), _ms(2026, 11, 2, 9)),
)
#: Record-time steps within a partition; negative ones are producers with skewed clocks.
_STEP = st.sampled_from(
    (
        -HORIZON_MS - 1,
        -HORIZON_MS,
        -HORIZON_MS // 2,
        -1,
        0,
        1,
        HORIZON_MS // 2,
        HORIZON_MS,
        HORIZON_MS + 1,
        2 * HORIZON_MS,
    )
)


@st.composite
def scenarios(
    draw: st.DrawFn,
    retracts: bool = True,
    operators: tuple[Operator, ...] = tuple(Operator),
    max_records: int = 40,
) -> Scenario:
    games = {g: draw(game_configs(operators)) for g in GAME_IDS}
    partition_of = {p: draw(st.sampled_from(PARTITIONS)) for p in PLAYERS}
    clock = dict.fromkeys(PARTITIONS, 1_800_000_000_000)
    next_offset = dict.fromkeys(PARTITIONS, draw(st.integers(0, 3)))
    records: dict[int, list[Rec]] = {p: [] for p in PARTITIONS}
    every: list[Rec] = []
    for i in range(draw(st.integers(1, max_records))):
        choice = draw(st.integers(0, 9))
        if every and choice <= 2:  # an exact copy of an earlier event (producer retry)
            ev = draw(st.sampled_from(every)).event
        else:
            game_id = draw(st.sampled_from(GAME_IDS))
            kind = EventKind.RETRACT if retracts and choice == 3 else EventKind.SCORE
            ev = ScoreEvent(
                event_id=f"e{i}",
                game_id=game_id,
                player_id=draw(st.sampled_from(PLAYERS)),
                score=0 if kind is EventKind.RETRACT else draw(_scores(games[game_id].max_score)),
                ts_ms=draw(_TS),
                kind=kind,
                key_id="k1",
                sig=b"",
            )
        game = games[ev.game_id]
        # Lateness drops the daily (and then the weekly) board, never every board.
        drop = draw(st.integers(0, 2))
        gone = {WindowKind.HOURLY, WindowKind.DAILY}
        if drop == 2:
            gone |= {WindowKind.WEEKLY, WindowKind.TOURNAMENT}
        # The validator hands windows over narrowest first (the planner relies on it).
        kinds = tuple(k for k in narrow_first(game) if drop == 0 or k not in gone)
        kinds = kinds or narrow_first(game)
        partition = partition_of[ev.player_id]
        clock[partition] += draw(_STEP)
        offset = next_offset[partition] + draw(st.integers(0, 2))  # gaps: dead-lettered records
        next_offset[partition] = offset + 1
        rec = Rec(partition, offset, clock[partition], ev, kinds)
        records[partition].append(rec)
        every.append(rec)
    return Scenario(games, {p: recs for p, recs in records.items() if recs})


# --- running the planner -------------------------------------------------------------------


def chunk(scn: Scenario, recs: list[Rec], rnd: random.Random) -> list[CheckedBatch]:
    """Consecutive records of one partition, cut into batches at random points."""
    out: list[CheckedBatch] = []
    at = 0
    while at < len(recs):
        size = rnd.choice((1, 1, 2, 3, 5, 8, len(recs)))
        part = recs[at : at + size]
        out.append(
            CheckedBatch(
                TOPIC,
                part[0].partition,
                tuple(scn.accepted(r) for r in part),
                (),
                part[-1].offset,
            )
        )
        at += size
    return out


def interleave(
    per_partition: dict[int, list[CheckedBatch]], rnd: random.Random
) -> list[CheckedBatch]:
    """Merge partitions' batch sequences in a random order, each partition's kept in order."""
    queues = {p: list(batches) for p, batches in per_partition.items() if batches}
    out: list[CheckedBatch] = []
    while queues:
        p = rnd.choice(sorted(queues))
        out.append(queues[p].pop(0))
        if not queues[p]:
            del queues[p]
    return out


def calls(
    batches: list[CheckedBatch], worker_of: dict[int, int], rnd: random.Random, rounds: bool
) -> list[tuple[int, list[CheckedBatch]]]:
    """Group each worker's batches into ``write_batch`` calls (one batch each unless ``rounds``)."""
    out: list[tuple[int, list[CheckedBatch]]] = []
    open_: dict[int, list[CheckedBatch]] = {}
    for batch in batches:
        worker = worker_of[batch.partition]
        items = open_.setdefault(worker, [])
        items.append(batch)
        if not rounds or rnd.random() < 0.4:
            out.append((worker, open_.pop(worker)))
    out.extend(sorted(open_.items()))
    return out


def run(
    scn: Scenario,
    rnd: random.Random,
    *,
    capacity: int = BIG_CACHE,
    workers: int = 1,
    crashes: int = 0,
    rounds: bool = False,
    fresh: bool = False,
    max_updates: int = 0,
    absent: bool = False,
) -> BoardModel:
    """Project the whole stream, crashing ``crashes`` times and restarting at or before the crash.

    A crash throws every planner away (the model, i.e. Redis, survives), possibly
    after writing only some groups of an in-flight ``write_batch`` call; the
    restart re-reads each partition from a random offset at or before what was
    fully written, chunked and interleaved afresh, on new planners (and possibly
    another assignment of partitions to workers). ``absent``: the planners are told
    exactly which values the model does not hold (``BoardPlanner.absent``), as a
    replay folding in memory tells them.
    """
    # Bags compared as sets of entries: partitions interleave differently per run.
    model = BoardModel(bag_entry=SeenLayout.sized(HORIZON_MS).entry_bytes)
    start = dict.fromkeys(scn.records, 0)
    for attempt in range(crashes + 1):
        planners = [
            BoardPlanner(
                NS,
                HORIZON_MS,
                capacity,
                partitions={TOPIC: len(PARTITIONS)},
                fresh=fresh and attempt == 0,
                max_updates=max_updates,
            )
            for _ in range(workers)
        ]
        if absent:
            for planner in planners:
                planner.absent = lambda key, player: player not in model.zsets.get(key, {})
        worker_of = {p: rnd.randrange(workers) for p in scn.records}
        batches = interleave(
            {p: chunk(scn, recs[start[p] :], rnd) for p, recs in scn.records.items()}, rnd
        )
        todo = calls(batches, worker_of, rnd, rounds)
        last = attempt == crashes
        stop = len(todo) if last else rnd.randint(0, len(todo))
        done = dict(start)
        for worker, items in todo[:stop]:
            write_batch(items, planners[worker], model)
            for batch in items:
                done[batch.partition] += len(batch.accepted)
        if last:
            break
        if stop < len(todo) and rnd.random() < 0.6:
            worker, items = todo[stop]
            write_batch(items, planners[worker], model, crash_after_groups=rnd.randint(0, 4))
        start = {p: rnd.randint(0, done[p]) for p in scn.records}
    return model


def assert_matches_oracle(model: BoardModel, scn: Scenario, exp: Expected) -> None:
    boards = model.boards()
    for board in boards.values():
        for value in board.values():
            assert value == int(value), "a composite lost precision"
    assert boards == exp.boards
    assert {k: v for k, v in model.sets.items() if v} == exp.registries
    assert model.hashes_with(":meta:wm") == exp.watermarks
    assert model.expire_at == exp.expire_at
    assert model.hashes_with(":meta:attempts:") == exp.attempts
    assert model.hashes_with(":meta:entries:") == exp.entries
    stats = model.stats_total()
    assert stats == exp.stats
    # Conservation: every accepted record is applied, a no-op or a duplicate.
    assert stats.get("applied", 0) + stats.get("noop", 0) + stats.get("duplicate", 0) == (
        exp.accepted
    )


def _seeds() -> st.SearchStrategy[random.Random]:
    return st.randoms(use_true_random=False)


PROPERTY = settings(
    max_examples=250,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- properties ----------------------------------------------------------------------------


@PROPERTY
@given(scn=scenarios(), rnd=_seeds(), workers=st.integers(1, 2), rounds=st.booleans())
def test_boards_registries_watermarks_and_counters_match_the_oracle(
    scn: Scenario, rnd: random.Random, workers: int, rounds: bool
) -> None:
    model = run(scn, rnd, workers=workers, rounds=rounds)
    assert_matches_oracle(model, scn, oracle(scn))
    assert all(outcome == 1 for outcome in model.outcomes)  # no replay: nothing skipped


@PROPERTY
@given(
    scn=scenarios(),
    rnd=_seeds(),
    crashes=st.integers(1, 2),
    workers=st.integers(1, 2),
    rounds=st.booleans(),
)
def test_crash_and_replay_from_an_earlier_offset_changes_nothing(
    scn: Scenario, rnd: random.Random, crashes: int, workers: int, rounds: bool
) -> None:
    clean = run(scn, rnd)
    crashed = run(scn, rnd, crashes=crashes, workers=workers, rounds=rounds)
    assert crashed.state() == clean.state()
    assert_matches_oracle(crashed, scn, oracle(scn))


@PROPERTY
@given(
    scn=scenarios(),
    rnd=_seeds(),
    bound=st.sampled_from((1, 2, 3, 5, 8)),
    crashes=st.integers(0, 2),
    workers=st.integers(1, 2),
    capacity=st.sampled_from((1, 3, BIG_CACHE)),
    rounds=st.booleans(),
)
def test_group_writes_split_into_bounded_pieces_give_the_same_boards_through_crashes(
    scn: Scenario,
    rnd: random.Random,
    bound: int,
    crashes: int,
    workers: int,
    capacity: int,
    rounds: bool,
) -> None:
    """Each piece carries its prefix's watermark: a crash between pieces re-applies nothing."""
    whole = run(scn, rnd)
    bounded = run(
        scn,
        rnd,
        crashes=crashes,
        workers=workers,
        rounds=rounds,
        capacity=capacity,
        max_updates=bound,
    )
    assert bounded.state() == whole.state()
    assert_matches_oracle(bounded, scn, oracle(scn))


@given(
    costs=st.lists(
        st.tuples(st.integers(0, 6), st.booleans(), st.sampled_from("abc")), max_size=60
    ),
    bound=st.integers(-1, 20),
    retract_cost=st.integers(0, 6),
)
def test_pieces_are_consecutive_runs_within_the_bound(
    costs: list[tuple[int, bool, str]], bound: int, retract_cost: int
) -> None:
    records = [
        _accepted(i, windows, EventKind.RETRACT if retract else EventKind.SCORE, player)
        for i, (windows, retract, player) in enumerate(costs)
    ]
    if not records:
        return
    out = pieces(records, bound, retract_cost)
    assert [rec for piece in out for rec in piece] == records  # order kept, nothing lost
    assert all(out)
    for piece in out:
        # An event id each; boards once per player and piece (they coalesce), a RETRACT's always.
        cost, players = 0, set()
        for r in piece:
            retract = r.event.kind is EventKind.RETRACT
            if retract or r.event.player_id not in players:
                cost += retract_cost if retract else len(r.windows)
            players.add(r.event.player_id)
            cost += 1
        assert bound <= 0 or cost <= bound or len(piece) == 1
    if bound <= 0:
        assert len(out) == 1


def _accepted(offset: int, windows: int, kind: EventKind, player: str = "p") -> Accepted:
    game = GameConfig()
    ev = ScoreEvent(f"e{offset}", "g", player, 1, 1_800_000_000_000, kind, "k1", b"")
    alltime = game.window("alltime")
    return Accepted(offset, ev.ts_ms, ev, game, (alltime,) * windows)


@PROPERTY
@given(scn=scenarios(), rnd=_seeds(), capacity=st.sampled_from((1, 2, 3)), rounds=st.booleans())
def test_a_tiny_cache_gives_the_same_result_as_a_large_one(
    scn: Scenario, rnd: random.Random, capacity: int, rounds: bool
) -> None:
    large = run(scn, rnd)
    tiny = run(scn, rnd, capacity=capacity, rounds=rounds)
    assert tiny.state() == large.state()
    assert_matches_oracle(tiny, scn, oracle(scn))


@PROPERTY
@given(
    scn=scenarios(),
    rnd=_seeds(),
    capacity=st.sampled_from((1, 2, 3, BIG_CACHE)),
    workers=st.integers(1, 2),
    rounds=st.booleans(),
    absent=st.booleans(),
)
def test_a_fresh_replay_reads_no_values_and_gives_the_same_boards(
    scn: Scenario, rnd: random.Random, capacity: int, workers: int, rounds: bool, absent: bool
) -> None:
    """A replay into an empty namespace (lb rebuild/backfill) skips value reads until it evicts.

    Or, told which values the store does not hold (a fold in memory), after too.
    """
    plain = run(scn, rnd, capacity=capacity, workers=workers, rounds=rounds)
    fresh = run(
        scn, rnd, capacity=capacity, workers=workers, rounds=rounds, fresh=True, absent=absent
    )
    assert fresh.state() == plain.state()
    assert_matches_oracle(fresh, scn, oracle(scn))


def test_a_fresh_planner_asks_no_board_values_until_its_cache_evicts() -> None:
    game = ALLTIME_ONLY
    batch = _batch(game, 0, *((i, R + i, _event(f"e{i}", f"p{i}", 10 + i, T)) for i in range(6)))
    assert BoardPlanner(NS, HORIZON_MS).lookups(batch).scores  # a plain planner reads them
    fresh = BoardPlanner(NS, HORIZON_MS, 2, fresh=True)
    assert not fresh.lookups(batch).scores
    project([batch], fresh, BoardModel())  # 6 players through a cache of 2: p0 evicted
    later = _batch(game, 0, (4, R + 9, _event("e9", "p0", 99, T)))
    assert fresh.lookups(later).scores  # p0 may have been forgotten: read again


def test_a_planner_told_what_the_store_lacks_reads_only_what_it_holds() -> None:
    game = ALLTIME_ONLY
    model = BoardModel()
    fresh = BoardPlanner(NS, HORIZON_MS, 2, fresh=True)
    fresh.absent = lambda key, player: player not in model.zsets.get(key, {})
    first = _batch(game, 0, *((i, R + i, _event(f"e{i}", f"p{i}", 10 + i, T)) for i in range(6)))
    project([first], fresh, model)  # through a cache of 2: p0 evicted
    later = _batch(
        game, 0, (6, R + 9, _event("e9", "p0", 99, T)), (7, R + 9, _event("e10", "q", 5, T))
    )
    asked = [player for _, players in fresh.lookups(later).scores for player in players]
    assert asked == ["p0"]  # p0 is on the board; q, never seen, is not read


@PROPERTY
@given(scn=scenarios(), rnd=_seeds(), capacity=st.sampled_from((1, 2, BIG_CACHE)))
def test_no_write_for_a_member_whose_value_does_not_change(
    scn: Scenario, rnd: random.Random, capacity: int
) -> None:
    model = run(scn, rnd, capacity=capacity, crashes=rnd.randint(0, 1), rounds=rnd.random() < 0.5)
    redundant = [z for z in model.zadds if z.before == z.after]
    assert redundant == []
    if not scn.has_retracts:  # a RETRACT may remove a member it never read (blind ZREM)
        assert model.zrems == []


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from((Operator.BEST, Operator.SET)),
    tie=st.sampled_from(TieResolution),
    first=st.integers(5, 40),
    later=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3_000)), min_size=1, max_size=20),
    rnd=_seeds(),
    capacity=st.sampled_from((1, BIG_CACHE)),
)
def test_events_that_cannot_improve_a_board_cost_no_write(
    op: Operator,
    tie: TieResolution,
    first: int,
    later: list[tuple[int, int]],
    rnd: random.Random,
    capacity: int,
) -> None:
    """``best``: every later score is lower; ``set``: every later event is older."""
    if op is Operator.SET and tie is TieResolution.NONE:
        tie = TieResolution.MIN  # without a time tie-break every event is "the latest"
    game = GameConfig(operator=op, max_score=40, tie_resolution=tie)
    t0 = _ms(2026, 12, 30, 12)
    events = [(first, t0)] + [
        (score, t0 + dt if op is Operator.BEST else t0 - 60_000 - dt) for score, dt in later
    ]
    recs = [
        Rec(
            0,
            offset,
            1_800_000_000_000 + offset * 10 * HORIZON_MS,
            ScoreEvent(f"e{offset}", "ga", "p0", score, ts, EventKind.SCORE, "k1", b""),
            narrow_first(game),
        )
        for offset, (score, ts) in enumerate(events)
    ]
    scn = Scenario({"ga": game}, {0: recs})
    model = run(scn, rnd, capacity=capacity)
    assert len(model.zadds) == len(game.windows)
    assert all(z.before is None for z in model.zadds)
    assert model.stats_total() == {"applied": 1, "noop": len(later)}


# --- specific cases ------------------------------------------------------------------------


def _event(
    eid: str, player: str, score: int, ts: int, kind: EventKind = EventKind.SCORE
) -> ScoreEvent:
    return ScoreEvent(eid, "ga", player, score, ts, kind, "k1", b"")


def _batch(game: GameConfig, partition: int, *recs: tuple[int, int, ScoreEvent]) -> CheckedBatch:
    accepted = tuple(
        Accepted(offset, record_ts, ev, game, game.windows_at(ev.ts_ms))
        for offset, record_ts, ev in recs
    )
    return CheckedBatch(TOPIC, partition, accepted, (), accepted[-1].offset)


ALLTIME_ONLY = GameConfig(windows=(WindowKind.ALLTIME,), max_score=100)
T = _ms(2026, 5, 4, 10)
R = 1_800_000_000_000


def test_a_stored_watermark_at_or_past_the_batch_skips_the_group() -> None:
    model = BoardModel()
    batch = _batch(ALLTIME_ONLY, 0, (5, R, _event("e1", "p", 7, T)))
    project([batch], BoardPlanner(NS, HORIZON_MS), model)
    before = model.state()
    project([batch], BoardPlanner(NS, HORIZON_MS), model)  # a replay on a fresh planner
    assert model.state() == before
    assert model.hashes[f"{NS}:{{ga}}:meta:wm"] == {f"{TOPIC}/0": 5}


def test_duplicate_exactly_at_the_horizon_is_dropped_and_one_ms_later_applied() -> None:
    model = BoardModel()
    game = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=100)
    ev = _event("e1", "p", 7, T)
    batches = [
        _batch(game, 0, (0, R, ev)),
        _batch(game, 0, (1, R + HORIZON_MS, ev)),  # within the horizon: duplicate
        _batch(game, 0, (2, R + 2 * HORIZON_MS + 1, ev)),  # beyond: counted again
    ]
    project(batches, BoardPlanner(NS, HORIZON_MS), model)
    assert model.stats_total() == {"applied": 2, "duplicate": 1}
    (board,) = model.boards().values()
    assert board["p"] // ALLTIME_ONLY.codec(window_for(WindowKind.ALLTIME, T)).slots == 14


def test_an_event_id_reused_by_another_players_event_is_caught_only_once_written() -> None:
    """docs/DESIGN.md, Deduplication: two players' events with one id sit in two partitions.

    In one partition (log order) the later is a duplicate; in two partitions
    read in one round (one read for both batches) both are applied; in two
    rounds, the later round's read finds the earlier's write.
    """
    first, second = _event("e1", "p0", 7, T), _event("e1", "p1", 9, T + 10)
    outcomes = {}
    for shape in ("one partition", "one round", "two rounds"):
        model = BoardModel()
        planner = BoardPlanner(NS, HORIZON_MS)
        if shape == "one partition":
            write_batch(
                [_batch(ALLTIME_ONLY, 0, (0, R, first), (1, R + 10, second))], planner, model
            )
        else:
            batches = [
                _batch(ALLTIME_ONLY, 0, (0, R, first)),
                _batch(ALLTIME_ONLY, 1, (0, R + 10, second)),
            ]
            if shape == "one round":
                write_batch(batches, planner, model)
            else:
                project(batches, planner, model)
        (board,) = model.boards().values()
        outcomes[shape] = (sorted(board), model.stats_total())
    assert outcomes == {
        "one partition": (["p0"], {"applied": 1, "duplicate": 1}),
        "one round": (["p0", "p1"], {"applied": 2}),
        "two rounds": (["p0"], {"applied": 1, "duplicate": 1}),
    }


def test_retract_removes_the_player_from_every_registered_board() -> None:
    model = BoardModel()
    game = GameConfig(max_score=100)
    day2 = T + DAY_MS * 7
    first = BoardPlanner(NS, HORIZON_MS)
    project(
        [
            _batch(game, 0, (0, R, _event("e1", "p", 7, T))),
            _batch(game, 1, (0, R, _event("e2", "q", 9, day2))),
        ],
        first,
        model,
    )
    # A new planner (after a restart) must still find every board of the game.
    project(
        [_batch(game, 0, (1, R + 1, _event("e3", "p", 0, T, EventKind.RETRACT)))],
        BoardPlanner(NS, HORIZON_MS),
        model,
    )
    assert all("p" not in board for board in model.boards().values())
    assert sum("q" in board for board in model.boards().values()) == 3
    # Daily and weekly boards of p's day are gone with their expiry; alltime keeps q.
    assert set(model.expire_at) == {k for k in model.boards() if ":alltime" not in k}


def test_retract_counters_do_not_depend_on_the_cache() -> None:
    game = ALLTIME_ONLY
    batches = [
        _batch(game, 0, (0, R, _event("e1", "p", 7, T))),
        _batch(game, 0, (1, R + 10, _event("e2", "p", 0, T, EventKind.RETRACT))),
        _batch(game, 0, (2, R + 20, _event("e3", "p", 0, T, EventKind.RETRACT))),
    ]
    clean = BoardModel()
    project(batches, BoardPlanner(NS, HORIZON_MS), clean)
    restarted = BoardModel()
    project(batches[:2], BoardPlanner(NS, HORIZON_MS), restarted)
    project(batches[2:], BoardPlanner(NS, HORIZON_MS), restarted)  # crash between batches
    # A RETRACT counts as applied whether or not the cache knew the player was there.
    assert clean.stats_total() == {"applied": 3}
    assert restarted.stats_total() == clean.stats_total()
    assert clean.state() == restarted.state()


def test_a_capped_incr_event_counts_as_saturated() -> None:
    game = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=10)
    counts = []
    for later_ms in (5_000, -5_000):  # the capped event is newer / older than the total
        model = BoardModel()
        batch = _batch(
            game,
            0,
            (0, R, _event("e1", "p", 10, T)),
            (1, R + 1, _event("e2", "p", 5, T + later_ms)),
        )
        project([batch], BoardPlanner(NS, HORIZON_MS), model)
        counts.append(model.stats_total().get("saturated", 0))
    assert counts == [1, 1]


def test_saturation_counts_once_per_capped_event_not_per_board() -> None:
    game = GameConfig(operator=Operator.INCR, max_score=10)  # three boards
    model = BoardModel()
    batch = _batch(game, 0, (0, R, _event("e1", "p", 8, T)), (1, R + 1, _event("e2", "p", 5, T)))
    project([batch], BoardPlanner(NS, HORIZON_MS), model)
    assert model.stats_total() == {"applied": 2, "saturated": 1}


def test_dedupe_does_not_depend_on_batching_when_record_time_goes_backwards() -> None:
    game = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=100)
    ev = _event("e1", "p", 7, T)
    recs = [(0, R, ev), (1, R + 2 * HORIZON_MS, ev), (2, R + HORIZON_MS // 2, ev)]
    together = BoardModel()
    project([_batch(game, 0, *recs)], BoardPlanner(NS, HORIZON_MS), together)
    apart = BoardModel()
    project([_batch(game, 0, rec) for rec in recs], BoardPlanner(NS, HORIZON_MS), apart)
    # Offset 2 is 500 ms after offset 0's copy: a duplicate however the records were batched.
    assert apart.stats_total() == {"applied": 2, "duplicate": 1}
    assert together.state() == apart.state()


def test_dedupe_horizon_is_symmetric() -> None:
    """A copy is a duplicate when an applied copy's record time is within the horizon
    before *or after* it (gateways with skewed clocks stamp retries either way),
    whichever bucket the applied copy landed in, inside one batch or across batches."""
    game = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=100)
    ev = _event("e1", "p", 7, T)
    for first, second, expected in (
        (R + 1_001, R + 500, {"applied": 1, "duplicate": 1}),  # earlier, across a bucket edge
        (R + 1_999, R + 1_498, {"applied": 1, "duplicate": 1}),  # earlier, inside one bucket
        (R + 2_500, R + 1_500, {"applied": 1, "duplicate": 1}),  # exactly one horizon earlier
        (R + 2_501, R + 1_500, {"applied": 2}),  # 1 ms more than a horizon earlier
        (R + 500, R + 500, {"applied": 1, "duplicate": 1}),  # equal record times
        (R + 500, R + 1_500, {"applied": 1, "duplicate": 1}),  # exactly one horizon later
        (R + 500, R + 1_501, {"applied": 2}),  # 1 ms past the horizon
    ):
        together = BoardModel()
        project(
            [_batch(game, 0, (0, first, ev), (1, second, ev))], BoardPlanner(NS, 1_000), together
        )
        assert together.stats_total() == expected, ("one batch", first, second)
        apart = BoardModel()
        project(
            [_batch(game, 0, (0, first, ev)), _batch(game, 0, (1, second, ev))],
            BoardPlanner(NS, 1_000),
            apart,
        )
        assert apart.stats_total() == expected, ("two batches", first, second)
        restarted = BoardModel()
        project([_batch(game, 0, (0, first, ev))], BoardPlanner(NS, 1_000), restarted)
        project([_batch(game, 0, (1, second, ev))], BoardPlanner(NS, 1_000), restarted)
        assert restarted.state() == apart.state() == together.state()


def test_incr_sums_are_exact_when_retries_carry_earlier_record_times() -> None:
    """The bug of issue #11: copies stamped up to 3 s earlier than the original were summed."""
    game = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=10**6)
    rnd = random.Random(11)
    horizon = 300_000
    records = []
    total = 0
    at = R
    for i in range(400):
        at += rnd.randint(0, 2_000)
        ev = _event(f"e{i}", "p", rnd.randint(1, 9), T)
        total += ev.score
        records.append((at, ev))
        if rnd.random() < 0.3:  # a retry through a host whose clock is up to 3 s behind or ahead
            records.append((at + rnd.randint(-3_000, 3_000), ev))
    model = BoardModel()
    planner = BoardPlanner(NS, horizon)
    batch: list[tuple[int, int, ScoreEvent]] = []
    for offset, (rts, ev) in enumerate(records):
        batch.append((offset, rts, ev))
        if rnd.random() < 0.2:
            project([_batch(game, 0, *batch)], planner, model)
            batch = []
    if batch:
        project([_batch(game, 0, *batch)], planner, model)
    (board,) = model.boards().values()
    slots = game.codec(window_for(WindowKind.ALLTIME, T)).slots
    assert board["p"] // slots == total
    assert model.stats_total()["duplicate"] == len(records) - 400
