"""The names every face shares for where a record went: board outcomes and dead-letter codes.

Declared once, here; the planner's counters (``meta:stats``), the job's
summary line and metrics, the dead-letter headers, ``lb dlq`` and SPEC.md all
use these. Both are :class:`~enum.StrEnum`, so a member *is* its name (it
compares, hashes and serialises as the string); code on the per-event hot
path keeps the plain ``.value`` strings, which hash in C.
"""

from __future__ import annotations

from enum import StrEnum, auto


class Outcome(StrEnum):
    """What happened to an accepted record, counted in ``meta:stats``.

    Each value is its name in lower case (``applied``, ``noop``, ...).
    """

    #: It changed at least one board.
    APPLIED = auto()
    #: It changed nothing (not better than the kept score, say).
    NOOP = auto()
    #: Its event id was seen before (a retried submission, a replay).
    DUPLICATE = auto()
    #: An ``incr`` total reached the game's ``max_score`` and stopped there.
    SATURATED = auto()
    #: Kept off a tournament board: the player's partition had no seat left.
    TOURNAMENT_FULL = auto()
    #: Kept off a tournament board: the player had used every attempt.
    ATTEMPTS_USED_UP = auto()


#: Every outcome's name as a plain string (the fields of ``meta:stats``), in declaration order.
COUNTERS = tuple(outcome.value for outcome in Outcome)
#: The outcomes that partition the accepted records, in the order summaries name them.
BOARD_OUTCOMES = (Outcome.APPLIED, Outcome.NOOP, Outcome.DUPLICATE)
#: Tournament refusals: counted besides the outcome (never dead-lettered; the
#: record still updates the game's other boards).
REFUSALS = (Outcome.TOURNAMENT_FULL, Outcome.ATTEMPTS_USED_UP)


class DeadLetterCode(StrEnum):
    """Why a record was refused (SPEC.md): its dead letter's ``error.code`` header.

    ``DECODE``: not a readable record; ``SCHEMA``: readable but breaking the
    schema contract or the id rules (schemas/codec.py details both);
    ``SIGNATURE``: the HMAC does not match; ``UNKNOWN_KEY``: a key id the
    keyring does not hold; ``BOUNDS``: a score or timestamp outside the game's
    bounds; ``FUTURE``: stamped further after its Kafka record than the
    allowed skew; ``LATE``: every board it would update had closed;
    ``UNKNOWN_GAME``: a game the catalog does not serve;
    ``METADATA_TOO_LARGE``: metadata longer than the game's
    ``metadata_max_bytes`` (UTF-8).
    """

    DECODE = "DECODE"
    SCHEMA = "SCHEMA"
    SIGNATURE = "SIGNATURE"
    UNKNOWN_KEY = "UNKNOWN_KEY"
    BOUNDS = "BOUNDS"
    FUTURE = "FUTURE"
    LATE = "LATE"
    UNKNOWN_GAME = "UNKNOWN_GAME"
    METADATA_TOO_LARGE = "METADATA_TOO_LARGE"


#: Every dead-letter code as a plain string, in declaration order.
CODES = tuple(code.value for code in DeadLetterCode)


class DeadLetterHeader(StrEnum):
    """The headers of a dead letter (its value is the original bytes, untouched)."""

    CODE = "error.code"
    DETAIL = "error.detail"
    TOPIC = "source.topic"
    PARTITION = "source.partition"
    OFFSET = "source.offset"
    TIMESTAMP = "source.timestamp"
