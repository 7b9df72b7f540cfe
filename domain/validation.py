"""Turn decoded events into accepted board updates or dead letters.

Every rule here is judged against the record's own Kafka timestamp and the
event's own fields, never the wall clock, so a replay of the topic makes
exactly the same decisions. The checks run cheapest-first, and the signature
is verified before any field is trusted (bounds on a forged event mean nothing).

The common case (a decoded, signed event that passes every rule through the
game's memoised rules and windows) is also judged compiled,
``lb_native.JudgeKernel`` (``native/src/judge.rs``), whenever it is built; it
hands every other record back to :meth:`Validator._judge`, so the rules and the
dead letters' wording live here only (tests/unit/test_native_judge.py compares
the two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

from domain.compiled import built
from domain.erasure import ERASE_ALL_GAMES, ERASURE_GAME
from domain.errors import EncodingError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, GameConfig, valid_game_id
from domain.outcomes import CODES as CODES
from domain.records import Accepted, CheckedBatch, DeadLetter, RecordBatch, SourceRecord
from domain.windows import Window, WindowKind

#: Dead-letter codes (:class:`domain.outcomes.DeadLetterCode` as plain strings, SPEC.md);
#: every refused record carries exactly one.
(
    DECODE,
    SCHEMA,
    SIGNATURE,
    UNKNOWN_KEY,
    BOUNDS,
    FUTURE,
    LATE,
    UNKNOWN_GAME,
    METADATA_TOO_LARGE,
) = CODES

#: A batch's decode + signature outcome as three columns, one item per record:
#: ``(events, codes, details)``. Per record: ``event, None, None`` for a
#: decoded, correctly signed event; ``event, "SIGNATURE" | "UNKNOWN_KEY", None``
#: for a decoded event the keyring refuses (the detail is worded here, after
#: the field checks); ``None, "DECODE" | "SCHEMA", detail`` for bytes that are
#: no event. Columns, not a tuple per record: nothing is built per record but
#: the event.
Decoded = tuple[Sequence[ScoreEvent | None], Sequence[str | None], Sequence[str | None]]
#: Decodes and verifies a batch of record values (``schemas/decode_verify.py``
#: has the Python and the compiled engine).
DecodeVerify = Callable[[Sequence[bytes | None]], Decoded]

MAX_ID_LENGTH = 128
#: Windows are memoised per quarter hour of event time: every UTC offset, DST
#: transition and season boundary falls on one (domain.game_checks.QUARTER_HOUR_MS).
_MEMO_MS = 900_000


class CompiledJudge(Protocol):
    """``lb_native.JudgeKernel``: :meth:`Validator._judge`'s common case, compiled.

    It accepts a record only when every rule passes through what the rules
    have memoised (a game's :class:`_GameRules`, a quarter hour's windows) and
    builds the same :class:`Accepted`; every other record goes to ``slow``,
    which judges it here, so the rules and the dead letters' details stay in
    this module.
    """

    def judge(
        self,
        records: Sequence[SourceRecord],
        events: Sequence[ScoreEvent | None],
        codes: Sequence[str | None],
        details: Sequence[str | None],
        rules: dict[str, _GameRules],
        slow: Callable[[SourceRecord, ScoreEvent | None, str | None, str | None], None],
        accepted: list[Accepted],
    ) -> None: ...


def _kernel() -> CompiledJudge | None:
    kernel = built(
        "JudgeKernel",
        EventKind.SCORE,
        Accepted,
        list(SourceRecord._fields),
        list(ScoreEvent._fields),
        MAX_ID_LENGTH,
        _MEMO_MS,
    )
    return cast("CompiledJudge | None", kernel)


class Rejected(Exception):
    """Internal signal: a record is refused with ``code`` (never escapes this module)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class Validator:
    """The validation rules of one job, built once from its catalog and decode engine.

    Decoding and the signature check run for a whole batch in one call of
    ``decode_verify`` (compiled or Python, see ``schemas/decode_verify.py``);
    every other rule is here, in the order below, whichever engine ran.
    """

    def __init__(self, catalog: GameCatalog, decode_verify: DecodeVerify) -> None:
        self._catalog = catalog
        self._decode_verify = decode_verify
        self._rules: dict[str, _GameRules] = {}

    @property
    def catalog(self) -> GameCatalog:
        """The games it validates against (a planner's rules for erasure-only groups)."""
        return self._catalog

    def check_batch(self, batch: RecordBatch) -> CheckedBatch:
        """Split one partition batch into accepted events and dead letters."""
        accepted: list[Accepted] = []
        dead: list[DeadLetter] = []
        records = batch.records
        events, codes, details = self._decode_verify([record.value for record in records])
        judge = self._judge

        def file(
            record: SourceRecord, event: ScoreEvent | None, code: str | None, detail: str | None
        ) -> None:
            try:
                accepted.append(judge(record, event, code, detail))
            except Rejected as why:
                dead.append(DeadLetter(batch.topic, batch.partition, record, why.code, why.detail))

        if KERNEL is not None:
            KERNEL.judge(records, events, codes, details, self._rules, file, accepted)
        else:
            for record, event, code, detail in zip(records, events, codes, details, strict=True):
                file(record, event, code, detail)
        last = records[-1].offset if records else max(batch.next_offset, 0) - 1
        return CheckedBatch(
            batch.topic, batch.partition, tuple(accepted), tuple(dead), last, batch.generation
        )

    def check(self, record: SourceRecord) -> Accepted:
        """Accept one record or raise :class:`Rejected` with its dead-letter code."""
        events, codes, details = self._decode_verify([record.value])
        return self._judge(record, events[0], codes[0], details[0])

    def _judge(
        self, record: SourceRecord, event: ScoreEvent | None, code: str | None, detail: str | None
    ) -> Accepted:
        """The rules after decoding, on one record and its decode + verify outcome."""
        if record.value is None:
            raise Rejected(DECODE, "record has no value (tombstone)")
        if event is None:
            raise Rejected(code or DECODE, detail or "not a score event")
        rules = self._rules.get(event.game_id)
        if rules is None:
            if event.game_id == ERASE_ALL_GAMES:
                return _erasure(record, event, code)
            _check_game_id(event.game_id)
        _check_identity(event, record)
        if code is not None:  # the signature: checked before any field is trusted
            _check_signature(event, code)
        if rules is None:
            rules = self._rules_for(event.game_id)
        game = rules.game
        ts = event.ts_ms
        record_ts = record.timestamp_ms
        if event.score < 0 or (event.kind is EventKind.SCORE and event.score > game.max_score):
            raise Rejected(BOUNDS, f"score {event.score} is outside [0, {game.max_score}]")
        if event.metadata is not None:
            _check_metadata(event.metadata, game.metadata_max_bytes)
        if ts > record_ts + game.future_skew_ms:
            raise Rejected(
                FUTURE,
                f"ts {ts} is {ts - record_ts} ms after the record "
                f"timestamp (allowed skew {game.future_skew_ms} ms)",
            )
        if not rules.ts_low <= ts < rules.ts_high:
            raise Rejected(
                BOUNDS, f"ts {ts} is outside the all-time range [{rules.ts_low}, {rules.ts_high})"
            )
        try:
            windows, closes_ms = rules.windows_of(ts)
        except EncodingError as exc:  # e.g. a time before year 1: no window id exists
            raise Rejected(BOUNDS, f"ts {ts} has no board window: {exc}") from None
        if record_ts > closes_ms:  # some board has closed: keep only the open ones
            windows = tuple(w for w in windows if not game.is_late(w, record_ts))
            if not windows:
                raise Rejected(
                    LATE,
                    f"every board of ts {ts} closed more than "
                    f"{game.lateness_ms} ms before the record timestamp {record_ts}",
                )
        return Accepted(record.offset, record_ts, event, game, windows)

    def _rules_for(self, game_id: str) -> _GameRules:
        game = self._catalog.lookup(game_id)
        if game is None:
            raise Rejected(
                UNKNOWN_GAME, f"game {game_id!r} is not configured and there is no default"
            )
        if len(self._rules) > 100_000:
            self._rules.clear()
        rules = self._rules[game_id] = _GameRules(game)
        return rules


