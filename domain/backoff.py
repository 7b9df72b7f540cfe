"""How long to wait before retrying an unreachable service, and when to give up.

A studio expects the job to ride out a Redis or Kafka restart, a failover or a
stall instead of crashing, but never to hang silently for ever: retries are
spaced exponentially (so a long outage costs a few log lines, not a busy
loop), jittered (so several workers do not reconnect in lockstep) and bounded
by a total budget, after which the caller fails loudly. Retrying is safe
because every write the job repeats is idempotent (offset watermarks).

Pure: the elapsed time and the random draw are arguments, so the schedule is
testable and the caller owns the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.errors import ConfigError


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with "equal jitter", capped per wait and in total.

    Retry ``n`` (1-based) waits between half and all of
    ``min(cap_s, first_s * 2 ** (n - 1))``; no wait reaches past
    ``budget_s`` after the first failure, and once the budget is spent
    :meth:`delay` answers ``None``: give up.
    """

    budget_s: float
    first_s: float = 0.1
    cap_s: float = 5.0

    def __post_init__(self) -> None:
        if self.budget_s < 0:
            raise ConfigError(f"a retry budget cannot be negative, got {self.budget_s}")
        if not 0 < self.first_s <= self.cap_s:
            raise ConfigError(
                f"backoff needs 0 < first_s <= cap_s, got {self.first_s} and {self.cap_s}"
            )

    def delay(self, attempt: int, elapsed_s: float, draw: float) -> float | None:
        """Seconds to wait before retry ``attempt``, or ``None`` when the budget is spent.

        ``elapsed_s`` is the time since the first failure; ``draw`` is a
        uniform random number in ``[0, 1)`` (the jitter).
        """
        if attempt < 1:
            raise ValueError(f"attempts count from 1, got {attempt}")
        left = self.budget_s - elapsed_s
        if left <= 0:
            return None
        # 2 ** 60 is already far beyond any cap; avoid float overflow on huge attempts.
        full = min(self.cap_s, self.first_s * 2.0 ** min(attempt - 1, 60))
        wait = full / 2 + full / 2 * min(max(draw, 0.0), 1.0)
        return min(wait, left)
