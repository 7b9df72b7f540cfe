"""Argument types of the ``lb`` commands: a bad value is one line naming what was expected.

argparse names a type function in its message (``invalid _ratio value``) when the
function raises ``ValueError``; these raise :class:`argparse.ArgumentTypeError`
with a sentence instead (``argument --rate: not a number: 'fast'``).
"""

from __future__ import annotations

import argparse
import math


def _number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {raw!r}")
    return value


def _integer(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None


def positive_int(raw: str) -> int:
    """An integer >= 1."""
    value = _integer(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(raw: str) -> int:
    """An integer >= 0."""
    value = _integer(raw)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(raw: str) -> float:
    """A number > 0 (seconds, a rate)."""
    value = _number(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {raw}")
    return value


def non_negative_float(raw: str) -> float:
    """A number >= 0."""
    value = _number(raw)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {raw}")
    return value


def ratio(raw: str) -> float:
    """A share within 0..1."""
    value = _number(raw)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {raw}")
    return value
