"""Team board reads: top, rank and around on a game's team board, a team's members, a player's team.

Every answer is read in one round trip (a pipeline on the game's hash tag, so
one node on a cluster). Ranks are 1-based, highest score first; teams (and a
team's members) with equal scores are ordered by id, descending bytes, as Redis
orders equal scores under ``ZREVRANGE``. A team's score is an integer for
``sum`` and ``best`` and a float for ``avg``.

``top``, ``rank`` and ``around`` take the player boards' rank modes
(:data:`domain.ranking.RANK_MODES`): ``unique`` (the position), ``competition``
(equal scores share the best rank, "1224": one more ``ZCOUNT`` of the team
board) and ``dense`` ("1223": one more ``ZCOUNT`` of the distinct aggregates a
``dense_ranks`` game keeps beside each team board, written in the same atomic
call as the board; refused, never guessed, when the game keeps none or the
counts miss teams, as for player boards: :mod:`readers.dense`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from typing_extensions import TypedDict

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.games import GameCatalog, GameConfig
from domain.ranking import competition_ranks, dense_ranks, rank_mode
from domain.teams import TeamAggregate, TeamKeys, valid_team_id
from readers.answers import _documented
from readers.boards import UnknownGameError
from readers.dense import DenseRanksUnavailable, counted_ahead


@_documented
class TeamEntry(TypedDict):
    """A team's line on a team board."""

    rank: int
    """1-based; unique by default (equal scores: by team id, descending bytes)"""
    teamId: str
    score: int | float
    """the aggregate: an integer for sum and best, a float for avg"""


@_documented
class TeamTopPage(TypedDict):
    """One page of a team board, best first."""

    window: str
    aggregate: str
    """sum, best or avg"""
    entries: list[TeamEntry]


@_documented
class TeamRank(TypedDict):
    """A team's place on a team board (rank and score null: not on it)."""

    window: str
    teamId: str
    rank: int | None
    score: int | float | None
    members: int
    """members with a score on this window"""


@_documented
class TeamAround(TypedDict):
    """A team and its neighbours (team null: not on the board)."""

    window: str
    above: list[TeamEntry]
    team: TeamEntry | None
    below: list[TeamEntry]


@_documented
class TeamMember(TypedDict):
    """A member's line within its team."""

    rank: int
    playerId: str
    score: int


@_documented
class TeamMembersPage(TypedDict):
    """A team's members ranked within it on one window."""

    window: str
    teamId: str
    entries: list[TeamMember]


#: The most entries one page or one side of ``around`` may ask for.
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class TeamBoard:
    """A resolved team board: the game's team keys, the window and the aggregate."""

    game_id: str
    keys: TeamKeys
    window_id: str
    aggregate: TeamAggregate
    #: The game keeps distinct-score counts (``dense_ranks``): dense ranks are served.
    dense: bool = False

    @property
    def key(self) -> str:
        return self.keys.board(self.window_id)

    def score(self, raw: float) -> int | float:
        """A stored team score as answered (an integer unless the aggregate is ``avg``)."""
        return raw if self.aggregate is TeamAggregate.AVG else int(raw)


