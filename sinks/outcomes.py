"""Where the records of this process went: a process-wide tally the two sinks feed.

The exact, crash-proof counts live in Redis (``meta:stats``, written in the
same transaction as the boards); this tally only lets ``lb run`` show signs of
life: a progress line now and then and a summary when it stops. Each sink adds
its batch with one call; several worker threads may call at once, hence the lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from domain.outcomes import BOARD_OUTCOMES, REFUSALS, DeadLetterCode
from telemetry import hooks

__all__ = [
    "BOARD_OUTCOMES",
    "REFUSALS",
    "add_applied",
    "add_board_outcomes",
    "add_dead_letters",
    "describe",
    "reset",
    "snapshot",
]

_lock = threading.Lock()
_boards: Counter[str] = Counter()
_letters: Counter[str] = Counter()


def add_board_outcomes(totals: Iterable[Mapping[str, int]]) -> None:
    """Add the planner's per-batch counters (``applied``, ``noop``, ``duplicate``, ...)."""
    with _lock:
        for one in totals:
            _boards.update(
                {k: v for k, v in one.items() if k in BOARD_OUTCOMES or (k in REFUSALS and v)}
            )


def add_applied(batch: Any, plan: Any) -> None:
    """One batch acknowledged by Redis: its plan's counters, here and in the job's metrics.

    ``batch`` is the :class:`~domain.records.CheckedBatch`, ``plan`` its
    :class:`~domain.planner.WritePlan` (typed loosely: this module stays free
    of the planner's imports).
    """
    add_board_outcomes([plan.totals()])
    hooks.batch_applied(batch, plan)


def add_dead_letters(codes: Iterable[DeadLetterCode | str]) -> None:
    """Add dead letters Kafka acknowledged, one code each (here and in the job's metrics)."""
    codes = list(codes)
    with _lock:
        _letters.update(codes)
    hooks.dead_letters(codes)


def snapshot() -> tuple[dict[str, int], dict[str, int]]:
    """(board outcomes, dead letters by code) so far."""
    with _lock:
        return dict(_boards), dict(_letters)


def reset() -> None:
    """Forget every count (tests running several flows in one process)."""
    with _lock:
        _boards.clear()
        _letters.clear()


def describe(boards: Mapping[str, int], letters: Mapping[str, int]) -> str:
    """One line: ``1,200 records: 1,000 applied, 150 noop, 10 duplicate, 40 dead letters (...)``.

    Tournament refusals, when there are any, follow after a semicolon: they
    are not records of their own (each refused record is also counted above).
    """
    dead = sum(letters.values())
    total = sum(boards.get(name, 0) for name in BOARD_OUTCOMES) + dead
    parts = [f"{boards.get(name, 0):,} {name}" for name in BOARD_OUTCOMES]
    codes = ", ".join(f"{code} {n:,}" for code, n in sorted(letters.items()))
    parts.append(f"{dead:,} dead letters" + (f" ({codes})" if codes else ""))
    line = f"{total:,} records: " + ", ".join(parts)
    refused = [f"{boards[name]:,} {name}" for name in REFUSALS if boards.get(name)]
    if refused:
        line += "; kept off tournament boards: " + ", ".join(refused)
    return line
