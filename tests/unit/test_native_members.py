"""The compiled walk of a piece's changed members (``lb_native.diff_members``) against Python.

``domain.planner.changes.members`` and ``group_changes`` are the reference: the
board writes (``zadd``/``zrem``, keys and members in the same order), the cache
entries (the working dict itself unless a RETRACT left values never read), the
changes with decoded scores (ascending boards and tie-break slots included),
and whether a value changed back has a setter. Generated before/after values
cover unchanged, changed, removed, never-read (``UNKNOWN``) and new members.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NamedTuple, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.games import GameConfig, Operator
from domain.keys import GroupKeys
from domain.planner import Change, GroupWrite, WritePlan
from domain.planner import changes as module
from domain.planner.changes import group_changes, members
from domain.planner.model import UNKNOWN
from domain.scoring import TieCodec, TieResolution
from domain.windows import WindowKind

KEYS = GroupKeys("t", "ga")
WINDOWS = ("a", "d:2026-11-28", "w:2026-W48", "t:cup")
CODECS = {
    "a": TieCodec(0, 10_000, TieResolution.S),
    "d:2026-11-28": TieCodec(0, 1, TieResolution.NONE, ascending=True, ceiling=1_000),
    "w:2026-W48": TieCodec(0, 600_000, TieResolution.MIN, ascending=True, ceiling=50),
    "t:cup": TieCodec(0, 1, TieResolution.NONE),
}
BOARDS = {w: SimpleNamespace(codec=c) for w, c in CODECS.items()}
GAME = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.BEST, max_score=10**6)

players = st.sampled_from([f"p{i}" for i in range(6)])
windows = st.sampled_from(WINDOWS)
values = st.none() | st.just(UNKNOWN) | st.integers(0, 12_000)
Values = dict[str, dict[str, int | None]]


@st.composite
def pieces(draw: st.DrawFn) -> tuple[Values, Values, dict[tuple[str, str], str | None], bool]:
    """Values before and after a piece, its setters, and whether a RETRACT ran."""
    initial: Values = {}
    working: Values = {}
    for player in draw(st.lists(players, unique=True, max_size=6)):
        before = draw(st.dictionaries(windows, values, max_size=4))
        after = dict(before) if draw(st.booleans()) else {}
        after.update(draw(st.dictionaries(windows, values, max_size=4)))
        initial[player], working[player] = before, after
    setters = draw(
        st.dictionaries(st.tuples(windows, players), st.none() | st.just("m"), max_size=6)
    )
    return initial, working, setters, draw(st.booleans())


def reference(initial: Values, working: Values, setters: Any, retracted: bool) -> tuple[Any, ...]:
    fold = SimpleNamespace(
        keys=KEYS, initial=initial, working=working, retracted=retracted, setters=setters
    )
    write, plan = GroupWrite(KEYS), WritePlan(0)
    reverted = members(cast(Any, fold), write, plan)
    found = group_changes(GAME, initial, working, cast(Any, BOARDS))
    return write, plan, found, reverted


def compiled(initial: Values, working: Values, setters: Any, retracted: bool) -> tuple[Any, ...]:
    assert module.COMPILED is not None, "lb_native is not built: run scripts/bootstrap.sh"
    write, plan = GroupWrite(KEYS), WritePlan(0)
    found: list[Change] = []

    def codec_of(window_id: str) -> tuple[int, bool, int]:
        codec = CODECS[window_id]
        return codec.slots, codec.ascending, codec.ceiling

    reverted = module.COMPILED(
        initial,
        working,
        KEYS.prefix,
        KEYS.tag,
        write.zadd,
        write.zrem,
        plan.cache_updates,
        retracted,
        found,
        Change,
        codec_of,
        setters or None,
    )
    return write, plan, found, reverted


@settings(max_examples=400)
@given(pieces())
def test_the_walk_is_the_references(piece: tuple[Values, Values, Any, bool]) -> None:
    ours, theirs = compiled(*piece), reference(*piece)
    (write, plan, found, reverted), (write2, plan2, found2, reverted2) = ours, theirs
    assert list(write.zadd.items()) == list(write2.zadd.items())
    for key, members_ in write.zadd.items():
        assert list(members_.items()) == list(write2.zadd[key].items())
    assert list(write.zrem.items()) == list(write2.zrem.items())
    assert list(plan.cache_updates.items()) == list(plan2.cache_updates.items())
    _, working, _, retracted = piece
    for (_, player), entry in plan.cache_updates.items():
        assert (entry is working[player]) == (
            plan2.cache_updates[(KEYS.tag, player)] is working[player]
        )
        assert (entry is working[player]) is not retracted
    assert found == found2
    assert all(type(change) is Change for change in found)
    assert reverted == reverted2


def test_without_a_changes_list_no_changes_are_made_nor_codecs_asked() -> None:
    assert module.COMPILED is not None
    write, plan = GroupWrite(KEYS), WritePlan(0)

    def codec_of(window_id: str) -> tuple[int, bool, int]:
        raise AssertionError(f"asked for {window_id}")

    module.COMPILED(
        {"p": {}},
        {"p": {"a": 5}},
        KEYS.prefix,
        KEYS.tag,
        write.zadd,
        write.zrem,
        plan.cache_updates,
        False,
        None,
        Change,
        codec_of,
        None,
    )
    assert write.zadd == {KEYS.board("a"): {"p": 5}}


def test_a_change_type_that_cannot_be_filled_in_place_is_refused() -> None:
    assert module.COMPILED is not None

    class Wider(NamedTuple):
        window_id: str
        player_id: str
        old: int | None
        new: int | None
        meta: str | None
        extra: int

    for wrong in (tuple, Wider):
        with pytest.raises((ValueError, AttributeError)):
            module.COMPILED(
                {},
                {},
                KEYS.prefix,
                KEYS.tag,
                {},
                {},
                {},
                False,
                [],
                cast(Any, wrong),
                lambda w: (1, False, 0),
                None,
            )
