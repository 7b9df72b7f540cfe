"""The pure half of approximate percentiles: sizing, building, merging, the byte format.

KLL compaction is randomised (DataSketches seeds it itself), so the error
checks compare against the sketch's own 99%-confidence *all-ranks* bound, over
data where the measured maximum error is under half of it
(``docs/PERCENTILES.md``): a failure means a real regression, not bad luck.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import EncodingError
from domain.games import GameConfig
from domain.ranking import percentile as exact_percentile
from domain.scoring import MAX_EXACT, TieCodec, TieResolution
from domain.sketches import (
    DEFAULT_K,
    HEADER_SIZE,
    PublishedSketch,
    build,
    k_for_rank_error,
    lower_count,
    merge,
    new_sketch,
    parse_header,
    percentile,
    rank_error,
    scores_from_composites,
    sketch_key,
    windows_to_publish,
)
from domain.windows import DAY_MS, WindowKind, window_for

T0 = 1_777_896_000_000  # 2026-05-04T12:00:00Z, a Monday


def board(players: int, rounds: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Current scores of players who improved ``rounds`` times, and every value posted."""
    rng = np.random.default_rng(seed)
    current = np.floor(rng.lognormal(7.0, 1.5, players)).astype(np.int64)
    posted = [current.copy()]
    for _ in range(rounds):
        movers = np.flatnonzero(rng.random(players) < 0.7)
        current[movers] += (
            np.floor(current[movers] * rng.uniform(0.01, 0.6, movers.size)).astype(np.int64) + 1
        )
        posted.append(current[movers].copy())
    return current, posted


def exact(current: np.ndarray, scores: np.ndarray) -> np.ndarray:
    lower = np.searchsorted(np.sort(current), scores, side="left")
    return np.floor(10_000 * lower / current.size) / 100


def max_error(sketch: object, current: np.ndarray) -> float:
    """Largest |sketch percentile - exact percentile| over every player of the board."""
    distinct = np.unique(current)
    approx = np.array([percentile(sketch, int(s)) for s in distinct])
    return float(np.abs(approx - exact(current, distinct)).max())


# --- sizing -----------------------------------------------------------------------------


def test_default_k_meets_the_half_point_target_for_all_ranks_at_once() -> None:
    assert 100 * rank_error(DEFAULT_K) < 0.5
    assert rank_error(DEFAULT_K, all_ranks=False) < rank_error(DEFAULT_K)


@pytest.mark.parametrize("target", [0.02, 0.005, 0.0036, 0.001])
def test_k_for_rank_error_is_the_smallest_k_that_reaches_the_target(target: float) -> None:
    k = k_for_rank_error(target)
    assert rank_error(k) <= target < rank_error(k - 1)


def test_sizes_outside_what_datasketches_builds_are_refused() -> None:
    for k in (0, 7, 65536, True):
        with pytest.raises(EncodingError):
            new_sketch(k)
    with pytest.raises(EncodingError):
        k_for_rank_error(1e-9)


# --- exactness while small, accuracy when large -----------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=300),
    st.lists(st.integers(0, 10_001), max_size=20),
)
def test_a_board_within_k_players_is_answered_exactly(scores: list[int], probes: list[int]) -> None:
    sketch = build(scores, k=300)
    assert not sketch.is_estimation_mode()
    for score in [*scores, *probes]:
        lower = sum(1 for s in scores if s < score)
        assert percentile(sketch, score) == exact_percentile(lower, len(scores))
        assert lower_count(sketch, score) == lower


def test_estimates_stay_within_the_stated_bound_with_players_improving() -> None:
    current, _ = board(200_000, rounds=4, seed=11)
    sketch = build(current)
    assert sketch.n == current.size  # one value per player, however often they improved
    assert max_error(sketch, current) <= 100 * rank_error(DEFAULT_K) + 0.01


def test_an_insert_only_sketch_counts_improvers_again_and_misses_the_target() -> None:
    current, posted = board(100_000, rounds=3, seed=5)
    inserted = new_sketch()
    for values in posted:
        inserted.update(values.astype(np.float64))
    assert inserted.n > 2.5 * current.size
    assert max_error(inserted, current) > 2.0  # the trap the current-values build avoids
    assert max_error(build(current), current) < 0.5


def test_an_iterator_is_consumed_in_batches_and_gives_the_same_answers() -> None:
    current, _ = board(150_000, rounds=2, seed=3)
    from_iter = build(iter(current.tolist()))
    assert from_iter.n == current.size
    assert max_error(from_iter, current) <= 100 * rank_error(DEFAULT_K) + 0.01


def test_empty_and_out_of_range_scores() -> None:
    assert percentile(new_sketch(), 5) is None
    assert lower_count(new_sketch(), 5) == 0
    current, _ = board(50_000, rounds=1, seed=2)
    sketch = build(current)
    assert percentile(sketch, int(current.min())) == 0.0
    assert percentile(sketch, int(current.max()) + 1) == 100.0


@pytest.mark.parametrize("bad", [[1.5], [-1], [float(MAX_EXACT)], [float("nan")]])
def test_build_refuses_what_no_board_holds(bad: list[float]) -> None:
    with pytest.raises(EncodingError):
        build(bad)


# --- merging shards ---------------------------------------------------------------------


