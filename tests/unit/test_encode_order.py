"""Replays list each board's members in score order; every other argument stays the same."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from domain.keys import GroupKeys
from domain.planner import GroupWrite
from sinks.boards.encoding import encode as _encode

#: Arguments before the first board's key index (apply_group.lua's ARGV[1..5]).
HEAD = 5

boards = st.dictionaries(
    st.sampled_from(["alltime", "weekly:2026-W48", "daily:2026-11-25"]),
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 2**53 - 1), max_size=30),
    min_size=1,
)


def _write(zadd: dict[str, dict[str, int]]) -> GroupWrite:
    keys = GroupKeys("lb", "g1")
    return GroupWrite(
        keys=keys,
        zadd={keys.board(window): members for window, members in zadd.items()},
        watermark=("score-events:0", 41),
        expected=40,
        stats={"applied": 1},
    )


def _zadd_sections(args: list[object], boards: int) -> list[list[tuple[object, object]]]:
    """Each board's (score, member) pairs, read back as the script reads them.

    The arguments start with field, offset, expected watermark, members per
    command, and the count of boards (apply_group.lua).
    """
    at, out = HEAD, []
    for _ in range(boards):
        count = int(str(args[at + 1]))
        flat = args[at + 2 : at + 2 + 2 * count]
        out.append(list(zip(flat[::2], flat[1::2], strict=True)))
        at += 2 + 2 * count
    return out


@given(boards)
def test_sorted_members_are_the_same_pairs_in_ascending_score(
    zadd: dict[str, dict[str, int]],
) -> None:
    write = _write(zadd)
    keys, plain = _encode(write)
    sorted_keys, ordered = _encode(write, sort_members=True)
    assert sorted_keys == keys and len(ordered) == len(plain)
    plain_sections = _zadd_sections(plain, len(zadd))
    for as_sent, as_written in zip(_zadd_sections(ordered, len(zadd)), plain_sections, strict=True):
        assert sorted(as_sent, key=str) == sorted(as_written, key=str)
        scores = [int(str(score)) for score, _ in as_sent]
        assert scores == sorted(scores)
    # Everything after the members (removals, expiries, ids, counters, watermark) is untouched.
    tail = HEAD + sum(2 + 2 * len(members) for members in zadd.values())
    assert ordered[tail:] == plain[tail:] and ordered[:HEAD] == plain[:HEAD]
