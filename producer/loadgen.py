"""Deterministic load generator: signed, encoded score records with known outcomes.

Feeds the tests, the demo (``lb produce``) and the benchmarks. Everything is a
function of the config and ``random.Random(seed)``: no wall clock, no I/O, so a
test can regenerate the exact stream it produced and use each record's
``expected`` outcome as its oracle:

* ``"ok"`` -- a valid event the job must apply (or find not better: an
  idempotent no-op is still "ok");
* ``"duplicate"`` -- the exact key and value bytes of a recent "ok" record,
  re-sent (a producer retry); the job must drop it by eventId;
* a dead-letter code -- a record the job must reject with that code. Only faults
  detectable from the record itself are generated, each record carrying exactly
  one fault so the code is unambiguous: DECODE, SCHEMA, SIGNATURE, UNKNOWN_KEY,
  BOUNDS (against ``max_score``), FUTURE (against the record's own timestamp
  plus ``future_skew_ms``) and UNKNOWN_GAME (only for games the caller declares
  unknown in ``unknown_games``).

Players are drawn from a Zipf distribution (a few players post most events, as
in real games) with Hörmann & Derflinger's rejection-inversion method: O(1)
memory and time per sample, so 10M players cost nothing to set up.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from domain.errors import ConfigError
from domain.events import EventKind, ScoreEvent
from domain.games import valid_game_id
from domain.signing import Keyring, canonical
from producer.v1_encoder import V1Encoder, avro_long, avro_string
from producer.zipf import ZipfSampler
from schemas.codec import HEADER_SIZE, ScoreEventCodec

OK = "ok"
DUPLICATE = "duplicate"
#: Dead-letter codes the generator can produce (those decidable from the record alone).
BAD_CODES: tuple[str, ...] = (
    "DECODE",
    "SCHEMA",
    "SIGNATURE",
    "UNKNOWN_KEY",
    "BOUNDS",
    "FUTURE",
    "UNKNOWN_GAME",
)
#: Every value ``GeneratedRecord.expected`` can take.
EXPECTED_VALUES: tuple[str, ...] = (OK, DUPLICATE, *BAD_CODES)
#: Player ids are ``p`` + 7 digits, hence the cap.
MAX_PLAYERS = 10_000_000
SCORE_DISTRIBUTIONS = ("lognormal", "uniform")
_PLAYER_CACHE = 1 << 16


class GeneratedRecord(NamedTuple):
    """One Kafka record to produce and what the job must do with it.

    A NamedTuple rather than a dataclass: it is built once per record on a
    100K+/s path and tuples are the cheapest immutable value Python has.
    ``event`` is what the job sees after a successful decode (for SIGNATURE,
    the tampered event); None for DECODE and SCHEMA records.
    """

    key: bytes
    value: bytes
    timestamp_ms: int
    expected: str
    event: ScoreEvent | None


@dataclass(frozen=True)
class LoadConfig:
    """What to generate; validated on construction (``ConfigError``).

    ``start_ms`` and ``rate`` (events per second) place record ``i`` at Kafka
    timestamp ``start_ms + i * 1000 / rate``; an event's ``ts`` is that minus a
    random lag of up to ``max_lag_ms``. Ratios are per record: ``dup_ratio``
    and ``bad_ratio`` of all records, ``retract_ratio`` of the valid events.
    Bad records are spread evenly over ``bad_kinds`` (default: every code in
    :data:`BAD_CODES`, UNKNOWN_GAME only when ``unknown_games`` is set).
    """

    start_ms: int
    rate: float = 1000.0
    seed: int = 0
    players: int = 100_000
    zipf_s: float = 1.1
    games: tuple[str, ...] = ("g1",)
    score_dist: str = "lognormal"
    #: Same default as the job's built-in game (domain/games.py).
    max_score: int = 10_000_000
    #: Parameters of the underlying normal distribution (median score = e**mu).
    lognormal_mu: float = 7.0
    lognormal_sigma: float = 1.5
    max_lag_ms: int = 0
    retract_ratio: float = 0.0
    dup_ratio: float = 0.0
    #: Duplicates repeat one of the last ``dup_window`` valid records, so they
    #: stay well inside the job's dedupe horizon.
    dup_window: int = 1024
    bad_ratio: float = 0.0
    bad_kinds: tuple[str, ...] | None = None
    unknown_games: tuple[str, ...] = ()
    #: Same default as the job's built-in game (domain/games.py).
    future_skew_ms: int = 300_000
    #: The largest ``max_score`` any of ``games`` has in the job (0: ``max_score``):
    #: BOUNDS records score above it, so they are out of bounds for every game.
    job_max_score: int = 0
    #: Keys to sign with, each event picks one at random (None: every key of the keyring).
    key_ids: tuple[str, ...] | None = None
    #: Metadata every valid SCORE event carries (written as schema v2); None: v1 events.
    metadata: str | None = None

    def __post_init__(self) -> None:
        self._check_shape()
        self._check_games()
        self._check_ratios()
        self._check_bad_kinds()

    def _check_shape(self) -> None:
        """Rate, players, distributions and time offsets."""
        if not self.rate > 0 or math.isinf(self.rate):
            raise ConfigError(f"rate must be a positive number of events/s, got {self.rate}")
        if not 1 <= self.players <= MAX_PLAYERS:
            raise ConfigError(f"players must be within 1..{MAX_PLAYERS}, got {self.players}")
        if not self.zipf_s >= 0 or math.isinf(self.zipf_s):
            raise ConfigError(f"zipf_s must be >= 0 (0 = uniform), got {self.zipf_s}")
        if self.score_dist not in SCORE_DISTRIBUTIONS:
            raise ConfigError(f"score_dist must be one of {SCORE_DISTRIBUTIONS}")
        if self.max_score < 1:
            raise ConfigError(f"max_score must be positive, got {self.max_score}")
        if self.lognormal_sigma < 0:
            raise ConfigError("lognormal_sigma must be >= 0")
        if self.max_lag_ms < 0 or self.future_skew_ms < 0:
            raise ConfigError("max_lag_ms and future_skew_ms must be >= 0")
        if self.dup_window < 1:
            raise ConfigError("dup_window must be at least 1")

    def _check_games(self) -> None:
        if not self.games:
            raise ConfigError("games must name at least one game")
        invalid = [g for g in (*self.games, *self.unknown_games) if not valid_game_id(g)]
        if invalid:
            # The job would dead-letter these as SCHEMA, not as what they stand for.
            raise ConfigError(f"game ids {invalid} are not [A-Za-z0-9._-]{{1,64}}")
        if set(self.games) & set(self.unknown_games):
            raise ConfigError("a game cannot be both known (games) and unknown (unknown_games)")

    def _check_ratios(self) -> None:
        for name in ("retract_ratio", "dup_ratio", "bad_ratio"):
            ratio = getattr(self, name)
            if not 0.0 <= ratio <= 1.0:
                raise ConfigError(f"{name} must be within 0..1, got {ratio}")
        if self.dup_ratio + self.bad_ratio > 1.0:
            raise ConfigError("dup_ratio + bad_ratio must not exceed 1")

    def _check_bad_kinds(self) -> None:
        kinds = self.effective_bad_kinds
        unknown = sorted(set(kinds) - set(BAD_CODES))
        if unknown:
            raise ConfigError(f"bad_kinds {unknown} are not generated; choose from {BAD_CODES}")
        if "UNKNOWN_GAME" in kinds and not self.unknown_games:
            raise ConfigError("bad kind UNKNOWN_GAME needs at least one game in unknown_games")
        if self.bad_ratio > 0 and not kinds:
            raise ConfigError("bad_ratio > 0 needs at least one bad kind")

    @property
    def effective_bad_kinds(self) -> tuple[str, ...]:
        """The dead-letter codes bad records are spread over."""
        if self.bad_kinds is not None:
            return self.bad_kinds
        return tuple(c for c in BAD_CODES if c != "UNKNOWN_GAME" or self.unknown_games)


class LoadGenerator:
    """Iterator source of :class:`GeneratedRecord`, deterministic per seed.

    Stateful: successive :meth:`records` calls continue one stream, so
    ``records(10)`` twice equals ``records(20)`` once. Every value depends only
    on the config, the keyring and the codec; the same inputs give the same bytes.
    """

    def __init__(self, config: LoadConfig, keyring: Keyring, codec: ScoreEventCodec) -> None:
        """Prepare the samplers; ``ConfigError`` if a configured key id is not in ``keyring``."""
        self.config = config
        self._keyring = keyring
        self._codec = codec
        key_ids = config.key_ids if config.key_ids is not None else keyring.key_ids
        missing = [k for k in key_ids if k not in keyring]
        if not key_ids or missing:
            raise ConfigError(f"key ids {missing} are not in the keyring")
        self._key_ids = tuple(key_ids)
        self._rng = random.Random(config.seed)
        rng = self._rng
        #: Distinguishes event ids of different seeds; same seed, same ids (replayable).
        self._id_prefix = f"{rng.getrandbits(48):012x}"
        self._zipf = ZipfSampler(config.players, config.zipf_s, rng) if config.zipf_s > 0 else None
        self._ms_per_event = 1000.0 / config.rate
        self._index = 0
        self._history: list[tuple[bytes, bytes, ScoreEvent]] = []
        self._history_next = 0
        self._bad_kinds = config.effective_bad_kinds
        rogue = "unknown-key"
        while rogue in keyring:
            rogue += "-x"
        #: Signs UNKNOWN_KEY records: a well-formed key the job has never heard of.
        self._rogue = Keyring({rogue: rng.randbytes(32)})
        self._unknown_schema_id = max(codec.schema_ids) + 1000
        self._encoder = V1Encoder(codec)
        #: Hot players' ids, prebuilt (Zipf sends most events to low ranks).
        self._player_ids = [f"p{i:07d}" for i in range(min(config.players, _PLAYER_CACHE))]

    def records(self, count: int) -> Iterator[GeneratedRecord]:
        """The next ``count`` records of the stream."""
        if count < 0:
            raise ConfigError(f"count must be >= 0, got {count}")
        cfg = self.config
        rng_random = self._rng.random
        dup_cut = cfg.dup_ratio
        bad_cut = cfg.dup_ratio + cfg.bad_ratio
        history = self._history
        window = cfg.dup_window
        for _ in range(count):
            index = self._index
            self._index = index + 1
            timestamp_ms = cfg.start_ms + int(index * self._ms_per_event)
            u = rng_random()
            if u < dup_cut and history:
                key, value, event = history[int(rng_random() * len(history))]
                yield GeneratedRecord(key, value, timestamp_ms, DUPLICATE, event)
            elif dup_cut <= u < bad_cut:
                kind = self._bad_kinds[int(rng_random() * len(self._bad_kinds))]
                yield self._bad(kind, timestamp_ms)
            else:
                event = self._event(timestamp_ms)
                key = event.player_id.encode()
                value = self._encode(event)
                if len(history) < window:
                    history.append((key, value, event))
                else:
                    history[self._history_next] = (key, value, event)
                    self._history_next = (self._history_next + 1) % window
                yield GeneratedRecord(key, value, timestamp_ms, OK, event)

    # -- valid events -----------------------------------------------------

    def _event(
        self,
        timestamp_ms: int,
        *,
        game_id: str | None = None,
        score: int | None = None,
        ts_ms: int | None = None,
        key_id: str | None = None,
        keyring: Keyring | None = None,
        kind: EventKind | None = None,
        plain: bool = False,
    ) -> ScoreEvent:
        """A validly signed event; keyword overrides make the bad variants.

        A SCORE event carries the configured metadata unless ``plain``.
        """
        cfg = self.config
        rng_random = self._rng.random
        games = cfg.games
        if game_id is None:
            game_id = games[int(rng_random() * len(games))] if len(games) > 1 else games[0]
        rank = (
            self._zipf.sample() if self._zipf is not None else 1 + int(rng_random() * cfg.players)
        )
        player_ids = self._player_ids
        player_id = player_ids[rank - 1] if rank <= len(player_ids) else f"p{rank - 1:07d}"
        if kind is None:
            kind = EventKind.SCORE
            if cfg.retract_ratio > 0 and rng_random() < cfg.retract_ratio:
                kind = EventKind.RETRACT
        if score is None:
            score = 0 if kind is EventKind.RETRACT else self._score()
        if ts_ms is None:
            ts_ms = timestamp_ms
            if cfg.max_lag_ms:
                ts_ms -= int(rng_random() * (cfg.max_lag_ms + 1))
        if key_id is None:
            keys = self._key_ids
            key_id = keys[int(rng_random() * len(keys))] if len(keys) > 1 else keys[0]
        event_id = f"{self._id_prefix}-{self._index:010x}"
        meta = None if plain or kind is EventKind.RETRACT else cfg.metadata
        sig = (keyring or self._keyring).digest(
            key_id, canonical(event_id, game_id, player_id, score, ts_ms, kind, meta)
        )
        assert sig is not None  # key ids were checked against the keyring in __init__
        return ScoreEvent(event_id, game_id, player_id, score, ts_ms, kind, key_id, sig, meta)

    def _encode(self, event: ScoreEvent) -> bytes:
        """v1 by the fast writer; an event with metadata by the codec (v2)."""
        if event.metadata is None:
            return self._encoder.encode(event)
        return self._codec.encode(event)

    def _score(self) -> int:
        cfg = self.config
        if cfg.score_dist == "uniform":
            return int(self._rng.random() * (cfg.max_score + 1))
        # gauss (Box-Muller, caches its pair) is about 2x faster than lognormvariate.
        value = math.exp(self._rng.gauss(cfg.lognormal_mu, cfg.lognormal_sigma))
        return min(int(value), cfg.max_score)

    # -- bad records ------------------------------------------------------

    def _bad(self, code: str, timestamp_ms: int) -> GeneratedRecord:
        """A record with exactly one fault, the one ``code`` names."""
        cfg = self.config
        rng = self._rng
        if code == "BOUNDS":
            if rng.random() < 0.5:
                score = -1 - rng.randrange(cfg.max_score + 1)
            else:
                score = max(cfg.max_score, cfg.job_max_score) + 1 + rng.randrange(cfg.max_score + 1)
            # A SCORE: the job does not bound a RETRACT's (ignored) score from above.
            event = self._event(timestamp_ms, score=score, kind=EventKind.SCORE)
            return self._encoded(code, event, timestamp_ms)
        if code == "FUTURE":
            ahead = cfg.future_skew_ms + 1 + rng.randrange(max(cfg.future_skew_ms, 1000))
            event = self._event(timestamp_ms, ts_ms=timestamp_ms + ahead)
            return self._encoded(code, event, timestamp_ms)
        if code == "UNKNOWN_GAME":
            game = cfg.unknown_games[rng.randrange(len(cfg.unknown_games))]
            return self._encoded(code, self._event(timestamp_ms, game_id=game), timestamp_ms)
        if code == "UNKNOWN_KEY":
            rogue = self._rogue
            event = self._event(timestamp_ms, key_id=rogue.key_ids[0], keyring=rogue)
            return self._encoded(code, event, timestamp_ms)
        if code == "SIGNATURE":
            event = self._event(timestamp_ms)
            if rng.random() < 0.5:  # a field changed after signing
                score = event.score + 1 if event.score < cfg.max_score else event.score - 1
                event = event._replace(score=score)
            else:  # the signature itself damaged
                position = rng.randrange(len(event.sig))
                sig = bytearray(event.sig)
                sig[position] ^= 1 << rng.randrange(8)
                event = event._replace(sig=bytes(sig))
            return self._encoded(code, event, timestamp_ms)
        event = self._event(timestamp_ms, plain=True)  # the byte surgery below is v1's
        value = self._encoder.encode(event)
        key = event.player_id.encode()
        if code == "DECODE":
            value = self._undecodable(value)
        elif code == "SCHEMA":
            value = self._off_schema(value, event)
        else:  # pragma: no cover - LoadConfig validates the kinds
            raise ConfigError(f"cannot generate bad kind {code!r}")
        return GeneratedRecord(key, value, timestamp_ms, code, None)

    def _encoded(self, code: str, event: ScoreEvent, timestamp_ms: int) -> GeneratedRecord:
        return GeneratedRecord(
            event.player_id.encode(), self._encode(event), timestamp_ms, code, event
        )

    def _undecodable(self, value: bytes) -> bytes:
        """Truncated, bad magic, random bytes or trailing garbage: all DECODE."""
        rng = self._rng
        variant = rng.randrange(4)
        if variant == 0:  # any strict prefix: the last field needs every byte
            return value[: rng.randrange(len(value))]
        if variant == 1:
            return bytes([1 + rng.randrange(255)]) + value[1:]
        if variant == 2:
            return bytes([1 + rng.randrange(255)]) + rng.randbytes(rng.randrange(64))
        return value + rng.randbytes(1 + rng.randrange(8))

    def _off_schema(self, value: bytes, event: ScoreEvent) -> bytes:
        """Unknown schema id, an invalid enum index or invalid UTF-8: all SCHEMA."""
        rng = self._rng
        variant = rng.randrange(3)
        if variant == 0:
            return b"\x00" + self._unknown_schema_id.to_bytes(4, "big") + value[HEADER_SIZE:]
        if variant == 1:
            # kind is followed only by keyId (string) and sig (bytes); its
            # index is one byte for any sane enum. -1 (0x01) is the case
            # fastavro would silently read as the last symbol.
            tail = len(avro_string(event.key_id)) + len(avro_long(len(event.sig))) + len(event.sig)
            position = len(value) - tail - 1
            bad_index = (0x01, 0x04, 0x7E)[rng.randrange(3)]  # zigzag of -1, 2, 63
            return value[:position] + bytes([bad_index]) + value[position + 1 :]
        # invalid UTF-8 in playerId (header, eventId, gameId come first)
        player = event.player_id.encode()
        position = (
            HEADER_SIZE
            + len(avro_string(event.event_id))
            + len(avro_string(event.game_id))
            + len(avro_long(len(player)))
        )
        return value[:position] + b"\xff" * len(player) + value[position + len(player) :]
