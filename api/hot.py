"""The hot routes without the framework's per-request machinery.

``GET /v1/leaderboards/{gameId}/top`` and ``POST /v1/scores`` are what game
backends call thousands of times a second. Through FastAPI each request
walks the middleware stack, the route table and dependency injection before
any work of ours starts; on this project's 2-core machine that was most of a
request's time (see the HTTP section of docs/BENCHMARKS.md). :class:`HotRoutes`
sits in front of the FastAPI app and answers those two routes itself when the
request is one it is sure about, with the same models, readers and intake the
routes use, so the documents are the same:

- the query (or body) is validated by the route's own pydantic model, and a
  page by the route's ``response_model`` (:func:`api.models.page_bytes`);
- anything unusual (an unknown or repeated parameter, a validation error, a
  reader error, a body that is not ``application/json``) is handed to the
  FastAPI route untouched, which answers it exactly as before (error codes
  included): only well-formed requests take the short way.

The FastAPI routes stay the definition of the API: they generate the OpenAPI
document and serve every request this module passes on. A test sends the
same requests both ways and compares the bytes.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.types import Message, Receive, Scope, Send

from api import routes
from api.errors import error_body
from api.models import ScoreEventIn, ScoreSubmission, TopQuery, page_bytes, submitted_bytes
from api.pages import PageCache
from domain.errors import LeaderboardError, ServiceError

_TOP_PREFIX = "/v1/leaderboards/"
_TOP_SUFFIX = "/top"
_TOP_PARAMS = frozenset(TopQuery.model_fields)
_JSON = b"application/json"
_SUBMISSION: TypeAdapter[Any] = TypeAdapter(ScoreSubmission)


def json_bytes(document: Any) -> bytes:
    """A document as Starlette's ``JSONResponse`` renders it (compact, UTF-8, no NaN)."""
    return json.dumps(
        document, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()


async def send_json(send: Send, status: int, body: bytes) -> None:
    """One complete JSON response in two ASGI messages."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", _JSON),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _route(path: str, method: str) -> APIRoute:
    for route in routes.router.routes:
        if isinstance(route, APIRoute) and route.path == path and method in (route.methods or ()):
            return route
    raise LookupError(f"no {method} {path} route")  # a wiring bug, found at start


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the already-read body once, then the real channel."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


class HotRoutes:
    """ASGI: the short way for well-formed ``top`` reads and score submissions.

    ``state`` is the FastAPI app's ``state`` (filled by its lifespan), read per
    request so the clients made at start-up are the ones used.
    """

    def __init__(self, app: FastAPI, *, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        self._top_route = _route("/v1/leaderboards/{gameId}/top", "GET")
        self._scores_route = _route("/v1/scores", "POST")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.enabled and scope["type"] == "http":
            path: str = scope["path"]
            method: str = scope["method"]
            if (
                method == "GET"
                and path.startswith(_TOP_PREFIX)
                and path.endswith(_TOP_SUFFIX)
                and await self._top(scope, path[len(_TOP_PREFIX) : -len(_TOP_SUFFIX)], send)
            ):
                return
            if method == "POST" and path == "/v1/scores" and not scope["query_string"]:
                rest = await self._scores(scope, receive, send)
                if rest is None:
                    return
                receive = rest
        await self.app(scope, receive, send)

    async def _top(self, scope: Scope, raw_game: str, send: Send) -> bool:
        """Answer a well-formed ``top``; False to let the route answer instead."""
        if not raw_game or "/" in raw_game:
            return False
        pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        params = dict(pairs)
        if len(params) != len(pairs) or not _TOP_PARAMS.issuperset(params):
            return False  # repeated or unknown parameters: the route says what is wrong
        try:
            game = unquote(raw_game, errors="strict")
            q = TopQuery.model_validate(params)
            state = self.app.state
            now = state.clock()
            pages: PageCache | None = state.pages
            if pages is not None and not q.cursor and q.rank_mode == "unique":
                body = await pages.top(game, q.window, q.limit, q.offset, now)
                if q.profile:  # the cache keeps bare pages: profiles change on their own
                    body = page_bytes(await state.async_profiles.hydrate(json.loads(body)))
            else:
                page = await state.async_boards.top(
                    game,
                    q.window,
                    q.limit,
                    q.offset,
                    q.cursor or None,
                    now_ms=now,
                    ranks=q.rank_mode,
                    profiles=q.profile,
                )
                body = page_bytes(page)
        except (ValidationError, LeaderboardError, UnicodeDecodeError):
            return False  # the route reads again and answers the error document
        scope["route"] = self._top_route  # the metrics' route label
        await send_json(send, HTTPStatus.OK, body)
        return True

    async def _scores(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Answer a well-formed submission (None), or the ``receive`` for the route."""
        headers = dict(scope["headers"])
        if headers.get(b"content-type", b"").split(b";")[0].strip().lower() != _JSON:
            return receive
        intake = self.app.state.intake
        if intake is None:
            return receive  # not configured: the route says so
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            submission = _SUBMISSION.validate_python(json.loads(body))
            bodies = [submission] if isinstance(submission, ScoreEventIn) else submission
            events = [intake.check(one) for one in bodies]
        except (ValueError, LeaderboardError):
            return _replaying(body, receive)  # the route reads it again and refuses it
        scope["route"] = self._scores_route
        try:
            await intake.send(events)
        except ServiceError as exc:
            await send_json(
                send,
                HTTPStatus.SERVICE_UNAVAILABLE,
                json_bytes(error_body("UNAVAILABLE", str(exc))),
            )
            return None
        ids = [event.event_id for event in events]
        body = submitted_bytes(ids, batch=not isinstance(submission, ScoreEventIn))
        await send_json(send, HTTPStatus.ACCEPTED, body)
        return None
