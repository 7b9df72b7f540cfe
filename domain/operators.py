"""How one event changes one player's value on one board.

Values are compared at slot granularity (the event time already rounded to
the game's tie resolution, see :mod:`domain.scoring`), never at raw
milliseconds: a value read back from Redis only knows its slot, and it must
behave exactly like the value the job kept in memory, or a restart would
change the outcome of a replay.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.errors import EncodingError
from domain.games import Operator

__all__ = [
    "Entry",
    "apply",
    "apply_composite",
    "apply_composite_asc",
    "saturates",
    "saturates_composite",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One player's board value: the score and the slot it was reached at."""

    score: int
    slot: int


def apply(op: Operator, current: Entry | None, score: int, slot: int, max_score: int) -> Entry:
    """The player's value after an event of ``score`` at ``slot``.

    - ``BEST`` keeps the higher score; at equal score the earlier slot (the
      first to reach it ranks higher). The result is the maximum under one
      total order, so it does not depend on the order events arrive in.
    - ``INCR`` adds, saturating at ``max_score`` so the composite stays exact;
      the slot is the latest contributing slot (when the total was reached).
      Sum and max commute, so this too is independent of arrival order.
    - ``SET`` takes the event unless it is older than the current value; at
      the same slot the later event in the log wins (a player's events are
      ordered in one partition, so a replay decides the same way).

    Returns ``current`` itself when the event changes nothing, so callers can
    detect a no-op with ``is``/``==``. Scores outside ``[0, max_score]`` must be
    dead-lettered (``BOUNDS``) before they get here; they raise
    :class:`EncodingError`.
    """
    if not 0 <= score <= max_score:
        raise EncodingError(f"score {score} is outside [0, {max_score}]")
    if slot < 0:
        raise EncodingError(f"slot {slot} is negative")
    if current is None:
        return Entry(score, slot)
    if op is Operator.BEST:
        if score > current.score or (score == current.score and slot < current.slot):
            return Entry(score, slot)
        return current
    if op is Operator.INCR:
        new = Entry(min(current.score + score, max_score), max(current.slot, slot))
        return current if new == current else new
    if op is Operator.SET:
        if slot >= current.slot and (score, slot) != (current.score, current.slot):
            return Entry(score, slot)
        return current
    raise ValueError(f"unknown operator {op!r}")  # pragma: no cover - exhaustive


def saturates(op: Operator, current: Entry | None, score: int, max_score: int) -> bool:
    """Whether an ``INCR`` event would push the total past ``max_score`` (and be capped).

    Lets the flow count or report capped totals; other operators never saturate
    because their scores are bounded individually.
    """
    if op is not Operator.INCR:
        return False
    return _past_cap(current.score if current is not None else 0, score, max_score)


def saturates_composite(
    current: int | None, score: int, slots: int, max_score: int, ascending: bool
) -> bool:
    """:func:`saturates` of an ``INCR`` event on a packed value (a lowest-wins board's too).

    The planner's hot path asks it only for ``INCR`` games; a player with no
    value yet cannot be capped (a single event's score is within bounds).
    """
    if current is None:
        return False
    stored = current // slots
    return _past_cap(max_score - stored if ascending else stored, score, max_score)


def _past_cap(total: int, score: int, max_score: int) -> bool:
    """The one saturation rule: adding ``score`` to ``total`` would pass ``max_score``."""
    return total + score > max_score


def apply_composite(
    op: Operator, current: int | None, score: int, slot: int, slots: int, max_score: int
) -> int:
    """:func:`apply` on packed board values (``score * slots + slots - 1 - slot``).

    The planner's hot path: the same rules without building :class:`Entry`
    objects. ``current`` is the player's composite (``None`` when absent);
    the result equals ``current`` exactly when the event changes nothing.
    Inputs must already be in range (validation guarantees it).
    """
    new = score * slots + (slots - 1 - slot)
    if current is None:
        return new
    if op is Operator.BEST:
        # Composite order is (score, earlier slot) order: max is the rule.
        return new if new > current else current
    cur_score, rest = divmod(current, slots)
    cur_slot = slots - 1 - rest
    if op is Operator.INCR:
        total = min(cur_score + score, max_score)
        last = cur_slot if cur_slot > slot else slot
        return total * slots + (slots - 1 - last)
    if op is Operator.SET:
        return new if slot >= cur_slot else current
    raise ValueError(f"unknown operator {op!r}")  # pragma: no cover - exhaustive


def apply_composite_asc(
    op: Operator, current: int | None, score: int, slot: int, slots: int, max_score: int
) -> int:
    """:func:`apply_composite` on a lowest-wins board, whose values hold ``max_score - score``.

    ``BEST`` and ``SET`` are the same rules on the stored value (the largest
    stored value is the lowest score, at equal score the earlier slot). ``INCR``
    still adds to the real total, capped at ``max_score``, so its stored value
    falls: ``max(stored - score, 0)``.
    """
    if op is Operator.INCR and current is not None:
        cur_stored, rest = divmod(current, slots)
        cur_slot = slots - 1 - rest
        stored = cur_stored - score if cur_stored > score else 0
        last = cur_slot if cur_slot > slot else slot
        return stored * slots + (slots - 1 - last)
    return apply_composite(op, current, max_score - score, slot, slots, max_score)
