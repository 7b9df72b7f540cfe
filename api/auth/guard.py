"""The ASGI middleware in front of every route: token, caller, permission, rate limit.

For each HTTP request and WebSocket handshake, in this order:

1. the ``token`` query parameter is taken off the URL, in the server's own
   request scope, so neither the routes nor uvicorn's access log ever see it
   (browsers cannot set headers on a WebSocket or an ``EventSource``, so the
   push routes and the live page take the token this way);
2. ``open`` routes (:mod:`api.auth.policy`) go straight on;
3. a WebSocket handshake from a browser page of another origin than the API's
   own or ``LB_API_CORS_ORIGINS`` is refused (403);
4. the caller: ``Authorization: Bearer <token>`` (or the ``token`` parameter)
   is a server API key (``lbk_...``) or a player JWT; without one the caller
   is the client address; a token that does not verify is a 401 whatever the
   route needs (the client learns its token is bad);
5. :func:`~api.auth.policy.decide`: 401 or 403;
6. the rate limit of the route class (:mod:`api.limits`): 429 with
   ``Retry-After``, and the ``RateLimit-*`` headers on every limited answer.

Refusals use the API's error document (:mod:`api.errors`); a refused WebSocket
handshake gets it as an HTTP answer (uvicorn's WebSocket denial response).
Responses served over TLS carry ``Strict-Transport-Security``.
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth.keyfile import KEY_PREFIX, ApiKeys
from api.auth.policy import Caller, CallerKind, Refusal, Route, RouteClass, classify, decide
from api.auth.tokens import PlayerTokens, TokenError
from api.errors import error_body
from api.hot import json_bytes
from api.limits import RateLimits
from api.metrics import REFUSALS

#: HSTS on every answer over TLS: one year; subdomains are the operator's call.
HSTS = (b"strict-transport-security", b"max-age=31536000")
_REASONS = {
    HTTPStatus.UNAUTHORIZED: "unauthenticated",
    HTTPStatus.FORBIDDEN: "forbidden",
    HTTPStatus.TOO_MANY_REQUESTS: "rate_limited",
}


def take_token(query: bytes) -> tuple[str | None, bytes]:
    """The ``token`` parameter of a query string, and the query string without it."""
    token = None
    kept = []
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == b"token":
            token = unquote_plus(value.decode("latin-1"))
        elif pair:
            kept.append(pair)
    return token, b"&".join(kept)


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if there is one."""
    for name, value in headers:
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                return value[7:].strip().decode("latin-1") or None
            return None
    return None


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def _adding(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


class Guard:
    """ASGI middleware applying the caller settings; ``state`` is the FastAPI app's state.

    With no identities, no authenticated routes and no rate limits configured,
    it only takes the ``token`` parameter off URLs and adds HSTS over TLS.
    """

    def __init__(
        self,
        app: ASGIApp,
        state: Any,
        *,
        tokens: PlayerTokens | None = None,
        keys: ApiKeys | None = None,
        reads_authenticated: bool = False,
        writes_authenticated: bool = False,
        limited: bool = False,
        cors_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self._state = state
        self._tokens = tokens
        self._keys = keys
        self._reads = reads_authenticated
        self._writes = writes_authenticated
        self._origins = frozenset(cors_origins)
        self._active = bool(tokens or keys or reads_authenticated or writes_authenticated)
        self._active = self._active or limited

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        token = None
        if b"token=" in scope["query_string"]:
            token, scope["query_string"] = take_token(scope["query_string"])
        if scope["type"] == "http" and scope.get("scheme") == "https":
            send = _adding(send, [HSTS])
        if self._active:
            send_on = await self._check(scope, receive, send, token)
            if send_on is None:
                return
            send = send_on
        await self.app(scope, receive, send)

    async def _check(
        self, scope: Scope, receive: Receive, send: Send, token: str | None
    ) -> Send | None:
        """The ``send`` to go on with, or None once the request was refused."""
        websocket = scope["type"] == "websocket"
        raw = scope.get("raw_path") or scope["path"].encode()
        route = classify(scope.get("method", "GET"), raw.decode("latin-1"), websocket=websocket)
        if route.kind is RouteClass.OPEN:
            return send
        if websocket and not self._origin_allowed(scope):
            refusal = Refusal(
                HTTPStatus.FORBIDDEN, "FORBIDDEN", "pages of this origin may not use this API"
            )
            await self._refuse(scope, receive, send, route, refusal)
            return None
        token = bearer(scope["headers"]) or token
        try:
            caller = self._caller(token, scope)
        except TokenError as exc:
            refusal = Refusal(HTTPStatus.UNAUTHORIZED, "UNAUTHENTICATED", str(exc))
            headers = [(b"www-authenticate", b'Bearer error="invalid_token"')]
            await self._refuse(scope, receive, send, route, refusal, headers)
            return None
        denied = decide(
            route, caller, reads_authenticated=self._reads, writes_authenticated=self._writes
        )
        if denied is not None:
            headers = [(b"www-authenticate", b"Bearer")] if denied.status == 401 else []
            await self._refuse(scope, receive, send, route, denied, headers)
            return None
        limits: RateLimits | None = getattr(self._state, "rate_limits", None)
        verdict = await limits.hit(route.kind, caller.limit_key) if limits else None
        if verdict is None:
            return send
        if not verdict.allowed:
            refusal = Refusal(
                HTTPStatus.TOO_MANY_REQUESTS,
                "RATE_LIMITED",
                f"more than {verdict.limit} {route.kind.value} in this window; "
                f"retry in {verdict.reset_s} s",
            )
            await self._refuse(scope, receive, send, route, refusal, verdict.headers())
            return None
        return _adding(send, verdict.headers()) if not websocket else send

    def _caller(self, token: str | None, scope: Scope) -> Caller:
        if token is None:
            client = scope.get("client")
            return Caller(CallerKind.ANONYMOUS, client[0] if client else "unknown")
        if token.startswith(KEY_PREFIX):
            name = self._keys.name_of(token) if self._keys is not None else None
            if name is None:
                raise TokenError("unknown or revoked API key")
            return Caller(CallerKind.SERVER, name)
        if self._tokens is None:
            raise TokenError("player tokens are not accepted here (no LB_JWT_* settings)")
        return Caller(CallerKind.PLAYER, self._tokens.subject(token))

    def _origin_allowed(self, scope: Scope) -> bool:
        origin = _header(scope, b"origin")
        if origin is None or origin in self._origins:
            return True
        return urlsplit(origin).netloc == _header(scope, b"host")

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        route: Route,
        refusal: Refusal,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        REFUSALS.labels(route.kind.value, _REASONS[refusal.status]).inc()
        # Written as two raw messages (no Response object): a burst of refusals stays cheap.
        kind = "http.response"
        if scope["type"] == "websocket":
            await receive()  # the handshake's websocket.connect
            if "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": 1008, "reason": refusal.code})
                return
            kind = "websocket.http.response"
        body = json_bytes(error_body(refusal.code, refusal.message))
        await send(
            {
                "type": f"{kind}.start",
                "status": int(refusal.status),
                "headers": [
                    (b"content-length", b"%d" % len(body)),
                    (b"content-type", b"application/json"),
                    *(headers or []),
                ],
            }
        )
        await send({"type": f"{kind}.body", "body": body})
