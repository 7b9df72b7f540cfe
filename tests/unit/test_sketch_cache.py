"""``readers.sketches.SketchCache`` against a fake client: what it returns and what it reads.

The oracle is the simplest rule the cache promises: an answer is the sketch
stored when the cache last checked, that check at most ``fresh_s`` ago; a
header the caller read itself saves the ``GETRANGE``, and a ``GET`` happens
only for a sketch the cache has not seen.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.sketches import HEADER_SIZE, PublishedSketch, build
from readers.sketches import SketchCache

KEY = "ns:{g}:meta:sketch:alltime"
VALUES = {at: PublishedSketch("alltime", at, 1, build(range(100))).encode() for at in range(1, 6)}


class FakeRedis:
    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        self.reads = {"get": 0, "getrange": 0}

    def get(self, key: str) -> bytes | None:
        self.reads["get"] += 1
        return self.store.get(key)

    def getrange(self, key: str, start: int, end: int) -> bytes:
        self.reads["getrange"] += 1
        return self.store.get(key, b"")[start : end + 1]

    def header(self) -> bytes:
        """What the rank script's ``GETRANGE`` returns (read here without counting it)."""
        return self.store.get(KEY, b"")[:HEADER_SIZE]


#: publish version v (1-5), delete, let ``seconds`` pass, or read (with the header or not).
step = st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 5)),
    st.tuples(st.just("delete"), st.just(0)),
    st.tuples(st.just("wait"), st.sampled_from([0.3, 0.7, 1.0, 2.5])),
    st.tuples(st.just("read"), st.booleans()),
)


@given(st.lists(step, max_size=40))
def test_answers_are_at_most_fresh_s_old_and_a_given_header_saves_the_getrange(
    steps: list[tuple[str, Any]],
) -> None:
    client = FakeRedis()
    clock = [0.0]
    cache = SketchCache(fresh_s=1.0, clock=lambda: clock[0])
    checked_at: float | None = None  # when the cache last looked at Redis
    seen: int | None = None  # built_at of the sketch it holds
    for kind, arg in steps:
        if kind == "publish":
            client.store[KEY] = VALUES[arg]
        elif kind == "delete":
            client.store.pop(KEY, None)
        elif kind == "wait":
            clock[0] += arg
        else:
            fresh = checked_at is not None and clock[0] - checked_at < 1.0 and seen is not None
            assert cache.wants_header(KEY) == (not fresh)
            before = dict(client.reads)
            header = client.header() if arg and not fresh else None
            got = cache.get(client, KEY, header)
            stored = client.store.get(KEY)
            current = None if stored is None else PublishedSketch.decode(stored).built_at_ms
            if fresh:
                assert got is not None and got.built_at_ms == seen
                assert client.reads == before  # no I/O at all
                continue
            assert (None if got is None else got.built_at_ms) == current
            gets = client.reads["get"] - before["get"]
            ranges = client.reads["getrange"] - before["getrange"]
            if arg:  # the header came with the caller's own round trip
                assert ranges == 0
            else:
                assert ranges == (1 if seen is not None else 0)
            # A whole value is read only for a sketch the cache does not hold, and,
            # holding nothing and given no header, to learn whether there is one.
            if not arg and seen is None:
                assert gets == 1
            else:
                assert gets == (0 if current is None or current == seen else 1)
            checked_at, seen = clock[0], current
