"""The load generator: determinism, distributions, ratios, and an oracle per record."""

from __future__ import annotations

import math
import random
import re
import statistics
from collections import Counter

import pytest

from domain.errors import CodecError, ConfigError
from domain.events import EventKind
from domain.games import GameConfig
from domain.signing import Keyring, Verdict, parse_keyring, verify
from producer.loadgen import (
    BAD_CODES,
    DUPLICATE,
    OK,
    GeneratedRecord,
    LoadConfig,
    LoadGenerator,
)
from producer.zipf import ZipfSampler, zipf_pmf
from schemas.codec import ScoreEventCodec

START_MS = 1_777_900_000_000  # 2026-05-04
KEYS = "k1:" + "11" * 32 + ",k2:" + "22" * 32


@pytest.fixture(scope="module")
def codec() -> ScoreEventCodec:
    return ScoreEventCodec.from_registry()


@pytest.fixture(scope="module")
def keyring() -> Keyring:
    return parse_keyring(KEYS)


def _generate(
    codec: ScoreEventCodec, keyring: Keyring, count: int, **config: object
) -> list[GeneratedRecord]:
    cfg = LoadConfig(start_ms=START_MS, **config)
    return list(LoadGenerator(cfg, keyring, codec).records(count))


# -- Zipf ---------------------------------------------------------------------


@pytest.mark.parametrize(("n", "s"), [(1000, 1.1), (1000, 1.0), (50, 2.0), (200, 0.5), (1, 1.2)])
def test_zipf_frequencies_match_the_distribution(n: int, s: float) -> None:
    samples = 200_000
    sampler = ZipfSampler(n, s, random.Random(42))
    counts = Counter(sampler.sample() for _ in range(samples))
    assert min(counts) >= 1 and max(counts) <= n
    pmf = zipf_pmf(n, s)
    # Total variation distance between empirical and exact distributions.
    tvd = 0.5 * sum(abs(counts.get(k, 0) / samples - pmf[k - 1]) for k in range(1, n + 1))
    assert tvd < 0.02
    # The head, rank by rank, within 5 standard errors.
    for k in range(1, min(n, 10) + 1):
        p = pmf[k - 1]
        sigma = math.sqrt(p * (1 - p) / samples)
        assert abs(counts.get(k, 0) / samples - p) <= 5 * sigma + 1e-12, k


def test_zipf_over_ten_million_players_is_cheap_and_in_range() -> None:
    sampler = ZipfSampler(10_000_000, 1.1, random.Random(7))
    ranks = [sampler.sample() for _ in range(50_000)]
    assert min(ranks) >= 1 and max(ranks) <= 10_000_000
    assert max(ranks) > 1_000_000  # the long tail is reached
    # P(rank 1) = 1 / H(n, s); H by Euler-Maclaurin with zeta(1.1) = 10.5844484...
    h = 10.584448464950810 - 10_000_000**-0.1 / 0.1 + 0.5 * 10_000_000**-1.1
    p1 = 1 / h
    share = ranks.count(1) / len(ranks)
    assert abs(share - p1) < 5 * math.sqrt(p1 * (1 - p1) / len(ranks))


def test_zipf_refuses_bad_parameters() -> None:
    with pytest.raises(ConfigError):
        ZipfSampler(0, 1.1, random.Random())
    with pytest.raises(ConfigError):
        ZipfSampler(10, 0.0, random.Random())


# -- determinism and shape ------------------------------------------------------


def test_same_seed_same_bytes_and_streams_continue(
    codec: ScoreEventCodec, keyring: Keyring
) -> None:
    config = {"seed": 5, "dup_ratio": 0.1, "bad_ratio": 0.2, "retract_ratio": 0.1}
    first = _generate(codec, keyring, 500, **config)
    assert _generate(codec, keyring, 500, **config) == first
    generator = LoadGenerator(LoadConfig(start_ms=START_MS, **config), keyring, codec)
    assert list(generator.records(200)) + list(generator.records(300)) == first
    other = _generate(codec, keyring, 500, **{**config, "seed": 6})
    ids = {r.event.event_id for r in first if r.event}
    assert not ids & {r.event.event_id for r in other if r.event}


def test_timestamps_follow_start_and_rate(codec: ScoreEventCodec, keyring: Keyring) -> None:
    records = _generate(codec, keyring, 1000, rate=300.0, max_lag_ms=250, dup_ratio=0.05)
    for i, record in enumerate(records):
        assert record.timestamp_ms == START_MS + int(i * 1000 / 300.0)
        if record.expected == OK:
            assert record.event is not None
            assert record.timestamp_ms - 250 <= record.event.ts_ms <= record.timestamp_ms