class _GameRules:
    """One game's checks, with its windows memoised per quarter hour.

    ``windows_of`` also returns the earliest time any of those boards closes
    (end + lateness), so the common case (nothing late) costs one comparison.
    """

    def __init__(self, game: GameConfig) -> None:
        self.game = game
        if WindowKind.ALLTIME in game.windows:
            self.ts_low, self.ts_high = game.alltime_origin_ms, game.alltime_until_ms
        else:
            self.ts_low, self.ts_high = -(2**62), 2**62
        self._by_day: dict[int, tuple[tuple[Window, ...], int]] = {}

    def windows_of(self, ts_ms: int) -> tuple[tuple[Window, ...], int]:
        day = ts_ms // _MEMO_MS
        found = self._by_day.get(day)
        if found is None:
            if len(self._by_day) > 4096:
                self._by_day.clear()
            # Narrowest first: the planner stops at the first board a BEST
            # event cannot improve, when wider boards hold at least as much.
            windows = self.game.windows_at(ts_ms)
            ends = [w.end_ms + self.game.lateness_ms for w in windows if w.end_ms is not None]
            found = (windows, min(ends, default=2**62))
            # A historic local-mean-time offset (years before ~1900) is not on a
            # quarter hour: such a bucket is computed per event, never memoised.
            if all(w.start_ms is None or w.start_ms % _MEMO_MS == 0 for w in windows) and all(
                w.end_ms is None or w.end_ms % _MEMO_MS == 0 for w in windows
            ):
                self._by_day[day] = found
        return found


