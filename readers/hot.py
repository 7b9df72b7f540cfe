"""Published activity heavy hitters of one board period (``lb hot ... --publish``).

``lb hot`` counts a period's events from the log (``domain.heavy_hitters``)
and may publish the sketches to ``<ns>:{<game>}:hot:<window id>``; this
reader answers from what was published, so an HTTP request never scans Kafka.
"""

from __future__ import annotations

from typing import Literal, cast

from adapters.redis import RedisClient
from domain.errors import QueryError
from domain.games import GameCatalog
from domain.heavy_hitters import ActivityCounts, HotItem, hot_key
from domain.keys import LIVE_NAMESPACE
from domain.ranking import MAX_LIMIT
from domain.validation import MAX_ID_LENGTH
from readers.answers import HotAnswer, HotPlayer, HotRow
from readers.board_reads import call
from readers.boards import UnknownGameError

__all__ = ["HotAnswer", "HotReader", "answer_of"]


def _rows(items: list[HotItem], name: Literal["playerId", "gameId"]) -> list[HotRow]:
    """One row per item, named by ``name`` first (a player's or a game's)."""
    return [
        cast(
            HotRow,
            {
                name: h.item,
                "events": h.estimate,
                "lowerBound": h.lower_bound,
                "upperBound": h.upper_bound,
            },
        )
        for h in items
    ]


def answer_of(
    window_id: str,
    built_at_ms: int,
    players: ActivityCounts,
    games: ActivityCounts,
    limit: int,
    player_id: str | None,
) -> HotAnswer:
    """The answer shape shared by ``lb hot`` and the HTTP route."""
    player: HotPlayer | None = None
    if player_id is not None:
        estimate, lower = players.estimate(player_id)
        player = {"playerId": player_id, "events": estimate, "lowerBound": lower}
    return {
        "window": window_id,
        "builtAtMs": built_at_ms,
        "events": players.total,
        "errorBound": players.maximum_error,
        "players": _rows(players.top(limit), "playerId"),
        "games": _rows(games.top(limit), "gameId"),
        "player": player,
    }


class HotReader:
    """Reads the published activity counts of a game's board periods."""

    def __init__(
        self, client: RedisClient, catalog: GameCatalog, namespace: str = LIVE_NAMESPACE
    ) -> None:
        self._client: RedisClient = client
        self._catalog = catalog
        self.namespace = namespace

    def hot(
        self,
        game_id: str,
        window_spec: str,
        limit: int = 10,
        player_id: str | None = None,
        *,
        now_ms: int,
    ) -> HotAnswer | None:
        """The published answer, or ``None`` when nothing is published for that period."""
        config = self._catalog.lookup(game_id) if isinstance(game_id, str) else None
        if config is None:
            raise UnknownGameError(f"unknown game {str(game_id)[:80]!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"limit must be 1..{MAX_LIMIT}, got {limit!r}")
        if player_id is not None and not 0 < len(player_id) <= MAX_ID_LENGTH:
            raise QueryError(f"playerId must be 1..{MAX_ID_LENGTH} characters")
        window = config.parse_window(window_spec, now_ms)
        raw = call(
            self._client.hmget,
            hot_key(self.namespace, game_id, window.id),
            "players",
            "games",
            "builtAtMs",
        )
        if raw[0] is None or raw[1] is None or raw[2] is None:
            return None
        players, games = ActivityCounts.decode(raw[0]), ActivityCounts.decode(raw[1])
        return answer_of(window.id, int(raw[2]), players, games, limit, player_id)
