"""Waiting in tests: for a condition that must become true, never for a fixed time.

A fixed sleep races on a loaded machine (the thing waited for may take
longer) and wastes time on an idle one; :func:`poll` asks again and again
until the answer comes, with a generous bound so a slow, shared machine
only makes a test slower. Nothing here asserts on timing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How long a condition may take to become true before the test fails.
PATIENCE_S = 60.0


class Deadline:
    """A bound on a wait: how much of it is left (for loops that block on a receive)."""

    __slots__ = ("end", "what")

    def __init__(self, what: str, timeout_s: float = PATIENCE_S) -> None:
        self.what = what
        self.end = time.monotonic() + timeout_s

    def left(self) -> float:
        """Seconds left; fails the test (naming what was awaited) once none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never happened: {self.what}")
        return left


def poll(
    what: str,
    check: Callable[[], T],
    timeout_s: float = PATIENCE_S,
    every_s: float = 0.02,
    context: Callable[[], str] | None = None,
) -> T:
    """``check()``'s first truthy answer; fails naming ``what``, the last answer and ``context()``.

    ``check`` may also assert that waiting is still worth it (a process it
    waits on is still running, say): its AssertionError ends the wait at once.
    """
    end = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= end:
            extra = f"\n{context()}" if context is not None else ""
            raise AssertionError(f"never happened: {what}; last: {last!r}{extra}")
        time.sleep(every_s)


async def apoll(
    what: str, check: Callable[[], T], timeout_s: float = PATIENCE_S, every_s: float = 0.02
) -> T:
    """:func:`poll` inside an event loop: sleeps without blocking the loop."""
    end = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= end:
            raise AssertionError(f"never happened: {what}; last: {last!r}")
        await asyncio.sleep(every_s)
