"""The push endpoints: ``/live`` (WebSocket) and ``/events`` (Server-Sent Events).

Both carry the same JSON messages (:mod:`api.live`, documented in docs/API.md)
and differ only in framing: a WebSocket text frame per message, or an SSE
event whose ``event:`` is the message type and whose ``id:`` is the stream
position, so a browser's ``EventSource`` resumes by itself (``Last-Event-ID``).
Every send has a deadline; a subscriber that cannot keep up is told
``dropped`` (when the socket still takes it) and disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response, WebSocket
from pydantic import Field, ValidationError
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from api.errors import ApiError, describe_validation, error_body
from api.live import SEND_TIMEOUT_S, LiveQuery, Outgoing, Subscription, outgoing
from api.live.teams import TeamSubscription
from api.models import DEFAULT_WINDOW, RankMode, Window, _Query, errors
from api.ws_frames import EXTENSION, FrameWriter
from domain.errors import LeaderboardError, QueryError
from readers.boards import UnknownGameError

router = APIRouter()

#: WebSocket close code for a subscriber dropped as too slow (1013: try again later).
CLOSE_TOO_SLOW = 1013
#: WebSocket close code for a bad subscription (1008: policy violation).
CLOSE_BAD_REQUEST = 1008
#: SSE comment sent when nothing else was, so proxies and clients see a live stream.
KEEPALIVE_S = 15.0


class LiveParams(_Query):
    """What a push subscriber follows, and how often it may be told."""

    window: Window = DEFAULT_WINDOW
    top: int = Field(10, ge=0, le=100, description="top-N to follow (0: none)")
    playerId: str | None = Field(None, description="also follow this player's rank")
    interval: int = Field(
        250, ge=50, le=60_000, description="at most one update per this many milliseconds"
    )
    lastEventId: str | None = Field(
        None, description="resume after this position (the id of the last message received)"
    )
    rank_mode: RankMode = "unique"
    teams: bool = Field(
        False, description="follow the game's team board instead of its player board"
    )
    teamId: str | None = Field(None, description="with teams: also follow this team's rank")


def _subscription(request: Request | WebSocket, game_id: str, params: LiveParams) -> Subscription:
    app = request.app
    if params.teams and params.playerId is not None:
        raise QueryError("playerId follows a player board: with teams=true, use teamId")
    if not params.teams and params.teamId is not None:
        raise QueryError("teamId follows a team board: add teams=true")
    query = LiveQuery(
        game_id,
        params.window,
        params.top,
        params.teamId if params.teams else params.playerId,
        interval_ms=params.interval,
        ranks=params.rank_mode,
    )
    if params.teams:
        return TeamSubscription(app.state.hub, app.state.shared_reads, app.state.teams, query)
    return Subscription(app.state.hub, app.state.shared_reads, query)


async def _until_either(first: Awaitable[Any], second: Awaitable[Any]) -> Any:
    """Run both; return the first one's result (None if ``second`` ends first)."""
    one = asyncio.ensure_future(first)
    two = asyncio.ensure_future(second)
    try:
        done, _ = await asyncio.wait({one, two}, return_when=asyncio.FIRST_COMPLETED)
        return one.result() if one in done else None
    finally:
        for task in (one, two):
            task.cancel()
        for task in (one, two):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@router.websocket("/v1/leaderboards/{gameId}/live")
async def live(websocket: WebSocket, gameId: str) -> None:
    """Top-N and rank pushes over a WebSocket (query as for ``/events``)."""
    await websocket.accept()
    frames: FrameWriter | None = websocket.scope.get("extensions", {}).get(EXTENSION)

    async def send(kind: str, position: str, message: Outgoing) -> None:
        # The shared frame, written at once while the socket drains: no ASGI message,
        # no framing and no deadline timer per subscriber (api/ws_frames.py).
        if frames is not None and frames.try_write(message.frame):
            return
        async with asyncio.timeout(SEND_TIMEOUT_S):  # cheaper than wait_for: no extra task
            if frames is not None:
                await frames.send(message.frame)
            else:
                await websocket.send_text(message.text)

    try:
        params = LiveParams.model_validate(dict(websocket.query_params))
        subscription = _subscription(websocket, gameId, params)
        subscription.parse_position(params.lastEventId)
    except (ValidationError, LeaderboardError) as exc:
        if isinstance(exc, ValidationError):
            code, message = describe_validation(exc.errors())
        else:
            code = "UNKNOWN_GAME" if isinstance(exc, UnknownGameError) else "BAD_REQUEST"
            message = str(exc)
        await websocket.send_text(json.dumps({"type": "error", **error_body(code, message)}))
        await websocket.close(CLOSE_BAD_REQUEST, message[:120])
        return

    async def disconnected() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                await websocket.receive_text()

    try:
        write_now = (lambda message: frames.try_write(message.frame)) if frames else None
        reason = await _until_either(
            subscription.run(send, params.lastEventId, write_now), disconnected()
        )
    except (TimeoutError, OSError, RuntimeError, WebSocketDisconnect):
        return  # stuck or gone: nothing more can be said on this socket
    if reason is not None:
        with contextlib.suppress(Exception):
            position = subscription.position
            dropped = outgoing("dropped", position, {"reason": reason})
            await send("dropped", position, dropped)
            await websocket.close(CLOSE_TOO_SLOW, "too slow")


class EventStream(Response):
    """An ASGI response that writes SSE events with a deadline per write.

    Starlette's StreamingResponse would wait for ever on a client that stopped
    reading; here a write that cannot leave within ``SEND_TIMEOUT_S`` ends the
    response, and a disconnect ends the subscription at once.
    """

    def __init__(self, subscription: Subscription, last_event_id: str | None) -> None:
        super().__init__(media_type="text/event-stream")
        self._subscription = subscription
        self._last_event_id = last_event_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )

        async def write(chunk: str) -> None:
            body = {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await send(body)

        async def event(kind: str, position: str, message: Outgoing) -> None:
            await write(f"event: {kind}\nid: {position}\ndata: {message.text}\n\n")

        async def keepalive() -> None:
            while True:
                await asyncio.sleep(KEEPALIVE_S)
                await write(": keep-alive\n\n")

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        subscription = self._subscription
        try:
            reason = await _until_either(
                subscription.run(event, self._last_event_id),
                _until_either(disconnected(), keepalive()),
            )
            if reason is not None:
                position = subscription.position
                await event("dropped", position, outgoing("dropped", position, {"reason": reason}))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (TimeoutError, OSError):
            return  # the client stopped reading: the server closes the connection


@router.get(
    "/v1/leaderboards/{gameId}/events",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "SSE stream"},
        **errors(400, 401, 404, 429, 503),
    },
)
async def events(
    request: Request,
    gameId: str,
    params: Annotated[LiveParams, Query()],
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventStream:
    """Top-N and rank pushes as Server-Sent Events (resumes from ``Last-Event-ID``)."""
    subscription = _subscription(request, gameId, params)
    resume = last_event_id or params.lastEventId
    try:
        subscription.parse_position(resume)
    except QueryError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, "BAD_REQUEST", str(exc)) from exc
    return EventStream(subscription, resume)
