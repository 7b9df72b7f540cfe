"""``sinks.boards.reads``: short dedupe lookups share script calls, and every value comes back.

A model Redis answers ``HMGET`` and the ``READ_BAGS`` call as the script does
(each key's fields in order); the real script against a real Redis is in
``tests/integration/test_dedupe_redis.py``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.planner import Lookups
from sinks.boards import reads
from sinks.boards.reads import READ_BAGS, SHORT_READ, parse_reads, read_commands

STORE = {f"k{k}": {f"f{f}": f"v{k}.{f}".encode() for f in range(0, 40, 3)} for k in range(30)}


def _answer(command: tuple[Any, ...]) -> list[bytes | None]:
    """What the model Redis answers: the fields' values in order, None where missing."""
    if command[0] == "HMGET":
        return [STORE.get(command[1], {}).get(f) for f in command[2:]]
    assert command[:2] == ("EVAL", READ_BAGS)
    n = command[2]
    keys, counts, fields = command[3 : 3 + n], command[3 + n : 3 + 2 * n], command[3 + 2 * n :]
    out: list[bytes | None] = []
    at = 0
    for key, count in zip(keys, counts, strict=True):
        out += [STORE.get(key, {}).get(f) for f in fields[at : at + count]]
        at += count
    assert at == len(fields)
    return out


lookup = st.tuples(
    st.integers(0, 35).map(lambda k: f"k{k}"),
    st.lists(st.integers(0, 45).map(lambda f: f"f{f}"), min_size=1, max_size=3 * SHORT_READ),
)


@given(
    seen=st.lists(st.lists(lookup, max_size=12), min_size=1, max_size=3),
    chunk=st.sampled_from([5, 20, 1000]),
    batched=st.booleans(),
)
def test_every_lookup_gets_its_own_fields_values_in_order(
    seen: list[list[tuple[str, list[str]]]], chunk: int, batched: bool
) -> None:
    many = [Lookups(watermarks=[("wm", "t/0")], seen=list(s)) for s in seen]
    old = reads.READ_CHUNK
    reads.READ_CHUNK = chunk
    try:
        commands = read_commands(many, (), [("wm", "t/0")], batched=batched)
    finally:
        reads.READ_CHUNK = old
    answers: list[Any] = [
        b"7" if c[0] == "HGET" else _answer(c)
        for c in commands  # watermarks, then reads
    ]
    results, audited = parse_reads(many, 0, answers)
    assert audited == [7]
    for lookups, got in zip(many, results, strict=True):
        assert got.watermarks == [7]
        assert got.seen == [[STORE.get(k, {}).get(f) for f in fs] for k, fs in lookups.seen]
    evals = [c for c in commands if c[0] == "EVAL"]
    if not batched:
        assert not evals
    else:  # only the long lookups are HMGETs (in chunks); the short ones share calls
        lookups_ = [fs for s in seen for _, fs in s]
        long_spans = sum(-(-len(fs) // chunk) for fs in lookups_ if len(fs) > SHORT_READ)
        assert sum(c[0] == "HMGET" for c in commands) == long_spans
        assert bool(evals) == any(len(fs) <= SHORT_READ for fs in lookups_)


def test_a_history_round_of_scattered_lookups_is_a_handful_of_commands() -> None:
    seen = [(f"ns:{{g1}}:meta:seen:{b}:{b % 16}", [str(b)]) for b in range(3000)]
    lookups = Lookups(seen=seen)
    assert len(read_commands([lookups], (), ())) == 3000
    batched = read_commands([lookups], (), (), batched=True)
    assert [c[0] for c in batched] == ["EVAL"] * 3  # 1,000 fields per call
