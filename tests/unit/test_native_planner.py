"""The planner's compiled passes against their Python references, read for read, plan for plan.

The compiled scan (``lb_native.ScanKernel``: the reads a group's records
need) and fold (``lb_native.FoldKernel``: the records over the players'
values) have ``domain.planner.scan._records`` and ``domain.planner.fold``'s
``_records`` and ``score`` as their references. The same generated streams as
``test_planner``'s oracle properties (every operator, highest and lowest wins,
tie-break slots, tournaments with caps and seats, RETRACTs, exact copies
within and beyond the horizon, record time going backwards, lateness) run
through the whole planner twice, once in Python and once compiled, with the
same batching, crashes and cache sizes. Every read the model is asked (in
order) and every write plan (board members, removals, dedupe ids, counters,
changes, cache entries) must be equal, and so must the projected store. A
third run routes every board value through the Python rules from inside the
compiled loop (a board whose ``apply`` the kernel does not know), the path an
unforeseen rule takes.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.events import ScoreEvent
from domain.operators import apply_composite, apply_composite_asc
from domain.planner import LookupResults, Lookups, WritePlan
from domain.planner import board_planner as planner_module
from domain.planner import fold as module
from domain.planner import scan as scan_module
from tests.unit.boardmodel import BoardModel
from tests.unit.test_planner import BIG_CACHE, PROPERTY, Scenario, run, scenarios

KERNEL = module.KERNEL
SCAN = scan_module.KERNEL


@contextmanager
def folding(
    kernel: Any, rules: tuple[Any, Any] | None = None
) -> Iterator[list[WritePlan | Lookups]]:
    """The reads and the plans the model is given, compiled with ``kernel`` (None: Python).

    ``kernel`` is the compiled fold; the compiled scan goes with it.
    """
    recorded: list[WritePlan | Lookups] = []
    original, read = BoardModel.apply, BoardModel.read

    def apply(self: BoardModel, plan: WritePlan, limit: int | None = None) -> list[int]:
        recorded.append(copy.deepcopy(plan))
        return original(self, plan, limit)

    def reading(self: BoardModel, lookups: Lookups) -> LookupResults:
        recorded.append(copy.deepcopy(lookups))
        return read(self, lookups)

    saved = module.KERNEL, planner_module.apply_composite, planner_module.apply_composite_asc
    saved_scan = scan_module.KERNEL
    module.KERNEL = kernel
    scan_module.KERNEL = SCAN if kernel is not None else None
    if rules is not None:
        planner_module.apply_composite, planner_module.apply_composite_asc = rules
    BoardModel.apply, BoardModel.read = apply, reading  # type: ignore[method-assign]
    try:
        yield recorded
    finally:
        BoardModel.apply, BoardModel.read = original, read  # type: ignore[method-assign]
        module.KERNEL, planner_module.apply_composite, planner_module.apply_composite_asc = saved
        scan_module.KERNEL = saved_scan


def both(scn: Scenario, seed: int, **how: Any) -> None:
    """The Python and the compiled passes give the same plans and the same store."""
    assert KERNEL is not None and SCAN is not None, "lb_native is not built: run bootstrap.sh"
    with folding(None) as python_plans:
        python_model = run(scn, random.Random(seed), **how)
    with folding(KERNEL) as compiled_plans:
        compiled_model = run(scn, random.Random(seed), **how)
    assert compiled_plans == python_plans
    assert vars(compiled_model) == vars(python_model)
    assert python_plans, "the stream wrote nothing: the comparison would be empty"


@PROPERTY
@given(
    scn=scenarios(),
    seed=st.integers(0, 2**32),
    workers=st.integers(1, 2),
    crashes=st.integers(0, 2),
    rounds=st.booleans(),
    max_updates=st.sampled_from((0, 1, 3, 100)),
    capacity=st.sampled_from((1, 2, BIG_CACHE)),
)
def test_the_compiled_fold_plans_what_the_python_fold_plans(
    scn: Scenario,
    seed: int,
    workers: int,
    crashes: int,
    rounds: bool,
    max_updates: int,
    capacity: int,
) -> None:
    both(
        scn,
        seed,
        workers=workers,
        crashes=crashes,
        rounds=rounds,
        max_updates=max_updates,
        capacity=capacity,
    )


@PROPERTY
@given(scn=scenarios(), seed=st.integers(0, 2**32), fresh=st.booleans())
def test_a_fresh_or_told_planner_folds_the_same_either_way(
    scn: Scenario, seed: int, fresh: bool
) -> None:
    both(scn, seed, fresh=fresh, absent=not fresh)


def _counted(calls: list[str]) -> tuple[Any, Any]:
    """Both packed-value rules, as functions the kernel does not know, noting each call."""

    def descending(*args: Any) -> int:
        calls.append("descending")
        return apply_composite(*args)

    def ascending(*args: Any) -> int:
        calls.append("ascending")
        return apply_composite_asc(*args)

    return descending, ascending


@PROPERTY
@given(scn=scenarios(), seed=st.integers(0, 2**32), max_updates=st.sampled_from((0, 3)))
def test_a_rule_the_kernel_does_not_know_is_asked_of_python(
    scn: Scenario, seed: int, max_updates: int
) -> None:
    assert KERNEL is not None, "lb_native is not built: run scripts/bootstrap.sh"
    python_calls: list[str] = []
    compiled_calls: list[str] = []
    with folding(None, _counted(python_calls)) as python_plans:
        python_model = run(scn, random.Random(seed), max_updates=max_updates)
    with folding(KERNEL, _counted(compiled_calls)) as compiled_plans:
        compiled_model = run(scn, random.Random(seed), max_updates=max_updates)
    assert compiled_plans == python_plans
    assert vars(compiled_model) == vars(python_model)
    assert compiled_calls == python_calls  # every board value went through Python's rule


def test_the_kernel_refuses_fields_it_cannot_find() -> None:
    assert KERNEL is not None, "lb_native is not built: run scripts/bootstrap.sh"
    make: Any = type(KERNEL)
    with pytest.raises(ValueError, match='lack "game_id"'):
        make(None, "", (1, 2, 3), (None, None), None, ["event_id"], ["offset"])
    scan: Any = type(SCAN)
    with pytest.raises(ValueError, match='lack "record_ts_ms"'):
        scan(None, "", None, list(ScoreEvent._fields), ["offset"])
