"""The team board routes: a team board's pages, a team's rank and neighbours, its members.

Synchronous handlers in FastAPI's thread pool over :class:`readers.teams.TeamReader`
(the same answers as ``lb teams`` and the Python API). Reads, so public unless
``LB_API_READS`` says otherwise, and rate limited like every read.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import Field

from api.errors import ApiError
from api.models import RankedQuery, RankMode, WindowQuery, errors
from api.routes import GameId, Now
from api.routes import _segment as segment
from readers.teams import (
    MAX_PAGE,
    TeamAround,
    TeamMembersPage,
    TeamRank,
    TeamReader,
    TeamTopPage,
)

router = APIRouter()


async def _teams(request: Request) -> TeamReader:
    reader: TeamReader = request.app.state.teams
    return reader


async def _team(teamId: Annotated[str, Path(description="team id ([A-Za-z0-9._-]{1,64})")]) -> str:
    return segment(teamId, "teamId")


Teams = Annotated[TeamReader, Depends(_teams)]
TeamId = Annotated[str, Depends(_team)]


class TeamPageQuery(WindowQuery):
    """A page of a team board or of a team's members."""

    limit: int = Field(10, ge=1, le=MAX_PAGE, description="page size")
    offset: int = Field(0, ge=0, description="entries to skip")


class TeamTopQuery(TeamPageQuery):
    """A page of a team board: how its ranks are numbered too."""

    rank_mode: RankMode = "unique"


class TeamNeighborsQuery(RankedQuery):
    """How many teams on each side, and how ranks are numbered."""

    k: int = Field(5, ge=0, le=MAX_PAGE, description="teams on each side")


_ERRORS = errors(400, 401, 404, 429, 500, 503)


@router.get(
    "/v1/leaderboards/{gameId}/teams",
    response_model=TeamTopPage,
    responses=_ERRORS,
    summary="One page of a team board, best first",
)
def team_top(
    game: GameId, q: Annotated[TeamTopQuery, Query()], teams: Teams, now: Now
) -> TeamTopPage:
    """Teams scored by the game's aggregate of their members' scores on the window.

    ``rank_mode=dense`` needs a game with ``dense_ranks`` (400 otherwise).
    """
    return teams.top(game, q.window, now, q.limit, q.offset, ranks=q.rank_mode)


@router.get(
    "/v1/leaderboards/{gameId}/teams/{teamId}",
    response_model=TeamRank,
    responses=_ERRORS,
    summary="A team's rank and score",
)
def team_rank(
    game: GameId, team: TeamId, q: Annotated[RankedQuery, Query()], teams: Teams, now: Now
) -> TeamRank:
    """404 ``NOT_FOUND`` when the team has no scored member on the window."""
    answer = teams.rank(game, team, q.window, now, ranks=q.rank_mode)
    if answer["rank"] is None:
        raise ApiError(
            HTTPStatus.NOT_FOUND, "NOT_FOUND", f"team {team!r} is not on {answer['window']}"
        )
    return answer


@router.get(
    "/v1/leaderboards/{gameId}/teams/{teamId}/around",
    response_model=TeamAround,
    responses=_ERRORS,
    summary="A team and its neighbours on the team board",
)
def team_around(
    game: GameId, team: TeamId, q: Annotated[TeamNeighborsQuery, Query()], teams: Teams, now: Now
) -> TeamAround:
    """404 ``NOT_FOUND`` when the team is not on the board."""
    answer = teams.around(game, team, q.window, now, q.k, ranks=q.rank_mode)
    if answer["team"] is None:
        raise ApiError(
            HTTPStatus.NOT_FOUND, "NOT_FOUND", f"team {team!r} is not on {answer['window']}"
        )
    return answer


@router.get(
    "/v1/leaderboards/{gameId}/teams/{teamId}/members",
    response_model=TeamMembersPage,
    responses=_ERRORS,
    summary="A team's members ranked within it",
)
def team_members(
    game: GameId, team: TeamId, q: Annotated[TeamPageQuery, Query()], teams: Teams, now: Now
) -> TeamMembersPage:
    """An empty page when the team has no scored member on the window."""
    return teams.members(game, team, q.window, now, q.limit, q.offset)
