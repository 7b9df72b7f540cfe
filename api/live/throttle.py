"""A subscriber's throttle: at most one push per interval, nothing due is ever lost.

The state machine of one subscription, apart from any I/O so it can be
tested with a clock of one's own. Changes the hub queued are *taken* at
every wake-up (so only a subscriber stuck in a send lets its queue grow) and
kept as *due* until a push covers them; a push may go out once ``interval``
has passed since the last one. The subscription's loop asks :meth:`wait`
how long to sleep, the hub's direct push asks :meth:`ready`, and both report
a push with :meth:`pushed`.
"""

from __future__ import annotations

from api.live.messages import StreamChange

#: Changes kept for a subscriber's next message (the newest; the page itself is always whole).
MAX_DUE = 1000


class Throttle:
    """When the next push may go, and the changes it must cover (times in seconds)."""

    __slots__ = ("due", "interval", "last", "pending")

    def __init__(self, interval_s: float) -> None:
        self.interval = interval_s
        #: When the last push went out (monotonic seconds; 0: never).
        self.last = 0.0
        #: Relevant changes not pushed yet (the newest MAX_DUE).
        self.due: list[StreamChange] = []
        #: True once something was taken that no push has covered yet.
        self.pending = False

    def add(self, taken: list[StreamChange] | None) -> None:
        """Keep what a wake-up took (None: nothing was queued)."""
        if taken is not None:
            self.due = (self.due + taken)[-MAX_DUE:]
            self.pending = True

    def wait(self, now: float) -> float | None:
        """Seconds until the next push may go; None: nothing is due (sleep until woken)."""
        if not self.pending:
            return None
        return max(0.0, self.last + self.interval - now)

    def ready(self, now: float) -> bool:
        """Whether a push may go out at ``now`` (the interval has passed)."""
        return now >= self.last + self.interval

    def pushed(self, now: float) -> None:
        """A push covering everything due went out at ``now``."""
        self.due, self.pending, self.last = [], False, now
