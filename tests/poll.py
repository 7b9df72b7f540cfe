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
    """A bound on one wait; failing it names what was awaited (and ``context()``)."""

    __slots__ = ("context", "end", "what")

    def __init__(
        self, what: str, timeout_s: float = PATIENCE_S, context: Callable[[], str] | None = None
    ) -> None:
        self.what = what
        self.end = time.monotonic() + timeout_s
        self.context = context

    def left(self) -> float:
        """Seconds left (for a loop that blocks on a receive); fails once none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            self.fail(None)
        return left

    def settled(self, last: object) -> bool:
        """Whether ``last`` is the truthy answer awaited; fails once the time is up."""
        if last:
            return True
        if time.monotonic() >= self.end:
            self.fail(last)
        return False

    def fail(self, last: object) -> None:
        extra = f"\n{self.context()}" if self.context is not None else ""
        raise AssertionError(f"never happened: {self.what}; last: {last!r}{extra}")


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
    deadline = Deadline(what, timeout_s, context)
    while not deadline.settled(last := check()):
        time.sleep(every_s)
    return last


async def apoll(
    what: str, check: Callable[[], T], timeout_s: float = PATIENCE_S, every_s: float = 0.02
) -> T:
    """:func:`poll` inside an event loop: sleeps without blocking the loop."""
    deadline = Deadline(what, timeout_s)
    while not deadline.settled(last := check()):
        await asyncio.sleep(every_s)
    return last
