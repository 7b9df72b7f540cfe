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
import os
import random
import sys
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from domain.backoff import Backoff
from domain.errors import Deposed, RetryBudgetExceeded, StopRequested
from sinks import outcomes
from telemetry import hooks

log = logging.getLogger(__name__)

T = TypeVar("T")

#: While waiting between attempts, how often the stop signal is looked at.
STOP_POLL_S = 0.1


def _never() -> bool:
    return False


def call_with_retry(
    call: Callable[[], T],
    *,
    what: str,
    policy: Backoff,
    transient: tuple[type[BaseException], ...],
    setting: str,
    permanent: tuple[type[BaseException], ...] = (),
    after_failure: Callable[[], None] | None = None,
    stopping: Callable[[], bool] = _never,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = random.random,
    failed_since: float | None = None,
) -> T:
    """``call()``, retried on ``transient`` errors until it succeeds or ``policy`` gives up.

    ``after_failure`` runs after each transient failure (e.g. to refresh a
    cluster's slot map before the next attempt). Any other exception passes
    through untouched, and so do ``permanent`` ones even where they subclass a
    transient one (redis-py makes a wrong password a ``ConnectionError``:
    waiting would not fix it). ``setting`` names the knob in the final error
    message.

    ``stopping()`` is looked at before every retry and during every wait: once
    it answers true (the job was asked to stop) the call is abandoned with
    :class:`StopRequested` instead of waiting out the budget. Abandoning is
    safe for the sinks because what they failed to send was not acknowledged,
    so Bytewax has not snapshotted past it and the next start sends it again.

    ``failed_since`` (a ``clock()`` instant) says the same work already failed
    once before this call, elsewhere (the board store's writes leave without
    waiting and are sent again by the next round trip): the budget runs from
    then, and success counts as a recovery (logged, readiness restored).
    """
    first_failure = failed_since
    attempt = 0 if failed_since is None else 1
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
            hooks.retrying(setting, first_failure)
            if after_failure is not None:
                after_failure()
            _wait_unless_stopping(wait, stopping, what, exc, clock, sleep)
            continue
        if first_failure is not None:
            hooks.recovered(setting)
            log.warning(
                "%s recovered after %.1fs and %d retries", what, clock() - first_failure, attempt
            )
        return result


def _wait_unless_stopping(
    wait: float,
    stopping: Callable[[], bool],
    what: str,
    exc: BaseException,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Sleep ``wait`` seconds in short slices; raise :class:`StopRequested` once stopping."""
    until = clock() + wait
    while True:
        if stopping():
            raise StopRequested(f"stop requested while {what} was failing: {exc}") from exc
        left = until - clock()
        if left <= 0:
            return
        sleep(min(left, STOP_POLL_S))


def abandon(exc: StopRequested) -> NoReturn:
    """End this job process now (exit 0): a stop was asked for during an outage.

    Returning from the sink would let Bytewax snapshot source offsets past a
    batch that was never written, and raising would end in a panic; leaving
    at once keeps the last snapshot where it is, so the next start sends the
    batch again (a process kill is what the recovery store is built for).
    """
    _leave(str(exc), 0)


def give_up(exc: RetryBudgetExceeded) -> NoReturn:
    """End this job process now (exit 1): a service stayed down past its retry budget.

    One line naming the setting instead of a panic with the error buried in
    it; for the same reason as :func:`abandon`, a supervisor's restart then
    sends the unwritten batch again.
    """
    _leave(f"error: {exc}", 1)


def step_down(exc: Deposed) -> NoReturn:
    """End this job process now (exit 0): another deployment took the projection over.

    Its writes are refused from now on; what this one holds is the new
    active deployment's to apply (it reads from the watermarks in Redis).
    """
    _leave(str(exc), 0)


def _leave(why: str, code: int) -> NoReturn:
    boards, letters = outcomes.snapshot()
    print(
        f"scoreboard job: {why.rstrip('.')}; stopped without applying the current "
        f"batch (the next start replays it); so far {outcomes.describe(boards, letters)}",
        file=sys.stderr,
        flush=True,
    )
    logging.shutdown()
    os._exit(code)
