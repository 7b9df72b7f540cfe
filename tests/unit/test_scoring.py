from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import EncodingError
from domain.scoring import MAX_EXACT, TieCodec, TieResolution

DAY = 86_400_000
WEEK = 7 * DAY
ALLTIME_ORIGIN = 1_577_836_800_000  # 2020-01-01T00:00Z
ALLTIME_SPAN = 7305 * DAY  # 2020-01-01 .. 2040-01-01 (five leap days)


def test_constants_and_units() -> None:
    assert MAX_EXACT == 9_007_199_254_740_992
    assert TieResolution.MS.unit_ms == 1
    assert TieResolution.S.unit_ms == 1000
    assert TieResolution.MIN.unit_ms == 60_000
    assert TieResolution.NONE.unit_ms is None
    assert TieResolution("s") is TieResolution.S


@pytest.mark.parametrize(
    ("span", "resolution", "slots"),
    [
        (DAY, TieResolution.MS, 86_400_000),
        (DAY, TieResolution.S, 86_400),
        (DAY, TieResolution.MIN, 1440),
        (DAY, TieResolution.NONE, 1),
        (WEEK, TieResolution.S, 604_800),
        (1500, TieResolution.S, 2),
        (1000, TieResolution.S, 1),
        (1001, TieResolution.S, 2),
        (1, TieResolution.MIN, 1),
        (ALLTIME_SPAN, TieResolution.S, 631_152_000),
    ],
)
def test_slots(span: int, resolution: TieResolution, slots: int) -> None:
    assert TieCodec(0, span, resolution).slots == slots


def test_slot_bounds() -> None:
    codec = TieCodec(1_000, 2_500, TieResolution.S)
    assert [codec.slot(t) for t in (1_000, 1_999, 2_000, 2_999, 3_000, 3_499)] == [0, 0, 1, 1, 2, 2]
    for outside in (999, 3_500, -1, 10**15):
        with pytest.raises(EncodingError, match="outside"):
            codec.slot(outside)
    none = TieCodec(-5_000, 10_000, TieResolution.NONE)
    assert none.slot(-5_000) == 0
    assert none.slot(4_999) == 0
    with pytest.raises(EncodingError):
        none.slot(5_000)


def test_span_must_be_positive() -> None:
    for span in (0, -1):
        with pytest.raises(EncodingError):
            TieCodec(0, span, TieResolution.S)


def test_known_composites() -> None:
    codec = TieCodec(0, DAY, TieResolution.S)
    assert codec.compose(0, 86_399) == 0
    assert codec.compose(0, 0) == 86_399
    assert codec.compose(5, 0) == 5 * 86_400 + 86_399
    assert codec.compose(5, 10) == 5 * 86_400 + 86_389
    assert codec.encode(5, 10_999) == codec.compose(5, 10)
    assert codec.split(5 * 86_400 + 86_389) == (5, 10)
    assert TieCodec(0, DAY, TieResolution.NONE).compose(123, 0) == 123


