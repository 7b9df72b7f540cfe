"""Micro-batches bounded in time from their *first* item.

A timer that restarts on every item (as Bytewax 0.21's ``collect`` does) never
fires under steady traffic, so batches would only close at their size limit
and latency would grow with load. Here the deadline is fixed when the first
item arrives. The clock is passed in, so the rule is testable and replayable.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class MicroBatcher(Generic[T]):
    """Collects items until ``max_items`` or ``max_ms`` after the first one."""

    def __init__(self, max_ms: int, max_items: int) -> None:
        if max_ms < 0 or max_items < 1:
            raise ValueError("max_ms must be >= 0 and max_items >= 1")
        self.max_ms = max_ms
        self.max_items = max_items
        self._items: list[T] = []
        self._first_ms: int | None = None

    def add(self, items: list[T], now_ms: int) -> None:
        """Append items that arrived at ``now_ms``."""
        if items:
            if self._first_ms is None:
                self._first_ms = now_ms
            self._items.extend(items)

    @property
    def deadline_ms(self) -> int | None:
        """When the open batch must be emitted (None when empty)."""
        return None if self._first_ms is None else self._first_ms + self.max_ms

    @property
    def room(self) -> int:
        """How many more items fit before the size bound."""
        return max(0, self.max_items - len(self._items))

    def due(self, now_ms: int) -> bool:
        """True when the open batch is full or its deadline has come."""
        if not self._items:
            return False
        deadline = self.deadline_ms
        return len(self._items) >= self.max_items or (deadline is not None and now_ms >= deadline)

    def take(self) -> list[T]:
        """Close the open batch and return it (possibly empty)."""
        items, self._items, self._first_ms = self._items, [], None
        return items

    def __len__(self) -> int:
        return len(self._items)
