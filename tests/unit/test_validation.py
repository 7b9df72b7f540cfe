"""Validation rules, table-driven, with the real Avro codec and real HMAC signatures.

Every test runs once per decode + verify engine (``schemas/decode_verify.py``):
the Python reference and the compiled ``lb_native``, which must be built.
Every dead-letter code of SPEC.md is produced here from real wire bytes, and
each time-based rule is checked on both sides of its boundary. Time is judged
against the record's own timestamp, so every case fixes it explicitly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.records import RecordBatch, SourceRecord
from domain.signing import parse_keyring, signed_event
from domain.validation import (
    BOUNDS,
    CODES,
    DECODE,
    FUTURE,
    LATE,
    METADATA_TOO_LARGE,
    SCHEMA,
    SIGNATURE,
    UNKNOWN_GAME,
    UNKNOWN_KEY,
    Rejected,
    Validator,
)
from schemas.codec import ScoreEventCodec
from schemas.decode_verify import ENGINES, decode_verifier

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(*parts: int) -> int:
    return (datetime(*parts, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)  # type: ignore[misc]


KEYS = parse_keyring("k1:" + "11" * 32 + ",k2:" + "22" * 32)
FOREIGN = parse_keyring("k9:" + "99" * 32)
CODEC = ScoreEventCodec.from_registry()

#: Monday 2026-05-04 10:00 UTC: ISO week 2026-W19 (Monday 05-04 .. Sunday 05-10).
T = ms(2026, 5, 4, 10)
DAY_END = ms(2026, 5, 5)
WEEK_END = ms(2026, 5, 11)
HOUR = 3_600_000
SKEW = 300_000  # the default future_skew (300 s)

CATALOG_TOML = """
[default]
max_score = 1000

[games."small"]
max_score = 100

[games."daily"]
windows = ["daily"]
lateness_seconds = 3600

[games."short"]
alltime_origin = "2026-01-01"
alltime_until = "2027-01-01"

[games."tiny-meta"]
metadata_max_bytes = 4

