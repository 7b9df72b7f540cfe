"""The dedupe lookups' reads, compiled (``lb_native.seen_commands`` / ``seen_values``).

``sinks.boards.reads._seen_commands`` and ``_seen_values`` are the references:
for any lookups (short and long, batched or not, runs cut at any chunk size)
the compiled twins must build the same commands, word for word, and cut the
same replies into the same lists, ending at the same reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sinks.boards import reads

COMMANDS, VALUES = reads.COMMANDS_KERNEL, reads.VALUES_KERNEL

field = st.one_of(st.text(max_size=4), st.binary(max_size=4))
#: A lookup asks a key for one field or more (the planner never asks for none).
lookups = st.lists(
    st.tuples(st.text(min_size=1, max_size=5), st.lists(field, min_size=1, max_size=14)),
    max_size=12,
)


@contextmanager
def python() -> Iterator[None]:
    saved = reads.COMMANDS_KERNEL, reads.VALUES_KERNEL
    reads.COMMANDS_KERNEL = reads.VALUES_KERNEL = None
    try:
        yield
    finally:
        reads.COMMANDS_KERNEL, reads.VALUES_KERNEL = saved


@contextmanager
def sizes(short: int, chunk: int) -> Iterator[None]:
    """``SHORT_READ`` and ``READ_CHUNK`` set for one example."""
    saved = reads.SHORT_READ, reads.READ_CHUNK
    reads.SHORT_READ, reads.READ_CHUNK = short, chunk
    try:
        yield
    finally:
        reads.SHORT_READ, reads.READ_CHUNK = saved


def replies(commands: list[tuple[Any, ...]], values: dict[Any, Any]) -> list[Any]:
    """What Redis would answer: each command's fields' values, in order."""
    out: list[Any] = []
    for command in commands:
        if command[0] == "HMGET":
            fields = command[2:]
        else:  # EVAL script n keys... counts... fields...
            n = command[2]
            fields = command[3 + 2 * n :]
        out.append([values.get(f) for f in fields])
    return out


@given(
    seen=lookups,
    batched=st.booleans(),
    short=st.integers(0, 9),
    chunk=st.integers(1, 12),
    lead=st.integers(0, 3),
)
def test_the_compiled_reads_build_and_take_what_the_python_does(
    seen: list[tuple[str, list[Any]]],
    batched: bool,
    short: int,
    chunk: int,
    lead: int,
) -> None:
    assert COMMANDS is not None and VALUES is not None, "lb_native is not built: bootstrap.sh"
    with sizes(short, chunk):
        compiled = reads._seen_commands(seen, batched)
        with python():
            expected = reads._seen_commands(seen, batched)
    assert compiled == expected
    values = {f: i for i, (_, ids) in enumerate(seen) for f in ids[::2]}
    answers = [["progress"]] * lead + replies(expected, values) + [b"after"]
    taken = reads._seen_values(seen, answers, lead)
    with python():
        assert taken == reads._seen_values(seen, answers, lead)
    assert reads._seen_values(seen, tuple(answers), lead) == taken  # any sequence of replies
    assert taken[1] == lead + len(expected)
    assert [len(v) for v in taken[0]] == [len(ids) for _, ids in seen]


def test_short_lookups_share_one_call_and_long_ones_are_cut() -> None:
    seen: list[tuple[str, list[str | bytes]]] = [
        ("a", ["1"]),
        ("b", ["2", "3"]),
        ("c", [str(i) for i in range(reads.SHORT_READ + 1)]),
    ]
    commands = reads._seen_commands(seen, batched=True)
    assert commands[0] == ("EVAL", reads.READ_BAGS, 2, "a", "b", 1, 2, "1", "2", "3")
    assert commands[1][:2] == ("HMGET", "c") and len(commands) == 2
    unbatched = reads._seen_commands(seen, batched=False)
    assert [c[:2] for c in unbatched] == [("HMGET", "a"), ("HMGET", "b"), ("HMGET", "c")]