def test_ids_keys_and_games(codec: ScoreEventCodec, keyring: Keyring) -> None:
    records = _generate(
        codec, keyring, 3000, players=10_000_000, games=("g1", "g2", "g3"), dup_ratio=0.1
    )
    originals = [r for r in records if r.expected == OK]
    event_ids = [r.event.event_id for r in originals if r.event]
    assert len(set(event_ids)) == len(event_ids)
    for record in originals:
        assert record.event is not None
        assert re.fullmatch(r"p\d{7}", record.event.player_id)
        assert record.key == record.event.player_id.encode()
        assert record.event.game_id in {"g1", "g2", "g3"}
    assert {r.event.game_id for r in originals if r.event} == {"g1", "g2", "g3"}
    assert {r.event.key_id for r in originals if r.event} == {"k1", "k2"}
    assert any(int(r.event.player_id[1:]) > 100_000 for r in originals if r.event)


def test_uniform_players_when_zipf_is_zero(codec: ScoreEventCodec, keyring: Keyring) -> None:
    records = _generate(codec, keyring, 5000, players=10, zipf_s=0.0)
    counts = Counter(r.event.player_id for r in records if r.event)
    assert set(counts) == {f"p{i:07d}" for i in range(10)}
    assert max(counts.values()) < 2 * min(counts.values())


def test_score_distributions(codec: ScoreEventCodec, keyring: Keyring) -> None:
    uniform = [
        r.event.score
        for r in _generate(codec, keyring, 4000, score_dist="uniform", max_score=1000)
        if r.event
    ]
    assert min(uniform) >= 0 and max(uniform) <= 1000
    assert abs(statistics.mean(uniform) - 500) < 30
    lognormal = [
        r.event.score
        for r in _generate(codec, keyring, 4000, lognormal_mu=7.0, lognormal_sigma=1.0)
        if r.event
    ]
    assert abs(statistics.median(lognormal) / math.exp(7.0) - 1) < 0.1
    clipped = [
        r.event.score
        for r in _generate(codec, keyring, 2000, lognormal_mu=7.0, max_score=500)
        if r.event
    ]
    assert max(clipped) == 500 and min(clipped) >= 0


def test_defaults_match_the_jobs_built_in_game() -> None:
    game = GameConfig()
    config = LoadConfig(start_ms=START_MS)
    assert config.max_score == game.max_score
    assert config.future_skew_ms == game.future_skew_ms


def test_fast_encoder_writes_exactly_what_the_codec_writes(
    codec: ScoreEventCodec, keyring: Keyring
) -> None:
    records = _generate(codec, keyring, 3000, retract_ratio=0.3, players=10_000_000)
    for record in records:
        assert record.event is not None
        assert record.value == codec.encode(record.event)


# -- ratios and the oracle ---------------------------------------------------------


def test_every_kind_appears_at_its_ratio(codec: ScoreEventCodec, keyring: Keyring) -> None:
    count = 40_000
    dup, bad, retract = 0.05, 0.14, 0.1
    records = _generate(
        codec,
        keyring,
        count,
        dup_ratio=dup,
        bad_ratio=bad,
        retract_ratio=retract,
        unknown_games=("ghost",),
    )
    counts = Counter(r.expected for r in records)
    assert set(counts) == {OK, DUPLICATE, *BAD_CODES}
    expected_share = {OK: 1 - dup - bad, DUPLICATE: dup} | {c: bad / 7 for c in BAD_CODES}
    for name, share in expected_share.items():
        sigma = math.sqrt(share * (1 - share) / count)
        assert abs(counts[name] / count - share) < 5 * sigma, name
    valid = [r for r in records if r.expected == OK and r.event]
    retracts = sum(r.event.kind is EventKind.RETRACT for r in valid if r.event)
    sigma = math.sqrt(retract * (1 - retract) / len(valid))
    assert abs(retracts / len(valid) - retract) < 5 * sigma


def test_unknown_game_only_when_declared(codec: ScoreEventCodec, keyring: Keyring) -> None:
    records = _generate(codec, keyring, 3000, bad_ratio=0.5)
    counts = Counter(r.expected for r in records)
    assert "UNKNOWN_GAME" not in counts
    assert set(BAD_CODES) - {"UNKNOWN_GAME"} <= set(counts)
    only = _generate(codec, keyring, 300, bad_ratio=1.0, bad_kinds=("BOUNDS",))
    assert {r.expected for r in only} == {"BOUNDS"}


_VARIANTS = {
    "short": "shorter than",
    "magic": "magic byte",
    "truncated": "truncated Avro body",
    "trailing": "left after the record",
    "unknown id": "unknown schema id",
    "enum": "enum index",
    "utf-8": "UTF-8",
}