def _count(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QueryError(f"{name} must be an integer from {low} to {high}, got {value!r}")


def _team(team_id: str) -> None:
    if not isinstance(team_id, str) or not valid_team_id(team_id):
        raise QueryError(f"invalid team id {str(team_id)[:80]!r}: allowed A-Z a-z 0-9 . _ -")


class TeamReader:
    """Reads team boards; never writes, never reads the clock (``now_ms`` is passed in)."""

    def __init__(self, client: RedisClient, catalog: GameCatalog, namespace: str = "lb") -> None:
        self._client = client
        self._catalog = catalog
        self.namespace = namespace

    def board(self, game_id: str, window_spec: str, now_ms: int) -> TeamBoard:
        """Resolve a game with team boards and a window argument (``weekly``, an id, ...)."""
        config = self._game(game_id)
        if not isinstance(window_spec, str):
            raise QueryError(f"window must be a string, got {window_spec!r}")
        window = config.parse_window(window_spec, now_ms)
        if not config.keeps(window.kind):
            kept = ", ".join(kind.value for kind in config.kept_kinds())
            raise QueryError(
                f"game {game_id!r} keeps no {window.kind.value} board (it keeps: {kept})"
            )
        assert config.teams is not None
        keys = TeamKeys(self.namespace, game_id)
        return TeamBoard(game_id, keys, window.id, config.teams, config.dense_ranks)

    def ranked_board(self, game_id: str, window_spec: str, now_ms: int, ranks: str) -> TeamBoard:
        """:meth:`board`, with ``ranks`` checked: ``dense`` needs a ``dense_ranks`` game."""
        mode = rank_mode(ranks)
        board = self.board(game_id, window_spec, now_ms)
        if mode == "dense" and not board.dense:
            raise DenseRanksUnavailable(
                f"game {game_id!r} keeps no distinct-score counts, so rank_mode=dense "
                f"is not served (set dense_ranks = true in its LB_GAMES table, then lb rebuild)"
            )
        return board

    def _ahead(self, board: TeamBoard, score: float, mode: str) -> int:
        """Teams (competition) or distinct aggregates (dense) strictly above ``score``."""
        better = f"({score!r}"
        if mode == "competition":
            return int(cast(Any, self._client.zcount(board.key, better, "+inf")))
        window = board.window_id
        ahead, counted, teams = counted_ahead(
            self._client,
            board.key,
            board.keys.dense_counts(window),
            board.keys.dense_values(window),
            better,
        )
        if ahead is None:
            raise DenseRanksUnavailable(
                f"team board {window!r} of game {board.game_id!r} has incomplete "
                f"distinct-score counts ({counted} of {teams} teams counted: it predates "
                f"dense_ranks); run lb teams resync to recount it"
            )
        return ahead

    def _share(self, board: TeamBoard, mode: str, lines: list[TeamEntry]) -> None:
        """Consecutive lines' unique ranks rewritten in ``mode`` (competition, dense), in place."""
        if mode == "unique" or not lines:
            return
        first = self._ahead(board, float(lines[0]["score"]), mode) + 1
        shared = (competition_ranks if mode == "competition" else dense_ranks)(lines, first)
        for line, rank in zip(lines, shared, strict=True):
            assert rank is not None  # team boards have no exact tier: every rank is shown
            line["rank"] = rank

    def _game(self, game_id: str) -> GameConfig:
        config = self._catalog.lookup(game_id) if isinstance(game_id, str) else None
        if config is None:
            raise UnknownGameError(f"unknown game {str(game_id)[:80]!r}")
        if config.teams is None:
            raise QueryError(
                f'game {game_id!r} keeps no team boards (set teams = "sum", "best" or "avg" '
                f'in its [games."{game_id}"] table)'
            )
        return config

    def top(
        self,
        game_id: str,
        window_spec: str,
        now_ms: int,
        limit: int = 10,
        offset: int = 0,
        *,
        ranks: str = "unique",
    ) -> TeamTopPage:
        """``{"window", "aggregate", "entries": [{"rank", "teamId", "score"}, ...]}``.

        ``ranks``: ``unique`` (default), ``competition`` or ``dense`` (module docstring).
        """
        _count("limit", limit, 1, MAX_PAGE)
        _count("offset", offset, 0, 10**9)
        board = self.ranked_board(game_id, window_spec, now_ms, ranks)
        rows = scored(
            self._client.zrevrange(board.key, offset, offset + limit - 1, withscores=True)
        )
        entries = _entries(board, rows, offset + 1)
        self._share(board, ranks, entries)
        return {"window": board.window_id, "aggregate": board.aggregate.value, "entries": entries}

    def rank(
        self, game_id: str, team_id: str, window_spec: str, now_ms: int, *, ranks: str = "unique"
    ) -> TeamRank:
        """``{"window", "teamId", "rank", "score", "members"}`` (null rank, score: absent).

        ``ranks``: ``competition`` is 1 + the teams with a strictly higher score,
        ``dense`` 1 + the distinct aggregates higher than the team's.
        """
        _team(team_id)
        board = self.ranked_board(game_id, window_spec, now_ms, ranks)
        pipe = self._client.pipeline(transaction=False)
        pipe.zrevrank(board.key, team_id)
        pipe.zscore(board.key, team_id)
        pipe.zcard(board.keys.members(board.window_id, team_id))
        rank, score, members = cast(list[Any], pipe.execute())
        if rank is not None and score is not None and ranks != "unique":
            rank = self._ahead(board, float(score), ranks)
        return {
            "window": board.window_id,
            "teamId": team_id,
            "rank": None if rank is None else int(rank) + 1,
            "score": None if score is None else board.score(float(score)),
            "members": int(members),
        }

    def around(
        self,
        game_id: str,
        team_id: str,
        window_spec: str,
        now_ms: int,
        k: int = 5,
        *,
        ranks: str = "unique",
    ) -> TeamAround:
        """``{"window", "above": [...], "team": {...} or null, "below": [...]}``."""
        _team(team_id)
        _count("k", k, 0, MAX_PAGE)
        board = self.ranked_board(game_id, window_spec, now_ms, ranks)
        # One consistent read: the rank and the neighbours come from the same instant.
        found: Any = self._client.zrevrank(board.key, team_id)
        if found is None:
            return {"window": board.window_id, "above": [], "team": None, "below": []}
        first = max(0, int(found) - k)
        rows = scored(self._client.zrevrange(board.key, first, int(found) + k, withscores=True))
        entries = _entries(board, rows, first + 1)
        at = next((i for i, e in enumerate(entries) if e["teamId"] == team_id), None)
        if at is None:  # the board moved between the two reads: answer from the page read
            return {"window": board.window_id, "above": [], "team": None, "below": []}
        self._share(board, ranks, entries)
        return {
            "window": board.window_id,
            "above": entries[:at],
            "team": entries[at],
            "below": entries[at + 1 :],
        }

    def members(
        self,
        game_id: str,
        team_id: str,
        window_spec: str,
        now_ms: int,
        limit: int = 10,
        offset: int = 0,
    ) -> TeamMembersPage:
        """A team's members ranked within it: ``{"window", "teamId", "entries": [...]}``."""
        _team(team_id)
        _count("limit", limit, 1, MAX_PAGE)
        _count("offset", offset, 0, 10**9)
        board = self.board(game_id, window_spec, now_ms)
        key = board.keys.members(board.window_id, team_id)
        rows = scored(self._client.zrevrange(key, offset, offset + limit - 1, withscores=True))
        entries: list[TeamMember] = [
            {"rank": offset + i + 1, "playerId": member, "score": int(score)}
            for i, (member, score) in enumerate(rows)
        ]
        return {"window": board.window_id, "teamId": team_id, "entries": entries}

    def team_of(self, game_id: str, player_id: str) -> dict[str, Any]:
        """``{"playerId", "teamId"}``: the player's team in a game (null: none)."""
        self._game(game_id)
        team = self._client.hget(TeamKeys(self.namespace, game_id).membership, player_id)
        return {"playerId": player_id, "teamId": None if team is None else text(team)}


def scored(rows: Any) -> list[tuple[str, float]]:
    """A ``WITHSCORES`` reply as (member, score) pairs."""
    return [(text(member), float(score)) for member, score in rows]


def _entries(
    board: TeamBoard, rows: Sequence[tuple[str, float]], first_rank: int
) -> list[TeamEntry]:
    return [
        {"rank": first_rank + i, "teamId": member, "score": board.score(score)}
        for i, (member, score) in enumerate(rows)
    ]
