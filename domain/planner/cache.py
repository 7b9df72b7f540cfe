"""The planner's write-through cache of players' values."""

from __future__ import annotations

from typing import Generic, TypeVar

_V = TypeVar("_V")


class GenerationalCache(Generic[_V]):
    """A bounded map with O(1) generational eviction instead of per-access LRU upkeep.

    New entries go to the young generation; when it is full the old
    generation is dropped and the young one becomes old. A hit in the old
    generation is promoted. Memory stays under ``2 * capacity`` entries.
    Values are a player's known board values (``{window id: composite or
    None}``) or tournament attempts (``{tournament: attempts}``).
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._young: dict[tuple[str, str], _V] = {}
        self._old: dict[tuple[str, str], _V] = {}
        #: Whether an entry was ever dropped (a miss may then be a forgotten value).
        self.evicted = False

    def get(self, key: tuple[str, str]) -> _V | None:
        found = self._young.get(key)
        if found is None:
            found = self._old.pop(key, None)
            if found is not None:
                self.put(key, found)
        return found

    def put(self, key: tuple[str, str], value: _V) -> None:
        if len(self._young) >= self._capacity and key not in self._young:
            self.evicted = self.evicted or bool(self._old)
            self._old = self._young
            self._young = {}
        self._young[key] = value

    def put_all(self, items: dict[tuple[str, str], _V]) -> None:
        """:meth:`put` of every item, in order; one C-level update when none can evict.

        ``put`` turns the generations over only when the young one is full and
        the key is new to it; with room for every item that cannot happen, and
        the update is the same as the loop.
        """
        if len(self._young) + len(items) <= self._capacity:
            self._young.update(items)
            return
        for key, value in items.items():
            self.put(key, value)

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    @property
    def capacity(self) -> int:
        return self._capacity