CODECS = [
    TieCodec(0, DAY, TieResolution.MS),
    TieCodec(0, DAY, TieResolution.S),
    TieCodec(0, DAY, TieResolution.MIN),
    TieCodec(0, DAY, TieResolution.NONE),
    TieCodec(0, WEEK, TieResolution.MS),
    TieCodec(0, WEEK, TieResolution.S),
    TieCodec(ALLTIME_ORIGIN, ALLTIME_SPAN, TieResolution.MS),
    TieCodec(ALLTIME_ORIGIN, ALLTIME_SPAN, TieResolution.S),
    TieCodec(ALLTIME_ORIGIN, ALLTIME_SPAN, TieResolution.MIN),
    TieCodec(0, 3, TieResolution.MS),  # 2**53 is not a multiple of 3
    TieCodec(0, 1024, TieResolution.MS),  # ... but is a multiple of 1024
    TieCodec(0, 3_001, TieResolution.S),  # last slot is partial
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: f"{c.span_ms}-{c.resolution}")
def test_max_score_is_the_exact_edge(codec: TieCodec) -> None:
    top = codec.max_score
    slots = codec.slots
    # Independent statement of the bound: every slot of `top` fits, some slot of top+1 does not.
    assert (top + 1) * slots - 1 < 2**53
    assert (top + 2) * slots - 1 >= 2**53
    for slot in (0, slots // 2, slots - 1):
        composite = codec.compose(top, slot)
        assert composite < 2**53
        as_double = float(composite)
        assert int(as_double) == composite
        assert codec.split(as_double) == (top, slot)
        with pytest.raises(EncodingError, match="exceeds"):
            codec.compose(top + 1, slot)
    assert codec.compose(top, 0) == max(codec.compose(top, s) for s in (0, slots - 1))


def test_none_resolution_max_score() -> None:
    codec = TieCodec(0, DAY, TieResolution.NONE)
    assert codec.max_score == 2**53 - 1
    assert codec.split(float(2**53 - 1)) == (2**53 - 1, 0)
    with pytest.raises(EncodingError):
        codec.compose(2**53, 0)


def test_default_alltime_seconds_fit_ten_million() -> None:
    codec = TieCodec(ALLTIME_ORIGIN, ALLTIME_SPAN, TieResolution.S)
    assert codec.max_score == 2**53 // 631_152_000 - 1 == 14_271_045
    assert codec.compose(10_000_000, codec.slots - 1) < 2**53


@pytest.mark.parametrize(
    ("score", "slot"),
    [(-1, 0), (0, -1), (0, 86_400), (1, 10**9)],
)
def test_compose_refuses_out_of_range(score: int, slot: int) -> None:
    with pytest.raises(EncodingError):
        TieCodec(0, DAY, TieResolution.S).compose(score, slot)


@pytest.mark.parametrize(
    "value",
    [1.5, -1, -1.0, math.nan, math.inf, -math.inf, 2**53, float(2**53), 2.0**60, True],
)
def test_split_refuses_values_compose_cannot_make(value: float) -> None:
    with pytest.raises(EncodingError):
        TieCodec(0, DAY, TieResolution.S).split(value)


def test_split_refuses_score_above_max() -> None:
    codec = TieCodec(0, 3, TieResolution.MS)  # 2**53 = 3q + 2
    biggest = codec.compose(codec.max_score, 0)
    assert biggest == 2**53 - 3
    with pytest.raises(EncodingError):
        codec.split(2**53 - 1)  # would decode to max_score + 1


codec_and_events = st.sampled_from(CODECS).flatmap(
    lambda codec: st.tuples(
        st.just(codec),
        st.lists(
            st.tuples(
                st.integers(0, codec.max_score),
                st.integers(codec.origin_ms, codec.origin_ms + codec.span_ms - 1),
            ),
            min_size=2,
            max_size=30,
        ),
    )
)


@given(codec_and_events)
def test_composite_order_is_score_desc_then_time_asc(
    data: tuple[TieCodec, list[tuple[int, int]]],
) -> None:
    codec, events = data
    unit = codec.resolution.unit_ms
    # Independent slot: whole units elapsed since the origin (one slot when NONE).
    keyed = [(score, 0 if unit is None else (ts - codec.origin_ms) // unit) for score, ts in events]
    composites = [codec.encode(score, ts) for score, ts in events]
    by_composite = sorted(range(len(events)), key=lambda i: -composites[i])
    by_rule = sorted(range(len(events)), key=lambda i: (-keyed[i][0], keyed[i][1]))
    assert [keyed[i] for i in by_composite] == [keyed[i] for i in by_rule]
    for i in range(len(events)):
        for j in range(len(events)):
            assert (composites[i] == composites[j]) == (keyed[i] == keyed[j])


@given(codec_and_events)
def test_round_trip_through_double_is_exact(
    data: tuple[TieCodec, list[tuple[int, int]]],
) -> None:
    codec, events = data
    for score, ts in events:
        composite = codec.encode(score, ts)
        assert 0 <= composite < 2**53
        assert codec.split(float(composite)) == (score, codec.slot(ts))
        assert codec.split(composite) == (score, codec.slot(ts))
        # Order survives the double: distinct composites stay distinct and ordered.
        assert float(composite) != float(composite + 1) or composite + 1 >= 2**53
