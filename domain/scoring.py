"""Composite (score, tie-break) encoding that stays exact in an IEEE double.

Redis sorted-set scores are doubles, and doubles hold every integer only below
``2**53``. A board orders players by score and, at equal score, puts the earlier
achiever first; both facts must live in the one double Redis sorts by. So the
board value is the integer ``score * slots + (slots - 1 - slot)`` where a *slot*
is the event time rounded down to the game's tie resolution within a fixed
range (the window, or the all-time origin..until). Reversing the slot makes an
earlier time a larger composite, so ``ZREVRANGE`` lists it first; players equal
in score and slot have equal composites and Redis falls back to its own fixed
order (lexicographic member order: the greater playerId first under
``ZREVRANGE``).

A lowest-wins board (``order = "asc"``) stores ``ceiling - score`` instead of
the score, with ``ceiling`` the game's ``max_score``: the lowest score then has
the largest composite, so every reader, merge and percentile that relies on
"larger composite ranks higher" serves it unchanged, ties still go to the
earlier slot, and the exactness bound is the same as for a descending board.

The bound is checked up front (:attr:`TieCodec.max_score`) rather than
discovered as silently merged ranks once a double rounds.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from domain.errors import EncodingError

__all__ = ["MAX_EXACT", "TieCodec", "TieResolution"]

MAX_EXACT = 2**53
"""Every composite is strictly below this, so it survives a round-trip through a double."""


class TieResolution(enum.StrEnum):
    """How finely event time separates players with equal scores.

    Coarser resolutions need fewer slots and so leave room for larger scores;
    ``NONE`` drops the time tie-break entirely (only Redis' member order is left).
    """

    MS = "ms"
    S = "s"
    MIN = "min"
    NONE = "none"

    @property
    def unit_ms(self) -> int | None:
        """Milliseconds per slot, or ``None`` when time does not break ties."""
        return _UNIT_MS[self]


_UNIT_MS: dict[TieResolution, int | None] = {
    TieResolution.MS: 1,
    TieResolution.S: 1_000,
    TieResolution.MIN: 60_000,
    TieResolution.NONE: None,
}


@dataclass(frozen=True, slots=True)
class TieCodec:
    """Packs (score, slot) of one board into one exact integer and back.

    ``origin_ms`` and ``span_ms`` fix the time range whose slots the board can
    tell apart: ``[origin_ms, origin_ms + span_ms)``.
    """

    origin_ms: int
    span_ms: int
    resolution: TieResolution
    ascending: bool = False
    """Lower scores rank higher: the board stores ``ceiling - score``."""
    ceiling: int = 0
    """The largest score of an ascending board (the game's ``max_score``)."""

    def __post_init__(self) -> None:
        if self.span_ms <= 0:
            raise EncodingError(f"tie-break span must be positive, got {self.span_ms} ms")
        if self.ascending and self.ceiling < 0:
            raise EncodingError(f"an ascending board needs a ceiling >= 0, got {self.ceiling}")

    def stored(self, score: int) -> int:
        """The value a board sorts by for ``score`` (``ceiling - score`` when ascending).

        Its own inverse: ``stored(stored(s)) == s``.
        """
        return self.ceiling - score if self.ascending else score

    @property
    def slots(self) -> int:
        """How many distinct tie-break values the range holds (1 for ``NONE``)."""
        unit = self.resolution.unit_ms
        if unit is None:
            return 1
        return -(-self.span_ms // unit)

    @property
    def max_score(self) -> int:
        """The largest score whose every slot encodes below ``2**53``.

        ``compose(s, 0) = (s + 1) * slots - 1`` is the largest composite of score
        ``s``, and it is ``< 2**53`` exactly when ``s + 1 <= 2**53 // slots``.
        It is ``-1`` when even score 0 does not fit (more than ``2**53`` slots).
        """
        return MAX_EXACT // self.slots - 1

    def slot(self, ts_ms: int) -> int:
        """The tie-break slot of an event time; grows with time, 0 for ``NONE``."""
        if not self.origin_ms <= ts_ms < self.origin_ms + self.span_ms:
            raise EncodingError(
                f"event time {ts_ms} ms is outside the board's tie-break range "
                f"[{self.origin_ms}, {self.origin_ms + self.span_ms}) ms"
            )
        unit = self.resolution.unit_ms
        if unit is None:
            return 0
        return (ts_ms - self.origin_ms) // unit

    def compose(self, score: int, slot: int) -> int:
        """The board value of ``score`` reached at ``slot``; earlier slot ⇒ larger."""
        slots = self.slots
        if not 0 <= slot < slots:
            raise EncodingError(f"slot {slot} is outside [0, {slots})")
        if score < 0:
            raise EncodingError(f"score {score} is negative")
        if score > self.max_score:
            raise EncodingError(
                f"score {score} exceeds {self.max_score}, the largest that stays exact "
                f"below 2**53 with {slots} tie-break slots"
            )
        if self.ascending and score > self.ceiling:
            raise EncodingError(f"score {score} is above the board's ceiling {self.ceiling}")
        return self.stored(score) * slots + (slots - 1 - slot)

    def encode(self, score: int, ts_ms: int) -> int:
        """``compose(score, slot(ts_ms))``."""
        return self.compose(score, self.slot(ts_ms))

    def split(self, composite: int | float) -> tuple[int, int]:
        """The exact ``(score, slot)`` of a board value, e.g. a float read from Redis.

        Refuses anything :meth:`compose` could not have produced, so a value that
        was written by another codec or has lost precision is noticed, not misread.
        """
        if isinstance(composite, bool):
            raise EncodingError(f"composite must be a number, got {composite!r}")
        if isinstance(composite, float):
            if not math.isfinite(composite) or not composite.is_integer():
                raise EncodingError(f"composite {composite!r} is not an integer")
            value = int(composite)
        else:
            value = composite
        if not 0 <= value < MAX_EXACT:
            raise EncodingError(f"composite {composite!r} is outside [0, 2**53)")
        slots = self.slots
        score, rest = divmod(value, slots)
        if score > self.max_score:
            raise EncodingError(
                f"composite {composite!r} decodes to score {score} above {self.max_score}"
            )
        if self.ascending and score > self.ceiling:
            raise EncodingError(
                f"composite {composite!r} decodes above the board's ceiling {self.ceiling}"
            )
        return self.stored(score), slots - 1 - rest
