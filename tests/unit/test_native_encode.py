"""A group write's script arguments, compiled (``lb_native.encode_head``) against the Python.

``sinks.boards.encoding._head`` is the reference for the sections that grow
with a write's events; :func:`encode` goes on from either with the same key
index. Both must give the same keys and arguments, word for word, for every
write the planner's oracle streams plan (``test_planner``'s: every operator,
tournaments, RETRACTs, copies, crashes, bounded pieces) and for hand-made
writes that fill every section, with members in score order or as they
come and any epoch.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.keys import GroupKeys
from domain.planner import Change, GroupWrite, WritePlan
from domain.planner.model import EntryMetadata
from sinks.boards import encoding
from tests.unit.boardmodel import BoardModel
from tests.unit.test_planner import PROPERTY, run, scenarios

HEAD = encoding.HEAD_KERNEL


@contextmanager
def python_head() -> Iterator[None]:
    saved = encoding.HEAD_KERNEL
    encoding.HEAD_KERNEL = None
    try:
        yield
    finally:
        encoding.HEAD_KERNEL = saved


def both_ways(write: GroupWrite, sort_members: bool, epoch: int) -> None:
    assert HEAD is not None, "lb_native is not built: run scripts/bootstrap.sh"
    compiled = encoding.encode(copy.deepcopy(write), sort_members, epoch)
    with python_head():
        python = encoding.encode(copy.deepcopy(write), sort_members, epoch)
    assert compiled == python
    # Same words, and the same kinds of word: the packing writes an int and a str differently.
    assert [type(a) for a in compiled[1]] == [type(a) for a in python[1]]


@contextmanager
def recording() -> Iterator[list[WritePlan]]:
    plans: list[WritePlan] = []
    original = BoardModel.apply

    def apply(self: BoardModel, plan: WritePlan, limit: int | None = None) -> list[int]:
        plans.append(copy.deepcopy(plan))
        return original(self, plan, limit)

    BoardModel.apply = apply  # type: ignore[method-assign]
    try:
        yield plans
    finally:
        BoardModel.apply = original  # type: ignore[method-assign]


@PROPERTY
@given(
    scn=scenarios(),
    seed=st.integers(0, 2**32),
    max_updates=st.sampled_from((0, 3, 100)),
    sort_members=st.booleans(),
    epoch=st.integers(0, 2**40),
)
def test_every_planned_write_encodes_the_same_either_way(
    scn: Any, seed: int, max_updates: int, sort_members: bool, epoch: int
) -> None:
    with recording() as plans:
        run(scn, random.Random(seed), max_updates=max_updates)
    writes = [write for plan in plans for write in plan.groups]
    assert writes, "the stream wrote nothing: the comparison would be empty"
    for write in writes:
        both_ways(write, sort_members, epoch)


KEYS = GroupKeys("ns", "g1")
texts = st.text(min_size=1, max_size=6)
scores = st.one_of(st.integers(-(2**70), 2**70), st.integers(-5, 5))
boards = st.sampled_from([KEYS.board(w) for w in ("alltime", "w1", "d1")])


@st.composite
def writes(draw: st.DrawFn) -> GroupWrite:
    """A write with every section the head encodes, and a tail that reuses its keys."""
    zadd = draw(st.dictionaries(boards, st.dictionaries(texts, scores, max_size=5), max_size=3))
    zrem = draw(st.dictionaries(boards, st.lists(texts, max_size=3), max_size=2))
    seen = draw(
        st.dictionaries(
            st.sampled_from([KEYS.seen_part(b, p) for b in (7, 8) for p in (0, 3)]),
            st.dictionaries(
                st.one_of(texts, st.binary(min_size=1, max_size=4)),
                st.one_of(st.integers(0, 2**40), st.binary(max_size=12)),
                max_size=4,
            ),
            max_size=3,
        )
    )
    changes = draw(
        st.lists(
            st.builds(
                Change,
                st.sampled_from(["alltime", "w1"]),
                texts,
                st.none() | scores,
                st.none() | scores,
                st.none() | st.just('{"k":1}'),
            ),
            max_size=3,
        )
    )
    metadata = {
        board: EntryMetadata(key=KEYS.entry_metadata("alltime"), set={"p": "m"}, clear=["q"])
        for board in draw(st.lists(boards, max_size=2, unique=True))
    }
    return GroupWrite(
        keys=KEYS,
        zadd=zadd,
        zrem=zrem,
        expire_at_s=draw(st.dictionaries(boards, st.integers(0, 2**33), max_size=2)),
        new_windows=draw(st.lists(st.sampled_from(["alltime", "w1", "d1"]), max_size=3)),
        seen=seen,
        seen_ttl_s=draw(st.integers(0, 700)),
        seen_append=draw(st.booleans()),
        watermark=(f"scores/{draw(st.integers(0, 7))}", draw(st.integers(-1, 2**40))),
        expected=draw(st.integers(-1, 2**40)),
        stats=draw(st.dictionaries(st.sampled_from(["applied", "noop", "dup"]), scores)),
        changes=changes,
        counts=draw(
            st.dictionaries(
                st.sampled_from([KEYS.prefix + "t:attempts", KEYS.stats]),
                st.dictionaries(texts, st.integers(0, 99), max_size=3),
                max_size=2,
            )
        ),
        metadata=metadata,
        hdel=draw(st.dictionaries(st.sampled_from([KEYS.stats, "x"]), st.lists(texts), max_size=2)),
    )


@given(write=writes(), sort_members=st.booleans(), epoch=st.integers(0, 2**40))
def test_every_section_encodes_the_same_either_way(
    write: GroupWrite, sort_members: bool, epoch: int
) -> None:
    both_ways(write, sort_members, epoch)


def test_a_key_met_in_the_head_keeps_its_index_in_the_tail() -> None:
    board = KEYS.board("alltime")
    write = GroupWrite(
        keys=KEYS,
        zadd={board: {"p1": 5}},
        changes=[Change("alltime", "p1", None, 5, None)],
        metadata={board: EntryMetadata(key=KEYS.entry_metadata("alltime"), set={"p1": "m"})},
        watermark=("scores/0", 9),
    )
    keys, args = encoding.encode(write)
    # Each key once: the metadata section names the board by the zadd section's index.
    assert sorted(keys) == sorted(set(keys))
    assert args[5] == keys.index(board) + 1
    assert KEYS.changes in keys and board not in args
    both_ways(write, False, 0)
