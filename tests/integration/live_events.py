"""Signed score events for the live tests, produced as a game server would, stamped now."""

from __future__ import annotations

import time
import uuid

from domain.signing import parse_keyring, signed_event
from schemas.codec import ScoreEventCodec
from tests.integration.streams import KEYS, Planned

#: A ``best`` game of GAMES_TOML whose boards are kept for a century.
GAME = "gbest"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def best(player: str, score: int, game: str = GAME, metadata: str | None = None) -> Planned:
    """A signed, encoded SCORE event of ``game`` (a ``best`` game) at the current time.

    With ``metadata``, a v2 record carrying it.
    """
    at = now_ms()
    event = signed_event(
        parse_keyring(KEYS),
        "k1",
        event_id=uuid.uuid4().hex,
        game_id=game,
        player_id=player,
        score=score,
        ts_ms=at,
        metadata=metadata,
    )
    return Planned(player.encode(), ScoreEventCodec.from_registry().encode(event), at, "ok", event)
