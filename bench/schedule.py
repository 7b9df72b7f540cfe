"""Load shapes for the benchmarks: a steady rate, or a steady rate with a spike.

A tournament is the load a leaderboard must survive: the input rate jumps
(3x by default) for a while and falls back. The freshness benchmark paces its
producer by :meth:`RateSchedule.due` and judges recovery with
:func:`drain_seconds`. Pure functions of their arguments (no clock), so they are
unit-tested without services.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    """``rate`` events/s for ``seconds``."""

    name: str
    seconds: float
    rate: float

    @property
    def events(self) -> int:
        return round(self.seconds * self.rate)


class RateSchedule:
    """Consecutive phases; record ``i`` is due :meth:`due` seconds after the start."""

    def __init__(self, phases: Sequence[Phase]) -> None:
        if not phases or any(p.seconds <= 0 or p.rate <= 0 for p in phases):
            raise ValueError("a schedule needs phases of positive length and rate")
        self.phases = tuple(phases)
        self._first_index: list[int] = []
        self._start_s: list[float] = []
        index, start = 0, 0.0
        for phase in self.phases:
            self._first_index.append(index)
            self._start_s.append(start)
            index += phase.events
            start += phase.seconds
        self.total = index
        self.seconds = start

    @classmethod
    def steady(cls, rate: float, seconds: float) -> RateSchedule:
        return cls([Phase("steady", seconds, rate)])

    @classmethod
    def spike(
        cls, rate: float, seconds: float, factor: float, at_s: float, length_s: float
    ) -> RateSchedule:
        """``rate`` for ``seconds`` in all, ``rate * factor`` from ``at_s`` for ``length_s``."""
        after = seconds - at_s - length_s
        if at_s <= 0 or length_s <= 0 or after <= 0:
            raise ValueError("the spike must start after 0 and end before the run does")
        return cls(
            [
                Phase("before", at_s, rate),
                Phase("spike", length_s, rate * factor),
                Phase("after", after, rate),
            ]
        )

    def _phase_of(self, index: int) -> int:
        return bisect.bisect_right(self._first_index, index) - 1

    def due(self, index: int) -> float:
        """Seconds after the start when record ``index`` (from 0) should be sent."""
        at = self._phase_of(index)
        phase = self.phases[at]
        # Spread the phase's whole number of records evenly over its length, so
        # its last record is due exactly at its end and times never go back.
        return (
            self._start_s[at] + (index - self._first_index[at] + 1) * phase.seconds / phase.events
        )

    def phase_at(self, seconds: float) -> Phase:
        """The phase running ``seconds`` after the start (the last one after the end)."""
        at = bisect.bisect_right(self._start_s, seconds) - 1
        return self.phases[max(0, at)]

    def window(self, name: str) -> tuple[float, float]:
        """(start, end) seconds of the phase called ``name``."""
        for phase, start in zip(self.phases, self._start_s, strict=True):
            if phase.name == name:
                return start, start + phase.seconds
        raise KeyError(name)


def drain_seconds(
    samples: Sequence[tuple[float, int]], spike_end_s: float, normal_lag: int
) -> float | None:
    """How long after the spike ended the lag first fell back to ``normal_lag``.

    ``samples`` are (seconds after start, lag) in time order. 0.0 when the lag
    was already normal at the first sample after the spike; None when it never
    came back within the samples.
    """
    for at, lag in samples:
        if at >= spike_end_s and lag <= normal_lag:
            return round(at - spike_end_s, 3)
    return None
