"""The score event as the rest of the pipeline sees it, independent of Avro.

Decoding turns wire bytes into this plain value once, at the edge, so every
rule downstream (signature, bounds, windows) works on typed fields instead of
dicts. Field meanings follow ``schemas/score_event.v2.avsc`` (v1 plus ``metadata``).
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class EventKind(enum.StrEnum):
    """What an event asks of the boards; the value is the Avro enum symbol."""

    #: Offer a score to every board of the game (the operator decides if it counts).
    SCORE = "SCORE"
    #: Remove the player from every board of the game (e.g. a banned cheater).
    RETRACT = "RETRACT"


class ScoreEvent(NamedTuple):
    """One signed score event, exactly as produced by a game server.

    Immutable so an event cannot be altered after its signature was checked
    (``_replace`` makes a new one, as a test's tampering does); a NamedTuple
    because the job builds, holds and pickles 100K of them per second and a
    tuple is the cheapest immutable value to build.
    ``ts_ms`` is event time (when the score was achieved) in epoch
    milliseconds, kept as an int: it is exact and cheap, unlike a datetime.
    """

    event_id: str
    game_id: str
    player_id: str
    score: int
    ts_ms: int
    kind: EventKind
    key_id: str
    sig: bytes
    #: What the score was made with (schema v2's optional ``metadata``), free
    #: text; None for a v1 record and a v2 record without it. Signed (v2's
    #: canonical string) and kept with the board entry the event sets.
    metadata: str | None = None
