"""The planner's generational cache against a plain model of its rule."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from domain.planner import GenerationalCache

Key = tuple[str, str]

#: A step: a ``get`` of a key, or a batch of ``put``s (as ``commit`` hands them over).
steps = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.integers(0, 12)),
        st.tuples(
            st.just("put"),
            st.dictionaries(st.integers(0, 12), st.integers(0, 99), max_size=8),
        ),
    ),
    max_size=60,
)


class Model:
    """The rule as the class docstring states it, written the plain way."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.young: dict[Key, int] = {}
        self.old: dict[Key, int] = {}
        self.evicted = False

    def put(self, key: Key, value: int) -> None:
        if key not in self.young and len(self.young) >= self.capacity:
            self.evicted = self.evicted or bool(self.old)
            self.old, self.young = self.young, {}
        self.young[key] = value

    def get(self, key: Key) -> int | None:
        if key in self.young:
            return self.young[key]
        if key in self.old:
            value = self.old.pop(key)
            self.put(key, value)
            return value
        return None


def key(n: int) -> Key:
    return ("g", f"p{n}")


@given(st.integers(1, 10), steps)
def test_put_all_and_get_follow_the_generational_rule(
    capacity: int, script: list[tuple[str, Any]]
) -> None:
    cache: GenerationalCache[int] = GenerationalCache(capacity)
    model = Model(capacity)
    for op, arg in script:
        if op == "get":
            assert cache.get(key(arg)) == model.get(key(arg))
        else:
            items = {key(n): v for n, v in arg.items()}
            cache.put_all(items)
            for k, v in items.items():
                model.put(k, v)
        assert len(cache) == len(model.young) + len(model.old)
        assert cache.evicted == model.evicted
    for n in range(13):
        assert cache.get(key(n)) == model.get(key(n))


def test_put_all_with_room_keeps_every_entry_young() -> None:
    cache: GenerationalCache[int] = GenerationalCache(4)
    cache.put_all({key(1): 1, key(2): 2})
    cache.put_all({key(3): 3, key(4): 4})
    assert [cache.get(key(n)) for n in range(1, 5)] == [1, 2, 3, 4]
    assert not cache.evicted
    cache.put_all({key(5): 5})  # no room: the four become the old generation
    cache.put_all({key(6): 6, key(7): 7, key(8): 8, key(9): 9})
    assert cache.get(key(1)) is None  # dropped with the old generation
    assert cache.evicted
