"""The names every face shares for where a record went: board outcomes and dead-letter codes.

Declared once, here; the planner's counters (``meta:stats``), the job's
summary line and metrics, the dead-letter headers, ``lb dlq`` and SPEC.md all
use these. Both are :class:`~enum.StrEnum`, so a member *is* its name (it
compares, hashes and serialises as the string); code on the per-event hot
path keeps the plain ``.value`` strings, which hash in C.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What happened to an accepted record; counted in ``meta:stats``."""

    #: It changed at least one board.
    APPLIED = "applied"
    #: It changed nothing (not better than the kept score, say).
    NOOP = "noop"
    #: Its event id was seen before (a retried submission, a replay).
    DUPLICATE = "duplicate"
    #: An ``incr`` total reached the game's ``max_score`` and stopped there.
    SATURATED = "saturated"
    #: Kept off a tournament board: the player's partition had no seat left.
    TOURNAMENT_FULL = "tournament_full"
    #: Kept off a tournament board: the player had used every attempt.
    ATTEMPTS_USED_UP = "attempts_used_up"


#: The outcomes that partition the accepted records, in the order summaries name them.
BOARD_OUTCOMES = (Outcome.APPLIED, Outcome.NOOP, Outcome.DUPLICATE)
#: Tournament refusals: counted besides the outcome (never dead-lettered; the
#: record still updates the game's other boards).
REFUSALS = (Outcome.TOURNAMENT_FULL, Outcome.ATTEMPTS_USED_UP)


class DeadLetterCode(StrEnum):
    """Why a record was refused (SPEC.md): its dead letter's ``error.code`` header."""

    #: The bytes are not a readable record (schemas/codec.py has the details).
    DECODE = "DECODE"
    #: Readable, but breaking the schema contract or the id rules.
    SCHEMA = "SCHEMA"
    #: The HMAC does not match the event.
    SIGNATURE = "SIGNATURE"
    #: Signed with a key id the keyring does not hold.
    UNKNOWN_KEY = "UNKNOWN_KEY"
    #: A score or timestamp outside the game's bounds.
    BOUNDS = "BOUNDS"
    #: Stamped further after its Kafka record's timestamp than the allowed skew.
    FUTURE = "FUTURE"
    #: Every board it would update closed too long before its record's timestamp.
    LATE = "LATE"
    #: A game the catalog does not serve.
    UNKNOWN_GAME = "UNKNOWN_GAME"


class DeadLetterHeader(StrEnum):
    """The headers of a dead letter (its value is the original bytes, untouched)."""

    CODE = "error.code"
    DETAIL = "error.detail"
    TOPIC = "source.topic"
    PARTITION = "source.partition"
    OFFSET = "source.offset"
    TIMESTAMP = "source.timestamp"
