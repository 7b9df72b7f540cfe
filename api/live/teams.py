"""Live pushes of a game's team board: its top N teams and one team's rank.

A team's aggregate changes when a member scores (the group write of
``lb run``), when a player joins or leaves it (``lb teams run``) and when the
team boards are recomputed (``lb rebuild``, ``lb backfill``, ``lb teams
resync``). Each of those atomic writes appends the aggregates it changed to
the game's team change stream ``<ns>:{<game>}:teams:changes``
(``sinks/teams/team_lib.lua``), as the group write appends board changes to
the board's stream; the hub follows it like any change stream, so team
subscribers share its one ``XREAD`` loop, its bounded queues, its replay on
reconnect and the subscription loop of :mod:`api.live.subscription`.

A push reads the team board (one shared read per question, rank mode and batch
of changes, as for player boards) and sends a ``top`` page whenever a change of
the window arrived and the page read differs from the last one sent, and a
``rank`` whenever the followed team's answer differs. Any change of the window
is read again, so competition and dense ranks (which a change off the page can
move) are pushed as ``GET`` answers them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from api.live.hub import ChangeHub, Subscriber
from api.live.messages import Send, StreamChange, outgoing
from api.live.reads import SharedReads, now_ms
from api.live.subscription import LiveQuery, Subscription
from api.live.throttle import MAX_DUE, Throttle
from readers.teams import TeamBoard, TeamRank, TeamReader, TeamTopPage


class TeamSubscription(Subscription):
    """One subscriber of a team board (``query.player_id`` is the followed team)."""

    def __init__(
        self,
        hub: ChangeHub,
        reads: SharedReads,
        teams: TeamReader,
        query: LiveQuery,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._hub = hub
        self._reads = reads
        self._teams = teams
        self._query = query
        self._clock = clock
        # A bad game, window or team id fails here, and rank_mode=dense on a game without
        # distinct-score counts (as for player boards).
        board = teams.ranked_board(query.game_id, query.window, clock(), query.ranks)
        if query.player_id is not None:
            teams.rank(query.game_id, query.player_id, query.window, clock())
        self.keys = (board.keys.changes,)
        self._positions: dict[str, str] = {}
        self._throttle = Throttle(query.interval_ms / 1000)
        self._idle = False
        self._write_now = None
        self._page: list[Any] | None = None
        self._team: TeamRank | None = None
        self.subscriber = Subscriber(
            self.keys,
            watch=("teams", query.game_id, query.window, query.top, query.ranks),
            select_top=self._select_top,
            select_own=self._select_own if query.player_id is not None else None,
        )

    def _board(self) -> TeamBoard:
        return self._teams.board(self._query.game_id, self._query.window, self._clock())

    def _top_changes(self, changes: list[StreamChange], window_id: str) -> list[StreamChange]:
        if not self._query.top:
            return []
        return [c for c in changes if c.window == window_id]

    def _own_changes(self, changes: list[StreamChange], window_id: str) -> list[StreamChange]:
        if self._query.player_id is None:
            return []
        return [c for c in changes if c.window == window_id]

    def _window_id(self) -> str:
        return self._board().window_id

    async def _push(self, send: Send, changes: list[StreamChange], *, first: bool) -> None:
        """Send the page and/or the team's rank when they differ from what was last sent."""
        query, board = self._query, self._board()
        version, position = self._hub.version, self.position
        window_id = board.window_id
        if query.top and (first or self._top_changes(changes, window_id)):
            page = await self._reads.shared(
                ("teams-top", query.game_id, window_id, query.top, query.ranks),
                version,
                lambda: asyncio.to_thread(
                    self._teams.top,
                    query.game_id,
                    window_id,
                    now_ms(),
                    query.top,
                    ranks=query.ranks,
                ),
            )
            if first or page["entries"] != self._page:
                self._page = page["entries"]
                body = _top_body(board, page, changes[-MAX_DUE:])
                await send("top", position, outgoing("top", position, body))
        team = query.player_id
        if team is not None and (first or self._own_changes(changes, window_id)):
            rank: TeamRank = await self._reads.shared(
                ("teams-rank", query.game_id, team, window_id, query.ranks),
                version,
                lambda: asyncio.to_thread(
                    self._teams.rank, query.game_id, team, window_id, now_ms(), ranks=query.ranks
                ),
            )
            if first or rank != self._team:
                self._team = rank
                await send("rank", position, outgoing("rank", position, rank))

    def push_now(self) -> bool:
        """Team pushes always go through the subscriber's task."""
        return False


def _top_body(board: TeamBoard, page: TeamTopPage, changes: list[StreamChange]) -> dict[str, Any]:
    """The ``top`` message's body: the page as ``GET .../teams`` answers it, and the changes."""
    ranks = {entry["teamId"]: entry["rank"] for entry in page["entries"]}
    return {
        **page,
        "changes": [
            {
                "teamId": c.player,
                "old": None if c.old is None else board.score(c.old),
                "new": None if c.new is None else board.score(c.new),
                "rank": ranks.get(c.player),
            }
            for c in changes
            if c.window == board.window_id
        ],
    }
