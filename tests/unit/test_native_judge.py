"""The validation rules' compiled common case (``lb_native.JudgeKernel``) against Python.

``Validator._judge`` is the reference: a batch checked with the kernel and
without it must give the same accepted records (the same ``Accepted``
tuples, windows included) and the same dead letters with the same codes and
details, in the same order. Generated batches mix ``test_validation``'s
accepted and refused records and move their event and record times around
the boundaries the rules have (the future skew, a board's close plus its
lateness, the all-time range), so the same game and quarter hour come back
within a batch (the kernel's memoised path) and across batches.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import validation as module
from domain.games import GameCatalog
from domain.records import RecordBatch, SourceRecord
from domain.validation import Validator
from schemas.decode_verify import decode_verifier
from tests.unit.test_validation import _CASES, CATALOG, CODEC, HOUR, KEYS, SKEW, T, event, record

KERNEL = module.KERNEL

#: Shifts of event time and record time around the rules' boundaries.
_SHIFTS = (0, 1, -1, SKEW, SKEW + 1, HOUR, 24 * HOUR, 24 * HOUR + HOUR + 1, 8 * 24 * HOUR)
_GAMES = ("g", "small", "daily", "short", "tiny-meta", "no-meta")


def _mostly(common: object, *rare: object) -> st.SearchStrategy[Any]:
    """``common`` three times in four, else one of ``rare``: the memoised path must be met."""
    return st.one_of(st.just(common), st.just(common), st.just(common), st.sampled_from(rare))


@st.composite
def records(draw: st.DrawFn) -> SourceRecord:
    """A record of ``test_validation``'s cases, or a fresh event with shifted times."""
    if draw(st.integers(0, 3)) == 0:
        make, _ = _CASES[draw(st.integers(0, len(_CASES) - 1))]
        return make()
    ts = T + draw(_mostly(0, *_SHIFTS)) * draw(st.sampled_from((1, -1)))
    record_ts = ts + draw(_mostly(0, *_SHIFTS)) * draw(st.sampled_from((1, -1)))
    ev = event(
        event_id=f"e{draw(st.integers(0, 5))}",
        game_id=draw(_mostly(*_GAMES)),
        player_id=draw(_mostly("p1", "p2", "p" * 128, "é")),
        score=draw(st.sampled_from((0, 1, 100, 101, 1000, 1001))),
        ts_ms=ts,
        metadata=draw(_mostly(None, "", "ab", "x" * 600)),
    )
    key = draw(_mostly(None, b"p2"))
    return record(ev, record_ts=record_ts, key=key)


def checked(batches: list[list[SourceRecord]], kernel: Any, catalog: GameCatalog) -> list[Any]:
    """Each batch through one validator (its memos carry over), with ``kernel`` or without."""
    saved = module.KERNEL
    module.KERNEL = kernel
    try:
        validator = Validator(catalog, decode_verifier(KEYS, CODEC, "native"))
        out = []
        for n, batch in enumerate(batches):
            numbered = tuple(r._replace(offset=100 * n + i) for i, r in enumerate(batch))
            out.append(validator.check_batch(RecordBatch("t", 3, numbered)))
        return out
    finally:
        module.KERNEL = saved


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(records(), max_size=30), min_size=1, max_size=4))
def test_the_compiled_common_case_judges_what_python_judges(
    batches: list[list[SourceRecord]],
) -> None:
    assert KERNEL is not None, "lb_native is not built: run scripts/bootstrap.sh"
    assert checked(batches, KERNEL, CATALOG) == checked(batches, None, CATALOG)


def test_the_common_case_asks_python_once_per_game_and_quarter_hour() -> None:
    assert KERNEL is not None, "lb_native is not built: run scripts/bootstrap.sh"
    validator = Validator(CATALOG, decode_verifier(KEYS, CODEC, "native"))
    judged: list[int] = []
    reference = validator._judge

    def counted(*args: Any) -> Any:
        judged.append(args[0].offset)
        return reference(*args)

    validator._judge = counted  # type: ignore[method-assign,assignment]
    rnd = random.Random(7)
    batch = tuple(
        record(event(event_id=f"e{i}", player_id=f"p{rnd.randrange(9)}"), offset=i)
        for i in range(50)
    )
    result = validator.check_batch(RecordBatch("t", 0, batch))
    assert [a.offset for a in result.accepted] == list(range(50)) and not result.dead
    assert judged == [0]  # the game's rules and the quarter hour's windows, memoised once


def test_the_kernel_refuses_what_it_cannot_fill() -> None:
    assert KERNEL is not None, "lb_native is not built: run scripts/bootstrap.sh"
    make: Any = type(KERNEL)
    fields = (list(SourceRecord._fields), ["event_id"])
    with pytest.raises(ValueError, match="NamedTuple of 5 fields"):
        make(None, SourceRecord, *fields, 128, 900_000)
    with pytest.raises(ValueError, match='lack "game_id"'):
        make(None, module.Accepted, *fields, 128, 900_000)
