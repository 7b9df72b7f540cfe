"""``DELETE /v1/players/{playerId}``: erase a player from every game, answered with the receipt.

The same steps as ``lb forget`` (``readers.erasure``): find the player, produce the
signed erasure record and the profile and membership tombstones, wait for the
projection, remove the friend sets. Only a
server API key may call it, whatever ``LB_API_WRITES`` says
(``api.auth.policy``); without a key file the route refuses every caller.
The blocking Redis and Kafka work runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel

from adapters.redis import RedisClient
from api.errors import ApiError
from api.models import errors
from config.settings import Settings
from domain.erasure import Receipt
from domain.errors import QueryError
from domain.games import GameCatalog
from domain.signing import parse_keyring
from readers import erasure as forget
from readers.board_reads import check_player_id

router = APIRouter()


class ErasedBoard(BaseModel):
    """A board the player was on, and the score it held (null: no longer decodable)."""

    board: str
    score: int | None


class ErasureRecord(BaseModel):
    """Where the erasure record sits in the log."""

    topic: str
    partition: int
    offset: int
    eventId: str


class Tombstone(BaseModel):
    """Where a tombstone sits in a compacted topic."""

    topic: str
    partition: int
    offset: int


class ErasedProfile(BaseModel):
    """Whether the player had a profile, and the tombstone produced (null: no profiles topic)."""

    removed: bool
    record: Tombstone | None


class ErasedMembership(BaseModel):
    """A team the player was a member of, in a game that keeps team boards."""

    game: str
    teamId: str


class ErasedTeams(BaseModel):
    """The memberships removed, and the tombstone produced (null: no game keeps team boards)."""

    removed: list[ErasedMembership]
    record: Tombstone | None


class ErasureReceipt(BaseModel):
    """What an erasure removed, where its records are, when it was requested and done."""

    player: str
    record: ErasureRecord
    requestedMs: int
    doneMs: int | None
    applied: bool
    boards: int
    games: dict[str, list[ErasedBoard]]
    friendSets: int
    followers: int
    profile: ErasedProfile
    teams: ErasedTeams


#: The longest a request may wait for the job (``?timeoutS=``).
MAX_WAIT_S = 120.0


class Eraser:
    """What the route needs: settings, a Redis client; one erasure per call."""

    def __init__(self, settings: Settings, client: RedisClient, catalog: GameCatalog) -> None:
        self._settings = settings
        self._client = client
        self._catalog = catalog
        self.enabled = settings.api_keys_file is not None

    def forget(self, player: str, timeout_s: float) -> Receipt:
        """Erase ``player`` (blocking); QueryError when it is found nowhere or times out."""
        settings = self._settings
        keyring = parse_keyring(settings.hmac_keys.reveal())
        found = forget.find(self._client, settings.namespace, player, self._catalog)
        if not found:
            raise LookupError(player)
        where = forget.produce(
            settings.kafka_bootstrap,
            dict(settings.kafka_extra),
            forget.topics(settings, self._catalog),
            keyring,
            keyring.key_ids[0],
            player,
            time.time_ns() // 1_000_000,
        )
        forget.wait_applied(
            self._client,
            settings.namespace,
            player,
            where,
            found,
            timeout_s,
            lambda progress: None,
        )
        friends = forget.remove_outside_log(self._client, settings.namespace, player, found, where)
        return forget.receipt(player, where, found, time.time_ns() // 1_000_000, friends)


@router.delete(
    "/v1/players/{playerId}",
    response_model=ErasureReceipt,
    responses=errors(401, 403, 404, 429, 503, 504),
    summary="Erase a player from every game (server API key only); answers the receipt",
)
async def erase_player(
    request: Request,
    playerId: Annotated[str, Path(description="player id (1..128 characters)")],
    timeoutS: Annotated[float, Query(gt=0, le=MAX_WAIT_S)] = 30.0,
) -> Any:
    """Produce the erasure record, wait until the boards no longer hold the player, 200."""
    eraser: Eraser | None = getattr(request.app.state, "erasure", None)
    if eraser is None or not eraser.enabled:
        raise ApiError(
            HTTPStatus.FORBIDDEN,
            "FORBIDDEN",
            "erasure over HTTP needs server API keys (LB_API_KEYS)",
        )
    check_player_id(playerId)
    try:
        receipt = await asyncio.to_thread(eraser.forget, playerId, timeoutS)
    except LookupError:
        raise ApiError(
            HTTPStatus.NOT_FOUND,
            "NOT_FOUND",
            f"player {playerId!r} is on no board, in no friend set, has no profile and no "
            "team: nothing to erase",
        ) from None
    except QueryError as exc:  # the job did not apply it in time
        raise ApiError(HTTPStatus.GATEWAY_TIMEOUT, "TIMEOUT", str(exc)) from exc
    return receipt.as_json()
