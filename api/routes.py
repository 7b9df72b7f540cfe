"""The request/response routes: board reads, friends, score intake, health.

Reads call the same readers as the Python API and the CLI (``readers/``), so
the answers are the same documents: ``top``, ``rank`` and ``around`` on the
asyncio client (:mod:`readers.async_boards`), the friends routes as synchronous
handlers in FastAPI's thread pool. Every answer is one of the readers' shapes
(:mod:`readers.answers`), which is also the route's ``response_model``:
FastAPI validates what the route returns against it and serialises it in
pydantic's core (no ``JSONResponse`` bypasses that). Each
request reads the clock once (``window=weekly`` means the week of that
instant). Path segments arrive still percent-encoded (:mod:`api.app` routes on
the raw path, so an id may contain ``/``) and are decoded here, strictly.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from api.errors import ApiError
from api.intake import ScoreIntake
from api.models import (
    Accepted,
    AcceptedBatch,
    AroundAnswer,
    FriendAdded,
    FriendRemoved,
    Friends,
    FriendsBoard,
    FriendsBoardQuery,
    Health,
    HotAnswer,
    HotQuery,
    NeighborsQuery,
    NoQuery,
    PlayerTournaments,
    ProfileAccepted,
    ProfileIn,
    RankAnswer,
    RankedQuery,
    ScoreEventIn,
    ScoreSubmission,
    TopPage,
    TopQuery,
    TournamentsQuery,
    errors,
)
from api.profile_intake import ProfileIntake
from domain.errors import QueryError
from readers.async_boards import AsyncBoardReader
from readers.boards import BoardReader
from readers.friends import FriendsReader
from readers.hot import HotReader
from readers.profiles import ProfileReader

router = APIRouter()


def _segment(raw: str, what: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise QueryError(f"{what} in the path is not valid UTF-8 once percent-decoded") from None


async def _game(gameId: Annotated[str, Path(description="game id ([A-Za-z0-9._-]{1,64})")]) -> str:
    return _segment(gameId, "gameId")


async def _player(
    playerId: Annotated[str, Path(description="player id (1..128 characters)")],
) -> str:
    return _segment(playerId, "playerId")


async def _friend(friendId: Annotated[str, Path(description="the friend's player id")]) -> str:
    return _segment(friendId, "friendId")


async def _boards(request: Request) -> AsyncBoardReader:
    reader: AsyncBoardReader = request.app.state.async_boards
    return reader


async def _friends(request: Request) -> FriendsReader:
    reader: FriendsReader = request.app.state.friends
    return reader


async def _sync_boards(request: Request) -> BoardReader:
    reader: BoardReader = request.app.state.boards
    return reader


async def _sync_profiles(request: Request) -> ProfileReader:
    reader: ProfileReader = request.app.state.profiles
    return reader


async def _hot(request: Request) -> HotReader:
    reader: HotReader = request.app.state.hot
    return reader


async def _now(request: Request) -> int:
    now: int = request.app.state.clock()
    return now


GameId = Annotated[str, Depends(_game)]
PlayerId = Annotated[str, Depends(_player)]
FriendId = Annotated[str, Depends(_friend)]
AsyncBoards = Annotated[AsyncBoardReader, Depends(_boards)]
FriendsOf = Annotated[FriendsReader, Depends(_friends)]
Now = Annotated[int, Depends(_now)]
HotOf = Annotated[HotReader, Depends(_hot)]
SyncBoards = Annotated[BoardReader, Depends(_sync_boards)]
SyncProfiles = Annotated[ProfileReader, Depends(_sync_profiles)]
_NoQuery = Annotated[NoQuery, Query()]


def _absent(player_id: str, window_id: str) -> ApiError:
    return ApiError(
        HTTPStatus.NOT_FOUND, "NOT_FOUND", f"player {player_id!r} has no score on {window_id}"
    )


@router.get(
    "/v1/leaderboards/{gameId}/top",
    response_model=TopPage,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="One page of a board, best first",
)
async def top(
    game: GameId,
    q: Annotated[TopQuery, Query()],
    boards: AsyncBoards,
    now: Now,
) -> TopPage:
    """One page by offset or cursor; ``nextCursor`` is null at the end."""
    return await boards.top(
        game,
        q.window,
        q.limit,
        q.offset,
        q.cursor or None,
        now_ms=now,
        ranks=q.rank_mode,
        profiles=q.profile,
    )


@router.get(
    "/v1/leaderboards/{gameId}/players/{playerId}",
    response_model=RankAnswer,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="A player's rank, score and percentile",
)
async def rank(
    game: GameId,
    player: PlayerId,
    q: Annotated[RankedQuery, Query()],
    boards: AsyncBoards,
    now: Now,
) -> RankAnswer:
    """404 ``NOT_FOUND`` when the player has no score on that board."""
    answer = await boards.rank(game, player, q.window, now_ms=now, ranks=q.rank_mode)
    if answer["score"] is None:
        raise _absent(player, answer["window"])
    return answer


@router.get(
    "/v1/leaderboards/{gameId}/players/{playerId}/neighbors",
    response_model=AroundAnswer,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="The k players right above and below a player",
)
async def neighbors(
    game: GameId,
    player: PlayerId,
    q: Annotated[NeighborsQuery, Query()],
    boards: AsyncBoards,
    now: Now,
) -> AroundAnswer:
    """``above + [player] + below`` is one contiguous slice; 404 without a score."""
    answer = await boards.around(
        game, player, q.window, q.k, now_ms=now, ranks=q.rank_mode, profiles=q.profile
    )
    if answer["player"] is None:
        raise _absent(player, answer["window"])
    return answer


@router.get(
    "/v1/leaderboards/{gameId}/players/{playerId}/tournaments",
    response_model=PlayerTournaments,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="The tournaments a player is on the board of, with rank, score and attempts",
)
def player_tournaments(
    game: GameId,
    player: PlayerId,
    q: Annotated[TournamentsQuery, Query()],
    boards: SyncBoards,
    now: Now,
) -> PlayerTournaments:
    """An empty list when the player is on no tournament board (still 200)."""
    return boards.player_tournaments(game, player, now_ms=now, ranks=q.rank_mode)


@router.get(
    "/v1/leaderboards/{gameId}/friends",
    response_model=FriendsBoard,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="A player and their friends ranked among themselves (cached briefly)",
)
def friends_board(
    game: GameId,
    q: Annotated[FriendsBoardQuery, Query()],
    friends: FriendsOf,
    profiles: SyncProfiles,
    now: Now,
    response: Response,
) -> FriendsBoard:
    """Cached for about 5 s (``Cache-Control: private, max-age=<ttl>``)."""
    board = friends.board(game, q.playerId, q.window, now_ms=now, ranks=q.rank_mode)
    if q.profile:
        profiles.hydrate(board)
    response.headers["Cache-Control"] = f"private, max-age={board['ttl']}"
    return board


@router.get(
    "/v1/leaderboards/{gameId}/hot",
    response_model=HotAnswer,
    responses=errors(400, 401, 404, 429, 500, 503),
    summary="The most active players and games of a period (heavy hitters)",
)
def hot(game: GameId, q: Annotated[HotQuery, Query()], counts: HotOf, now: Now) -> HotAnswer:
    """404 ``NOT_FOUND`` until ``lb hot GAME --window W --publish`` has published the period."""
    answer = counts.hot(game, q.window, q.limit, q.playerId, now_ms=now)
    if answer is None:
        raise ApiError(
            HTTPStatus.NOT_FOUND,
            "NOT_FOUND",
            f"no activity counts published for {game!r} on {q.window!r} "
            f"(lb hot {game} --window {q.window} --publish)",
        )
    return answer


@router.get(
    "/v1/leaderboards/{gameId}/players/{playerId}/friends",
    response_model=Friends,
    responses=errors(400, 401, 404, 429, 503),
    summary="The players this player follows",
)
def list_friends(game: GameId, player: PlayerId, _q: _NoQuery, friends: FriendsOf) -> Friends:
    """One-way, per game."""
    return {"playerId": player, "friends": friends.list_friends(game, player)}


@router.put(
    "/v1/leaderboards/{gameId}/players/{playerId}/friends/{friendId}",
    response_model=FriendAdded,
    responses=errors(400, 401, 403, 404, 429, 503),
    summary="Follow a player (idempotent)",
)
def add_friend(
    game: GameId, player: PlayerId, friend: FriendId, _q: _NoQuery, friends: FriendsOf
) -> FriendAdded:
    """``added`` is false when already followed."""
    added = friends.add(game, player, [friend])
    return {"playerId": player, "friendId": friend, "added": bool(added)}


@router.delete(
    "/v1/leaderboards/{gameId}/players/{playerId}/friends/{friendId}",
    response_model=FriendRemoved,
    responses=errors(400, 401, 403, 404, 429, 503),
    summary="Unfollow a player (idempotent)",
)
def remove_friend(
    game: GameId, player: PlayerId, friend: FriendId, _q: _NoQuery, friends: FriendsOf
) -> FriendRemoved:
    """``removed`` is false when not followed."""
    removed = friends.remove(game, player, [friend])
    return {"playerId": player, "friendId": friend, "removed": bool(removed)}


@router.post(
    "/v1/scores",
    status_code=HTTPStatus.ACCEPTED,
    response_model=Accepted | AcceptedBatch,
    responses=errors(400, 401, 403, 411, 413, 429, 500, 503),
    summary="Submit one signed score event, or a JSON array of them (produced to Kafka)",
)
async def submit_scores(
    request: Request,
    body: Annotated[ScoreSubmission, Body()],
    _q: _NoQuery,
) -> Any:
    """Verified, produced keyed by playerId, answered 202 once Kafka acknowledged all."""
    intake: ScoreIntake | None = request.app.state.intake
    if intake is None:
        raise ApiError(
            HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", "score intake is not configured"
        )
    if isinstance(body, ScoreEventIn):
        return {"eventId": (await intake.submit([body]))[0]}
    return {"eventIds": await intake.submit(body)}


@router.put(
    "/v1/profiles/{playerId}",
    status_code=HTTPStatus.ACCEPTED,
    response_model=ProfileAccepted,
    responses=errors(400, 401, 403, 411, 413, 429, 500, 503),
    summary="Submit a player's signed profile (produced to the compacted profiles topic)",
)
async def put_profile(
    request: Request,
    player: PlayerId,
    body: Annotated[ProfileIn, Body()],
    _q: _NoQuery,
) -> Any:
    """Verified, produced keyed by playerId, answered 202 once Kafka acknowledged it."""
    intake: ProfileIntake | None = request.app.state.profile_intake
    if intake is None:
        raise ApiError(
            HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", "profile intake is not configured"
        )
    await intake.submit(player, body)
    return {"playerId": player}


@router.get(
    "/livez",
    response_model=Health,
    summary="Liveness: 200 while the process serves requests (restart it otherwise)",
)
async def live(_q: _NoQuery) -> Any:
    """Always 200: answering at all is the sign of life a supervisor needs."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Health,
    responses=errors(503),
    summary="Readiness: 200 when Redis answers PING (same check as /healthz)",
)
@router.get(
    "/healthz",
    response_model=Health,
    responses=errors(503),
    summary="Liveness: 200 when Redis answers PING",
)
async def health(request: Request, _q: _NoQuery) -> Any:
    """503 ``UNAVAILABLE`` when Redis does not answer."""
    try:
        await request.app.state.async_redis.ping()
    except Exception as exc:
        raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", f"Redis: {exc}") from exc
    return {"status": "ok"}