def test_each_record_fails_exactly_as_expected(codec: ScoreEventCodec, keyring: Keyring) -> None:
    max_score, skew = 100_000, 60_000
    records = _generate(
        codec,
        keyring,
        20_000,
        seed=3,
        dup_ratio=0.1,
        bad_ratio=0.35,
        retract_ratio=0.1,
        max_score=max_score,
        future_skew_ms=skew,
        unknown_games=("ghost", "old-game"),
        games=("g1", "g2"),
        max_lag_ms=500,
    )
    seen: dict[bytes, bytes] = {}  # value -> key of every earlier valid record
    variants: set[str] = set()
    for record in records:
        if record.expected in ("DECODE", "SCHEMA"):
            with pytest.raises(CodecError) as caught:
                codec.decode(record.value)
            assert caught.value.code == record.expected, caught.value.detail
            assert record.event is None
            variants.update(
                name for name, marker in _VARIANTS.items() if marker in caught.value.detail
            )
            continue
        event = codec.decode(record.value)
        assert event == record.event
        assert record.key == event.player_id.encode()
        verdict = verify(keyring, event)
        in_bounds = 0 <= event.score <= max_score
        on_time = event.ts_ms <= record.timestamp_ms + skew
        known_game = event.game_id in ("g1", "g2")
        if record.expected in (OK, DUPLICATE):
            assert verdict is Verdict.OK and in_bounds and on_time and known_game
            if record.expected == DUPLICATE:
                assert seen[record.value] == record.key
            else:
                assert record.value not in seen
                seen[record.value] = record.key
        elif record.expected == "SIGNATURE":
            assert verdict is Verdict.SIGNATURE and in_bounds and on_time and known_game
        elif record.expected == "UNKNOWN_KEY":
            assert verdict is Verdict.UNKNOWN_KEY and in_bounds and on_time and known_game
        elif record.expected == "BOUNDS":
            assert verdict is Verdict.OK and on_time and known_game
            assert event.score < 0 or (event.score > max_score and event.kind is EventKind.SCORE)
        elif record.expected == "FUTURE":
            assert verdict is Verdict.OK and in_bounds and known_game
            assert event.ts_ms > record.timestamp_ms + skew
        elif record.expected == "UNKNOWN_GAME":
            assert verdict is Verdict.OK and in_bounds and on_time
            assert event.game_id in ("ghost", "old-game")
        else:
            pytest.fail(f"unexpected outcome {record.expected!r}")
    # Every way of breaking a record was exercised.
    assert variants == set(_VARIANTS)


def test_bad_records_stay_replayable_by_key(codec: ScoreEventCodec, keyring: Keyring) -> None:
    for record in _generate(codec, keyring, 2000, bad_ratio=1.0):
        assert re.fullmatch(rb"p\d{7}", record.key)


# -- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"rate": 0},
        {"rate": -1.0},
        {"rate": math.inf},
        {"players": 0},
        {"players": 10_000_001},
        {"zipf_s": -0.5},
        {"games": ()},
        {"games": ("bad game",)},
        {"games": ("g1",), "unknown_games": ("g1",)},
        {"unknown_games": ("{tag}",)},
        {"score_dist": "normal"},
        {"max_score": 0},
        {"dup_ratio": 1.5},
        {"dup_ratio": 0.6, "bad_ratio": 0.6},
        {"retract_ratio": -0.1},
        {"bad_kinds": ("LATE",)},
        {"bad_kinds": ("UNKNOWN_GAME",)},
        {"bad_ratio": 0.1, "bad_kinds": ()},
        {"dup_window": 0},
        {"future_skew_ms": -1},
    ],
)
def test_bad_configs_are_refused(config: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        LoadConfig(start_ms=START_MS, **config)


def test_key_ids_must_be_in_the_keyring(codec: ScoreEventCodec, keyring: Keyring) -> None:
    with pytest.raises(ConfigError, match="k9"):
        LoadGenerator(LoadConfig(start_ms=START_MS, key_ids=("k9",)), keyring, codec)
    only_k2 = _generate(codec, keyring, 50, key_ids=("k2",))
    assert {r.event.key_id for r in only_k2 if r.event} == {"k2"}
    with pytest.raises(ConfigError):
        list(LoadGenerator(LoadConfig(start_ms=START_MS), keyring, codec).records(-1))


def test_bounds_records_exceed_the_largest_max_score_of_the_job(
    codec: ScoreEventCodec, keyring: Keyring
) -> None:
    # Valid scores stay under the lowest max_score of the games, BOUNDS ones above
    # the highest: a game with a larger max_score must not accept them.
    records = _generate(
        codec,
        keyring,
        3000,
        max_score=1000,
        job_max_score=10**12,
        bad_ratio=0.5,
        bad_kinds=("BOUNDS",),
        score_dist="uniform",
    )
    bounds = [r.event for r in records if r.expected == "BOUNDS" and r.event is not None]
    assert len(bounds) > 1000
    assert all(e.score < 0 or e.score > 10**12 for e in bounds)
    assert any(e.score > 10**12 for e in bounds)
    valid = [r.event for r in records if r.expected == "ok" and r.event is not None]
    assert valid and all(0 <= e.score <= 1000 for e in valid)