def test_merged_shard_sketches_answer_like_one_sketch_of_the_union() -> None:
    current, _ = board(240_000, rounds=3, seed=17)
    shard = np.array([zlib.crc32(f"p{i}".encode()) % 4 for i in range(current.size)])
    parts = [build(current[shard == s]) for s in range(4)]
    merged = merge(parts)
    assert merged.n == current.size
    assert merged.k == DEFAULT_K
    bound = 100 * rank_error(DEFAULT_K) + 0.01
    assert max_error(merged, current) <= bound
    union = build(current)
    probes = np.unique(current)[::50]
    gap = max(
        abs(merged.get_rank(float(s), False) - union.get_rank(float(s), False)) for s in probes
    )
    assert 100 * gap <= 2 * bound


def test_merge_keeps_the_smallest_k_and_of_nothing_is_empty() -> None:
    assert merge([build([1, 2], k=400), build([3], k=200)]).k == 200
    assert merge([]).n == 0


# --- composites -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(TieResolution)), st.data())
def test_scores_from_composites_matches_the_codec(res: TieResolution, data: st.DataObject) -> None:
    codec = TieCodec(0, 7 * DAY_MS, res)
    pairs = data.draw(
        st.lists(
            st.tuples(st.integers(0, codec.max_score), st.integers(0, codec.slots - 1)),
            min_size=1,
            max_size=50,
        )
    )
    composites = [float(codec.compose(score, slot)) for score, slot in pairs]
    got = scores_from_composites(composites, codec)
    assert got.tolist() == [float(codec.split(c)[0]) for c in composites]


def test_scores_from_composites_refuses_foreign_values() -> None:
    codec = GameConfig().codec(window_for(WindowKind.ALLTIME, T0))
    for bad in ([1.5], [-1.0], [float(MAX_EXACT)], [float("inf")]):
        with pytest.raises(EncodingError):
            scores_from_composites(bad, codec)
    above = float((codec.max_score + 1) * codec.slots)
    if above < MAX_EXACT:
        with pytest.raises(EncodingError):
            scores_from_composites([above], codec)
    assert scores_from_composites([], codec).size == 0


# --- the published value ----------------------------------------------------------------


def test_published_sketch_round_trips_through_bytes() -> None:
    current, _ = board(120_000, rounds=2, seed=23)
    published = PublishedSketch("weekly:2026-W19", T0, 3, build(current))
    data = published.encode()
    header = parse_header(data[:HEADER_SIZE])
    assert (header.built_at_ms, header.n, header.shards, header.k) == (T0, 120_000, 3, DEFAULT_K)
    back = PublishedSketch.decode(data)
    assert (back.window_id, back.built_at_ms, back.shards, back.n, back.k) == (
        "weekly:2026-W19",
        T0,
        3,
        120_000,
        DEFAULT_K,
    )
    for score in np.unique(current)[::97].tolist():
        assert back.percentile(score) == published.percentile(score)
    assert len(data) < 30_000  # constant-size: ~24 KB at any number of players


def test_corrupt_values_are_refused() -> None:
    data = PublishedSketch("alltime", T0, 1, build(range(5000))).encode()
    for bad in (b"", b"LBSK", b"XXXX" + data[4:], data[:4] + b"\x09" + data[5:], data[:-10]):
        with pytest.raises(EncodingError):
            PublishedSketch.decode(bad)
    lying = bytearray(data)
    lying[16:24] = (4999).to_bytes(8, "big")  # header n disagrees with the sketch
    with pytest.raises(EncodingError):
        PublishedSketch.decode(bytes(lying))


def test_rank_error_of_an_exact_sketch_is_zero() -> None:
    assert PublishedSketch("alltime", 0, 1, build([1, 2, 3])).rank_error() == 0.0
    big = PublishedSketch("alltime", 0, 1, build(range(50_000)))
    assert big.rank_error() == rank_error(DEFAULT_K)


# --- keys and windows -------------------------------------------------------------------


def test_sketch_key_lives_in_the_games_own_hash_tag() -> None:
    assert sketch_key("lb", "g1", "weekly:2026-W18") == "lb:{g1}:meta:sketch:weekly:2026-W18"
    assert sketch_key("t9", "g1", "alltime") == "t9:{g1}:meta:sketch:alltime"


def ids(config: GameConfig, now_ms: int) -> list[str]:
    return [w.id for w in windows_to_publish(config, now_ms)]


def test_windows_to_publish_at_midday_are_the_current_ones() -> None:
    assert ids(GameConfig(), T0) == ["alltime", "weekly:2026-W19", "daily:2026-05-04"]


def test_windows_to_publish_keep_yesterday_while_late_events_may_reach_it() -> None:
    midnight = T0 - 12 * 3_600_000  # Monday 00:00: also the first minute of a new week
    config = GameConfig()
    assert ids(config, midnight + 60_000) == [
        "alltime",
        "weekly:2026-W19",
        "weekly:2026-W18",
        "daily:2026-05-04",
        "daily:2026-05-03",
    ]
    settled = midnight + config.lateness_ms + 15 * 60_000 + 1
    assert ids(config, settled) == ["alltime", "weekly:2026-W19", "daily:2026-05-04"]


def test_windows_to_publish_include_tomorrow_within_the_future_skew() -> None:
    before_midnight = T0 + 12 * 3_600_000 - 60_000
    config = GameConfig(windows=(WindowKind.DAILY,))
    assert ids(config, before_midnight) == ["daily:2026-05-05", "daily:2026-05-04"]
