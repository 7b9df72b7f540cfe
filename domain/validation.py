"""Turn decoded events into accepted board updates or dead letters.

Every rule here is judged against the record's own Kafka timestamp and the
event's own fields, never the wall clock, so a replay of the topic makes
exactly the same decisions. The checks run cheapest-first, and the signature
is verified before any field is trusted (bounds on a forged event mean nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from domain.errors import CodecError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, GameConfig, valid_game_id
from domain.records import Accepted, CheckedBatch, DeadLetter, RecordBatch, SourceRecord
from domain.signing import Keyring, Verdict, verify
from domain.windows import Window, WindowKind, window_for

#: Dead-letter codes (SPEC.md); every refused record carries exactly one.
DECODE = "DECODE"
SCHEMA = "SCHEMA"
SIGNATURE = "SIGNATURE"
UNKNOWN_KEY = "UNKNOWN_KEY"
BOUNDS = "BOUNDS"
FUTURE = "FUTURE"
LATE = "LATE"
UNKNOWN_GAME = "UNKNOWN_GAME"
CODES = (DECODE, SCHEMA, SIGNATURE, UNKNOWN_KEY, BOUNDS, FUTURE, LATE, UNKNOWN_GAME)

MAX_ID_LENGTH = 128


class Rejected(Exception):
    """Internal signal: a record is refused with ``code`` (never escapes this module)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class WindowResolver:
    """Memoises the windows of a UTC day: every event of a day shares them.

    Computing ISO weeks per event would dominate validation at 100K events/s;
    one dict lookup per event does not.
    """

    def __init__(self) -> None:
        self._by_day: dict[tuple[int, tuple[WindowKind, ...]], tuple[Window, ...]] = {}

    def windows(self, kinds: tuple[WindowKind, ...], ts_ms: int) -> tuple[Window, ...]:
        key = (ts_ms // 86_400_000, kinds)
        found = self._by_day.get(key)
        if found is None:
            if len(self._by_day) > 4096:
                self._by_day.clear()
            found = tuple(window_for(kind, ts_ms) for kind in kinds)
            self._by_day[key] = found
        return found


class Validator:
    """The validation rules of one job, built once from its catalog and keyring."""

    def __init__(
        self,
        catalog: GameCatalog,
        keyring: Keyring,
        decode: Callable[[bytes], ScoreEvent],
    ) -> None:
        self._catalog = catalog
        self._keyring = keyring
        self._decode = decode
        self._resolver = WindowResolver()
        self._games: dict[str, GameConfig | None] = {}

    def check_batch(self, batch: RecordBatch) -> CheckedBatch:
        """Split one partition batch into accepted events and dead letters."""
        accepted: list[Accepted] = []
        dead: list[DeadLetter] = []
        for record in batch.records:
            try:
                accepted.append(self.check(record))
            except Rejected as why:
                dead.append(DeadLetter(batch.topic, batch.partition, record, why.code, why.detail))
        last = batch.records[-1].offset if batch.records else -1
        return CheckedBatch(batch.topic, batch.partition, tuple(accepted), tuple(dead), last)

    def check(self, record: SourceRecord) -> Accepted:
        """Accept one record or raise :class:`Rejected` with its dead-letter code."""
        if record.value is None:
            raise Rejected(DECODE, "record has no value (tombstone)")
        try:
            event = self._decode(record.value)
        except CodecError as exc:
            raise Rejected(exc.code, exc.detail) from None
        _check_identity(event, record)
        verdict = verify(self._keyring, event)
        if verdict is not Verdict.OK:
            if verdict is Verdict.UNKNOWN_KEY:
                raise Rejected(UNKNOWN_KEY, f"keyId {event.key_id!r} is not in the keyring")
            raise Rejected(SIGNATURE, f"signature does not match keyId {event.key_id!r}")
        game = self._game(event.game_id)
        if event.score < 0 or (event.kind is EventKind.SCORE and event.score > game.max_score):
            raise Rejected(BOUNDS, f"score {event.score} is outside [0, {game.max_score}]")
        if event.ts_ms > record.timestamp_ms + game.future_skew_ms:
            raise Rejected(
                FUTURE,
                f"ts {event.ts_ms} is {event.ts_ms - record.timestamp_ms} ms after the record "
                f"timestamp (allowed skew {game.future_skew_ms} ms)",
            )
        if WindowKind.ALLTIME in game.windows and not (
            game.alltime_origin_ms <= event.ts_ms < game.alltime_until_ms
        ):
            raise Rejected(
                BOUNDS,
                f"ts {event.ts_ms} is outside the all-time range "
                f"[{game.alltime_origin_ms}, {game.alltime_until_ms})",
            )
        windows = self._resolver.windows(game.windows, event.ts_ms)
        open_windows = tuple(w for w in windows if not game.is_late(w, record.timestamp_ms))
        if not open_windows:
            raise Rejected(
                LATE,
                f"every board of ts {event.ts_ms} closed more than "
                f"{game.lateness_ms} ms before the record timestamp {record.timestamp_ms}",
            )
        return Accepted(record.offset, record.timestamp_ms, event, game, open_windows)

    def _game(self, game_id: str) -> GameConfig:
        try:
            game = self._games[game_id]
        except KeyError:
            game = self._games[game_id] = self._catalog.lookup(game_id)
        if game is None:
            raise Rejected(
                UNKNOWN_GAME, f"game {game_id!r} is not configured and there is no default"
            )
        return game


def _check_identity(event: ScoreEvent, record: SourceRecord) -> None:
    if not valid_game_id(event.game_id):
        raise Rejected(SCHEMA, f"gameId {event.game_id[:80]!r} is not [A-Za-z0-9._-]{{1,64}}")
    for name, value in (("eventId", event.event_id), ("playerId", event.player_id)):
        if not 0 < len(value) <= MAX_ID_LENGTH:
            raise Rejected(
                SCHEMA, f"{name} must be 1..{MAX_ID_LENGTH} characters, got {len(value)}"
            )
    # The key decides the partition, and one partition owns a player: a record
    # keyed otherwise could be applied out of order by another worker.
    if record.key != event.player_id.encode():
        raise Rejected(SCHEMA, "record key must be the UTF-8 playerId")


def partition_dead(batches: Iterable[CheckedBatch]) -> list[DeadLetter]:
    """All dead letters of some batches, in order (for the dead-letter sink)."""
    return [letter for batch in batches for letter in batch.dead]
