"""The compiled fingerprint layout (``lb_native.SeenBags``) against the Python reference.

``domain.planner.dedupe.SeenLayout`` with ``compiled=False`` is the reference;
the same layout with its compiled twin must give the same tokens, the same
lookups in the same order, the same findings and the same appends, for any
event ids, buckets (negative, sparse, repeated) and stored bags (including
bags that hold other ids, garbage or a truncated entry). The decisions the
planner takes with either are compared end to end in
tests/unit/test_dedupe_layout.py's stream properties, which run the default
(compiled) layout against the full-id rule.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.keys import GroupKeys
from domain.planner import BoardPlanner
from domain.planner.dedupe import PLANNED_RATE, SeenLayout, Token

KEYS = GroupKeys("t", "ga")

#: (horizon ms, split, field bytes): the default sizing, small and large splits,
#: one-byte fields (many collisions) and the widest field the compiled layout holds.
LAYOUTS = (
    (300_000, SeenLayout.sized(300_000, PLANNED_RATE).split, 6),
    (1_000, 4, 6),
    (1_000, 1, 1),
    (60_000, 64, 2),
    (2**40, 2**20, 13),
    (7, 2**62, 8),
)


def twins(horizon_ms: int, split: int, field_bytes: int) -> tuple[SeenLayout, SeenLayout]:
    """The reference and the compiled layout of the same shape."""
    python = SeenLayout(horizon_ms, split, field_bytes, compiled=False)
    native = SeenLayout(horizon_ms, split, field_bytes)
    assert not python.is_compiled
    assert native.is_compiled, "lb_native is not built: run scripts/bootstrap.sh"
    return python, native


layouts = st.sampled_from(LAYOUTS)
ids = st.text(min_size=0, max_size=40)


@settings(max_examples=200)
@given(layouts, st.lists(ids, max_size=30))
def test_tokens_are_the_references(shape: tuple[int, int, int], events: list[str]) -> None:
    python, native = twins(*shape)
    assert [native.tokenizer(e) for e in events] == [python.token(e) for e in events]
    assert [native.token(e) for e in events] == [python.tokenizer(e) for e in events]


@st.composite
def buckets(draw: st.DrawFn, layout: SeenLayout) -> dict[int, list[Token]]:
    """Record buckets (some adjacent, one possibly negative) and their tokens, repeats allowed."""
    pool = [layout.token(f"e{i}") for i in range(draw(st.integers(1, 40)))]
    base = draw(st.integers(-2, 10**6))
    out: dict[int, list[Token]] = {}
    for _ in range(draw(st.integers(0, 12))):
        bucket = base + draw(st.integers(0, 6))
        out.setdefault(bucket, []).extend(draw(st.lists(st.sampled_from(pool), max_size=8)))
    return out


@settings(max_examples=200)
@given(layouts, st.data())
def test_lookups_are_the_references_in_the_same_order(
    shape: tuple[int, int, int], data: st.DataObject
) -> None:
    python, native = twins(*shape)
    asked = data.draw(buckets(python))
    expected = python.reads(KEYS, asked)
    assert native.reads(KEYS, asked) == expected
    for key, _ in expected[0]:
        assert key.startswith(KEYS.seen_parts)


@settings(max_examples=200)
@given(layouts, st.data())
def test_appends_and_findings_are_the_references(
    shape: tuple[int, int, int], data: st.DataObject
) -> None:
    python, native = twins(*shape)
    horizon = python.horizon_ms
    written: dict[int, dict[Token, int]] = {}
    for i in range(data.draw(st.integers(0, 40))):
        ts = data.draw(st.integers(0, 20 * horizon))
        written.setdefault(ts // horizon, {})[python.token(f"e{i}")] = ts
    appended = python.writes(KEYS, written)
    assert native.writes(KEYS, written) == appended
    assert [list(v) for v in native.writes(KEYS, written).values()] == [
        list(v) for v in appended.values()
    ]
    # Redis as the appends leave it, plus bags that hold garbage or a torn entry.
    store = {
        key: {f: bytes(v) for f, v in fields.items() if isinstance(v, bytes)}
        for key, fields in appended.items()
    }
    asked = {b: list(t) for b, t in written.items()}
    for bucket, tokens in data.draw(buckets(python)).items():
        asked.setdefault(bucket, []).extend(tokens)
    reads, at = python.reads(KEYS, asked)
    junk = st.binary(max_size=3 * python.entry_bytes)
    values: list[list[bytes | int | None]] = []
    for key, fields in reads:
        row: list[bytes | int | None] = []
        for name in fields:
            bag = store.get(key, {}).get(name)
            if bag is None and data.draw(st.booleans()):
                bag = data.draw(junk)
            elif bag is not None and data.draw(st.integers(0, 9)) == 0:
                bag = bag[: data.draw(st.integers(0, len(bag)))]  # torn
            row.append(bag)
        values.append(row)
    assert native.found(at, values) == python.found(at, values)


def test_a_layout_too_wide_for_the_compiled_twin_stays_python() -> None:
    wide = SeenLayout(1_000, 2**20, 16)  # 148-bit tokens
    assert not wide.is_compiled
    assert wide.token("e1") == SeenLayout(1_000, 2**20, 16, compiled=False).token("e1")
    assert not SeenLayout(1_000, 0).is_compiled  # full ids: nothing to compile


def test_the_planner_uses_the_compiled_layout_by_default() -> None:
    layout = SeenLayout.sized(300_000)
    assert layout.is_compiled and layout == SeenLayout.sized(300_000, compiled=False)
    assert BoardPlanner("t", 300_000)._layout.is_compiled


@pytest.mark.parametrize("compiled", [False, True])
def test_mismatched_answers_are_refused_either_way(compiled: bool) -> None:
    layout = SeenLayout(1_000, 4, compiled=compiled)
    _, at = layout.reads(KEYS, {5: [layout.token("e1")]})
    with pytest.raises(ValueError):
        layout.found(at, [])
    with pytest.raises(ValueError):
        layout.found(at, [[None, None]] * len(at))
