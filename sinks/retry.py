"""Call a service until it answers, with backoff, or fail loudly once the budget is spent.

The sinks use it around every Redis round trip and every wait for Kafka
acknowledgements: a restart, a failover or a stall of the service becomes a
pause in the job (backpressure: the worker stops reading while it waits)
rather than a crash. Repeating a call is only correct because what the sinks
send is idempotent (the Lua watermark guard, the dead-letter tail check), which
is why this lives next to them and not in a general utility module.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from domain.backoff import Backoff
from domain.errors import RetryBudgetExceeded

log = logging.getLogger(__name__)

T = TypeVar("T")


def call_with_retry(
    call: Callable[[], T],
    *,
    what: str,
    policy: Backoff,
    transient: tuple[type[BaseException], ...],
    setting: str,
    permanent: tuple[type[BaseException], ...] = (),
    after_failure: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = random.random,
) -> T:
    """``call()``, retried on ``transient`` errors until it succeeds or ``policy`` gives up.

    ``after_failure`` runs after each transient failure (e.g. to refresh a
    cluster's slot map before the next attempt). Any other exception passes
    through untouched, and so do ``permanent`` ones even where they subclass a
    transient one (redis-py makes a wrong password a ``ConnectionError``:
    waiting would not fix it). ``setting`` names the knob in the final error
    message.
    """
    first_failure: float | None = None
    attempt = 0
    while True:
        try:
            result = call()
        except transient as exc:
            if isinstance(exc, permanent):
                raise
            now = clock()
            if first_failure is None:
                first_failure = now
            attempt += 1
            elapsed = now - first_failure
            wait = policy.delay(attempt, elapsed, draw())
            if wait is None:
                raise RetryBudgetExceeded(
                    f"{what}: still failing after {elapsed:.1f}s and {attempt} attempts "
                    f"({setting}={policy.budget_s:g}): {exc}"
                ) from exc
            log.warning(
                "%s failed (attempt %d, %.1fs so far), retrying in %.2fs: %s",
                what,
                attempt,
                elapsed,
                wait,
                exc,
            )
            if after_failure is not None:
                after_failure()
            sleep(wait)
            continue
        if first_failure is not None:
            log.warning(
                "%s recovered after %.1fs and %d retries", what, clock() - first_failure, attempt
            )
        return result