def _check_signature(event: ScoreEvent, code: str | None) -> None:
    """Raise the decode engine's signature verdict, if it refused the event."""
    if code is not None:
        if code == UNKNOWN_KEY:
            raise Rejected(UNKNOWN_KEY, f"keyId {event.key_id!r} is not in the keyring")
        raise Rejected(SIGNATURE, f"signature does not match keyId {event.key_id!r}")


def _erasure(record: SourceRecord, event: ScoreEvent, code: str | None) -> Accepted:
    """An erasure record (``domain.erasure``): signed like an event, no game, no window."""
    _check_identity(event, record)
    _check_signature(event, code)
    if event.kind is not EventKind.RETRACT or event.score != 0:
        raise Rejected(
            SCHEMA,
            f"gameId {ERASE_ALL_GAMES!r} is reserved for erasures (kind RETRACT, score 0)",
        )
    return Accepted(record.offset, record.timestamp_ms, event, ERASURE_GAME, ())


def _check_game_id(game_id: str) -> None:
    if not valid_game_id(game_id):
        raise Rejected(SCHEMA, f"gameId {game_id[:80]!r} is not [A-Za-z0-9._-]{{1,64}}")


def metadata_bytes(metadata: str, limit: int) -> int | None:
    """The UTF-8 length of ``metadata`` when it exceeds ``limit`` bytes, else None.

    A character is 1 to 4 bytes, so a short string is judged by its length
    alone, without encoding it.
    """
    if len(metadata) * 4 <= limit:
        return None
    size = len(metadata.encode())
    return size if size > limit else None


def _check_metadata(metadata: str, limit: int) -> None:
    if limit == 0:
        raise Rejected(METADATA_TOO_LARGE, "the game takes no metadata (metadata_max_bytes = 0)")
    size = metadata_bytes(metadata, limit)
    if size is not None:
        raise Rejected(
            METADATA_TOO_LARGE,
            f"metadata is {size} UTF-8 bytes; the game takes at most {limit} (metadata_max_bytes)",
        )


def _check_identity(event: ScoreEvent, record: SourceRecord) -> None:
    if not 0 < len(event.event_id) <= MAX_ID_LENGTH:
        raise Rejected(
            SCHEMA, f"eventId must be 1..{MAX_ID_LENGTH} characters, got {len(event.event_id)}"
        )
    if not 0 < len(event.player_id) <= MAX_ID_LENGTH:
        raise Rejected(
            SCHEMA, f"playerId must be 1..{MAX_ID_LENGTH} characters, got {len(event.player_id)}"
        )
    # The key decides the partition, and one partition owns a player: a record
    # keyed otherwise could be applied out of order by another worker.
    if record.key != event.player_id.encode():
        raise Rejected(SCHEMA, "record key must be the UTF-8 playerId")


#: The compiled common case (None: :meth:`Validator._judge` judges every record).
KERNEL = _kernel()