[games."no-meta"]
metadata_max_bytes = 0
"""
CATALOG = GameCatalog.from_toml(CATALOG_TOML)
NO_DEFAULT = GameCatalog.from_toml('[games."known"]\nmax_score = 50\n')


def event(
    keyring: str = "k1",
    *,
    event_id: str = "e1",
    game_id: str = "g",
    player_id: str = "p1",
    score: int = 10,
    ts_ms: int = T,
    kind: EventKind = EventKind.SCORE,
    metadata: str | None = None,
) -> ScoreEvent:
    ring = FOREIGN if keyring == "k9" else KEYS
    return signed_event(
        ring,
        keyring,
        event_id=event_id,
        game_id=game_id,
        player_id=player_id,
        score=score,
        ts_ms=ts_ms,
        kind=kind,
        metadata=metadata,
    )


def record(
    ev: ScoreEvent | None = None,
    *,
    record_ts: int = T,
    key: bytes | None = None,
    value: bytes | None = None,
    offset: int = 7,
) -> SourceRecord:
    ev = ev if ev is not None else event()
    return SourceRecord(
        offset,
        record_ts,
        ev.player_id.encode() if key is None else key,
        CODEC.encode(ev) if value is None else value,
    )


#: The engine the current module-scoped parameter selected.
ENGINE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True, params=[e for e in ENGINES if e != "auto"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    ENGINE["name"] = request.param
    yield request.param
    ENGINE.clear()


def validator(catalog: GameCatalog = CATALOG) -> Validator:
    built = decode_verifier(KEYS, CODEC, ENGINE["name"])
    assert built.engine == ENGINE["name"]
    return Validator(catalog, built)


def _unknown_schema_id() -> bytes:
    good = CODEC.encode(event())
    return good[:1] + (99).to_bytes(4, "big") + good[5:]


def _forged_score() -> ScoreEvent:
    return event(score=10)._replace(score=11)  # signed for 10, claims 11


# --- dead letters --------------------------------------------------------------------------

DEAD: list[tuple[str, Callable[[], SourceRecord], str, GameCatalog]] = [
    ("tombstone", lambda: SourceRecord(1, T, b"p1", None), DECODE, CATALOG),
    ("empty value", lambda: record(value=b""), DECODE, CATALOG),
    ("garbage", lambda: record(value=b"definitely not avro"), DECODE, CATALOG),
    ("truncated body", lambda: record(value=CODEC.encode(event())[:12]), DECODE, CATALOG),
    ("trailing bytes", lambda: record(value=CODEC.encode(event()) + b"\x00"), DECODE, CATALOG),
    ("unknown schema id", lambda: record(value=_unknown_schema_id()), SCHEMA, CATALOG),
    ("game id charset", lambda: record(event(game_id="bad game!")), SCHEMA, CATALOG),
    ("game id braces", lambda: record(event(game_id="g}x")), SCHEMA, CATALOG),
    ("game id too long", lambda: record(event(game_id="g" * 65)), SCHEMA, CATALOG),
    ("player id too long", lambda: record(event(player_id="p" * 129)), SCHEMA, CATALOG),
    ("empty player id", lambda: record(event(player_id=""), key=b""), SCHEMA, CATALOG),
    ("empty event id", lambda: record(event(event_id="")), SCHEMA, CATALOG),
    ("event id too long", lambda: record(event(event_id="e" * 129)), SCHEMA, CATALOG),
    ("key is not the player", lambda: record(key=b"p2"), SCHEMA, CATALOG),
    ("forged score", lambda: record(_forged_score()), SIGNATURE, CATALOG),
    (
        "signed with another live key",
        lambda: record(event("k2")._replace(key_id="k1")),
        SIGNATURE,
        CATALOG,
    ),
    (
        "empty signature",
        lambda: record(event()._replace(sig=b"")),
        SIGNATURE,
        CATALOG,
    ),
    ("unknown key id", lambda: record(event("k9")), UNKNOWN_KEY, CATALOG),
    (
        "forged and out of bounds",
        lambda: record(event()._replace(score=10**9)),
        SIGNATURE,
        CATALOG,
    ),
    ("score above max", lambda: record(event(game_id="small", score=101)), BOUNDS, CATALOG),
    ("negative score", lambda: record(event(score=-1)), BOUNDS, CATALOG),
    (
        "negative retract",
        lambda: record(event(score=-1, kind=EventKind.RETRACT)),
        BOUNDS,
        CATALOG,
    ),
    (
        "ts before the all-time origin",
        lambda: record(event(ts_ms=ms(2020, 1, 1) - 1)),
        BOUNDS,
        CATALOG,
    ),
    (
        "ts at the all-time end (exclusive)",
        lambda: record(event(game_id="short", ts_ms=ms(2027, 1, 1)), record_ts=ms(2027, 1, 1)),
        BOUNDS,
        CATALOG,
    ),
    ("ts 1 ms past the skew", lambda: record(event(ts_ms=T + SKEW + 1)), FUTURE, CATALOG),
    (
        "daily-only board closed 1 ms past its grace",
        lambda: record(event(game_id="daily"), record_ts=DAY_END + HOUR + 1),
        LATE,
        CATALOG,
    ),
    (
        "daily-only board a week late",
        lambda: record(event(game_id="daily"), record_ts=WEEK_END),
        LATE,
        CATALOG,
    ),
    ("game not in a catalog without [default]", lambda: record(), UNKNOWN_GAME, NO_DEFAULT),
    (
        "metadata over the default 512 bytes",
        lambda: record(event(metadata="x" * 513)),
        METADATA_TOO_LARGE,
        CATALOG,
    ),
    (
        "metadata of 2 characters, 6 UTF-8 bytes, over 4",
        lambda: record(event(game_id="tiny-meta", metadata="日本")),
        METADATA_TOO_LARGE,
        CATALOG,
    ),
    (
        "any metadata where the game takes none",
        lambda: record(event(game_id="no-meta", metadata="")),
        METADATA_TOO_LARGE,
        CATALOG,
    ),
    (
        "metadata changed after signing",
        lambda: record(event(metadata="car=red")._replace(metadata="car=blue")),
        SIGNATURE,
        CATALOG,
    ),
    (
        "metadata dropped after signing",
        lambda: record(event(metadata="car=red")._replace(metadata=None)),
        SIGNATURE,
        CATALOG,
    ),
    (
        "metadata added after signing",
        lambda: record(event()._replace(metadata="")),
        SIGNATURE,
        CATALOG,
    ),
]


@pytest.mark.parametrize(
    ("make", "code", "catalog"),
    [pytest.param(make, code, catalog, id=name) for name, make, code, catalog in DEAD],
)
def test_refused_records_carry_their_dead_letter_code(
    make: Callable[[], SourceRecord], code: str, catalog: GameCatalog
) -> None:
    rec = make()
    with pytest.raises(Rejected) as refused:
        validator(catalog).check(rec)
    assert refused.value.code == code
    assert refused.value.detail
    # The same record through check_batch: one dead letter with the original bytes.
    checked = validator(catalog).check_batch(RecordBatch("score-events", 3, (rec,)))
    assert checked.accepted == ()
    (letter,) = checked.dead
    assert (letter.topic, letter.partition, letter.code) == ("score-events", 3, code)
    assert letter.record is rec
    assert letter.detail == refused.value.detail


def test_every_code_is_covered_by_the_table() -> None:
    assert {code for _, _, code, _ in DEAD} == set(CODES)


def test_details_never_contain_the_secret() -> None:
    for name, make, _, catalog in DEAD:
        with pytest.raises(Rejected) as refused:
            validator(catalog).check(make())
        assert "11" * 16 not in refused.value.detail, name


# --- accepted records ------------------------------------------------------------------------

ALL = ("daily:2026-05-04", "weekly:2026-W19", "alltime")

ACCEPTED: list[tuple[str, Callable[[], SourceRecord], tuple[str, ...], GameCatalog]] = [
    ("on time: every board, narrowest first", lambda: record(), ALL, CATALOG),
    ("second live key", lambda: record(event("k2")), ALL, CATALOG),
    ("score 0", lambda: record(event(score=0)), ALL, CATALOG),
    ("metadata of exactly 512 bytes", lambda: record(event(metadata="é" * 256)), ALL, CATALOG),
    ("empty metadata", lambda: record(event(metadata="")), ALL, CATALOG),
    (
        "4 bytes of metadata where the game takes 4",
        lambda: record(event(game_id="tiny-meta", metadata="日x")),
        ALL,
        CATALOG,
    ),
    (
        "a v2 record without metadata",
        lambda: record(event(), value=CODEC.encode(event(), 2)),
        ALL,
        CATALOG,
    ),
    ("score exactly max", lambda: record(event(game_id="small", score=100)), ALL, CATALOG),
    (
        "retract above max_score (not bounded)",
        lambda: record(event(game_id="small", score=10**6, kind=EventKind.RETRACT)),
        ALL,
        CATALOG,
    ),
    ("ts exactly at the skew", lambda: record(event(ts_ms=T + SKEW)), ALL, CATALOG),
    (
        "ts at the all-time origin",
        lambda: record(event(ts_ms=ms(2020, 1, 1)), record_ts=ms(2020, 1, 1)),
        ("daily:2020-01-01", "weekly:2020-W01", "alltime"),
        CATALOG,
    ),
    (
        "last ms before the all-time end",
        lambda: record(event(game_id="short", ts_ms=ms(2027, 1, 1) - 1), record_ts=ms(2027, 1, 1)),
        ("daily:2026-12-31", "weekly:2026-W53", "alltime"),
        CATALOG,
    ),
    (
        "daily-only board at the very end of its grace",
        lambda: record(event(game_id="daily"), record_ts=DAY_END + HOUR),
        ("daily:2026-05-04",),
        CATALOG,
    ),
    (
        "daily board late, weekly still open",
        lambda: record(record_ts=DAY_END + HOUR + 1),
        ("weekly:2026-W19", "alltime"),
        CATALOG,
    ),
    (
        "daily and weekly boards late",
        lambda: record(record_ts=WEEK_END + HOUR + 1),
        ("alltime",),
        CATALOG,
    ),
    (
        "weekly board at the very end of its grace",
        lambda: record(record_ts=WEEK_END + HOUR),
        ("weekly:2026-W19", "alltime"),
        CATALOG,
    ),
    (
        "configured game without [default]",
        lambda: record(event(game_id="known")),
        ALL,
        NO_DEFAULT,
    ),
]


@pytest.mark.parametrize(
    ("make", "windows", "catalog"),
    [pytest.param(make, windows, catalog, id=name) for name, make, windows, catalog in ACCEPTED],
)
def test_accepted_records_carry_only_their_open_boards(
    make: Callable[[], SourceRecord], windows: tuple[str, ...], catalog: GameCatalog
) -> None:
    rec = make()
    accepted = validator(catalog).check(rec)
    assert tuple(w.id for w in accepted.windows) == windows
    assert accepted.offset == rec.offset
    assert accepted.record_ts_ms == rec.timestamp_ms
    assert rec.value is not None
    assert accepted.event == CODEC.decode(rec.value)
    game = catalog.lookup(accepted.event.game_id)
    assert accepted.game == game


def test_game_rules_come_from_the_catalog_and_its_default() -> None:
    check = validator()
    assert check.check(record(event(game_id="small", score=5))).game.max_score == 100
    assert check.check(record(event(game_id="anything-else"))).game.max_score == 1000


def test_a_game_is_judged_the_same_before_and_after_it_is_cached() -> None:
    check = validator()
    for _ in range(2):
        with pytest.raises(Rejected) as refused:
            check.check(record(event(game_id="small", score=101)))
        assert refused.value.code == BOUNDS
        assert check.check(record(event(game_id="small", score=100))).event.score == 100
    for _ in range(2):
        with pytest.raises(Rejected) as refused:
            validator(NO_DEFAULT).check(record(event(game_id="other")))
        assert refused.value.code == UNKNOWN_GAME


def test_windows_are_memoised_per_day_not_shared_across_days() -> None:
    check = validator()
    monday = check.check(record(event(ts_ms=T)))
    sunday = check.check(record(event(ts_ms=ms(2026, 5, 10, 23, 59, 59) + 999), record_ts=WEEK_END))
    next_monday = check.check(record(event(ts_ms=WEEK_END), record_ts=WEEK_END))
    assert [w.id for w in monday.windows] == list(ALL)
    assert [w.id for w in sunday.windows] == ["daily:2026-05-10", "weekly:2026-W19", "alltime"]
    assert [w.id for w in next_monday.windows] == ["daily:2026-05-11", "weekly:2026-W20", "alltime"]


# --- whole batches ---------------------------------------------------------------------------


def test_check_batch_keeps_order_and_places_every_record_once() -> None:
    records = (
        record(event(event_id="a"), offset=10),
        record(value=b"junk", offset=11),
        record(event(event_id="b", player_id="p2"), offset=12),
        record(event(event_id="c", score=-1), offset=13),
        record(event(event_id="d", player_id="p3"), offset=14),
        SourceRecord(15, T, b"p1", None),
    )
    checked = validator().check_batch(RecordBatch("score-events", 2, records))
    assert [a.offset for a in checked.accepted] == [10, 12, 14]
    assert [a.event.event_id for a in checked.accepted] == ["a", "b", "d"]
    assert [(d.record.offset, d.code) for d in checked.dead] == [
        (11, DECODE),
        (13, BOUNDS),
        (15, DECODE),
    ]
    assert (checked.topic, checked.partition, checked.last_offset) == ("score-events", 2, 15)


def test_last_offset_when_every_record_is_refused_and_when_the_batch_is_empty() -> None:
    dead = validator().check_batch(
        RecordBatch("t", 0, (record(value=b"x", offset=41), record(value=b"y", offset=42)))
    )
    assert dead.accepted == () and len(dead.dead) == 2
    assert dead.last_offset == 42
    empty = validator().check_batch(RecordBatch("t", 0, ()))
    assert (empty.accepted, empty.dead, empty.last_offset) == ((), (), -1)


_CASES = [(make, code) for _, make, code, catalog in DEAD if catalog is CATALOG] + [
    (make, None) for _, make, _, catalog in ACCEPTED if catalog is CATALOG
]


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.integers(0, len(_CASES) - 1), max_size=25))
def test_every_record_ends_in_exactly_one_place(picks: list[int]) -> None:
    records = tuple(_CASES[i][0]()._replace(offset=100 + n) for n, i in enumerate(picks))
    checked = validator().check_batch(RecordBatch("t", 1, records))
    accepted = [a.offset for a in checked.accepted]
    dead = [d.record.offset for d in checked.dead]
    assert sorted(accepted + dead) == [r.offset for r in records]
    assert accepted == sorted(accepted) and dead == sorted(dead)
    for n, i in enumerate(picks):
        expected = _CASES[i][1]
        if expected is None:
            assert 100 + n in accepted
        else:
            assert (100 + n, expected) in [(d.record.offset, d.code) for d in checked.dead]
    assert checked.last_offset == (records[-1].offset if records else -1)


@pytest.mark.parametrize("ts", [-62_135_596_800_001, -(10**15)])
def test_an_unrepresentable_ts_is_dead_lettered_not_raised(ts: int) -> None:
    # A game without an all-time board has no ts range of its own: a time with no
    # window id (before year 1) must still be refused, never crash the job.
    with pytest.raises(Rejected) as refused:
        validator().check(record(event(game_id="daily", ts_ms=ts)))
    assert refused.value.code == BOUNDS


@pytest.mark.parametrize(
    ("make", "metadata"),
    [
        pytest.param(lambda: CODEC.encode(event()), None, id="v1"),
        pytest.param(lambda: CODEC.encode(event(), 2), None, id="v2 without metadata"),
        pytest.param(lambda: CODEC.encode(event(metadata="Zoë | 🏎")), "Zoë | 🏎", id="v2"),
        pytest.param(lambda: CODEC.encode(event(metadata="")), "", id="v2 empty metadata"),
    ],
)
def test_the_accepted_event_carries_its_metadata(
    make: Callable[[], bytes], metadata: str | None
) -> None:
    accepted = validator().check(record(value=make()))
    assert accepted.event.metadata == metadata
