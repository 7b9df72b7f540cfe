"""HTTP errors: one JSON shape, ``{"error": {"code": ..., "message": ...}}``, for every failure.

The routes raise the project's own errors (:class:`~domain.errors.QueryError`,
:class:`~domain.errors.ServiceError`, ...) or :class:`ApiError`; the handlers
registered by :func:`install_error_handlers` turn each into its status and
code, so no route builds an error document itself.

====  =======================  ================================================
400   ``BAD_REQUEST``          malformed query (window, limit, cursor, id, an
                               unknown query parameter, ...)
400   ``INVALID_BODY``         ``POST /v1/scores`` body is not a valid event
400   ``BOUNDS``/``UNKNOWN_GAME``  event outside the game's bounds / unknown game
401   ``SIGNATURE``            the HMAC does not match
401   ``UNKNOWN_KEY``          ``keyId`` is not in the keyring
401   ``UNAUTHENTICATED``      no caller where one is required, or a token or API
                               key that does not verify (:mod:`api.auth.guard`)
403   ``FORBIDDEN``            a caller without the right (someone else's player)
404   ``NOT_FOUND``            no such route, or the player has no score there
404   ``UNKNOWN_GAME``         the game in the path is not served
405   ``METHOD_NOT_ALLOWED``   known path, other method (``Allow`` lists them)
411   ``LENGTH_REQUIRED``      a body without ``Content-Length`` (e.g. chunked)
413   ``PAYLOAD_TOO_LARGE``    body above the limit
429   ``RATE_LIMITED``         the caller's rate limit of the route class is spent
500   ``INTERNAL``             a bug or corrupt data (details go to the log)
503   ``UNAVAILABLE``          Redis or Kafka did not answer
====  =======================  ================================================
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from domain.errors import LeaderboardError, QueryError, ServiceError
from readers.boards import UnknownGameError

log = logging.getLogger("lb.api")


class ApiError(LeaderboardError):
    """An answer other than 2xx with its own code (e.g. 401 ``SIGNATURE``)."""

    def __init__(
        self, status: HTTPStatus, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one error document of the API."""
    return {"error": {"code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The error document as a response."""
    return JSONResponse(error_body(code, message), status_code=status, headers=dict(headers or {}))


def invalid_body(message: str) -> ApiError:
    """A ``POST /v1/scores`` body that is not a valid event."""
    return ApiError(HTTPStatus.BAD_REQUEST, "INVALID_BODY", message)


def describe_validation(errors: Sequence[Any]) -> tuple[str, str]:
    """``(code, message)`` for a request that failed validation, naming the culprit.

    Body errors are ``INVALID_BODY``, everything else (query, path) ``BAD_REQUEST``;
    an unknown query parameter is named as such (``?windw=weekly`` must not
    silently read the all-time board).
    """
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    where = loc[0] if loc else ""
    # Drop the location kind and the union tag of a batch ("one"/"many").
    name = ".".join(part for part in loc[1:] if part not in ("one", "many"))
    kind = first.get("type", "")
    if where == "body":
        if kind == "json_invalid":
            return "INVALID_BODY", "the body is not JSON"
        if kind == "extra_forbidden":
            return "INVALID_BODY", f"unknown field {name!r}"
        return "INVALID_BODY", f"{name or 'body'}: {first.get('msg', 'invalid')}"
    if kind == "extra_forbidden":
        return "BAD_REQUEST", f"unknown {where} parameter {name!r}"
    return "BAD_REQUEST", f"{name or where}: {first.get('msg', 'invalid')}"


def _allowed_methods(routers: Sequence[APIRouter], path: str) -> list[str]:
    """Every method some route accepts at this path (for 405's ``Allow``)."""
    methods: set[str] = set()
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and route.path_regex.match(path):
                methods |= route.methods or set()
    return sorted(methods)


def install_error_handlers(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Map every error a route or the framework raises to the API's error document.

    ``routers`` are the app's routers, searched for the ``Allow`` header of a 405.
    """

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        code, message = describe_validation(exc.errors())
        return error_response(HTTPStatus.BAD_REQUEST, code, message)

    @app.exception_handler(UnknownGameError)
    async def unknown_game(request: Request, exc: UnknownGameError) -> JSONResponse:
        return error_response(HTTPStatus.NOT_FOUND, "UNKNOWN_GAME", str(exc))

    @app.exception_handler(QueryError)
    async def query(request: Request, exc: QueryError) -> JSONResponse:
        return error_response(HTTPStatus.BAD_REQUEST, "BAD_REQUEST", str(exc))

    @app.exception_handler(ServiceError)
    async def service(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", str(exc))

    @app.exception_handler(HTTPException)
    async def framework(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
            allowed = ", ".join(_allowed_methods(routers, request.url.path))
            return error_response(
                exc.status_code,
                "METHOD_NOT_ALLOWED",
                f"{request.method} is not allowed here; allowed: {allowed}",
                {"Allow": allowed},
            )
        if exc.status_code == HTTPStatus.NOT_FOUND:
            return error_response(
                exc.status_code, "NOT_FOUND", f"no route for {request.url.path!r}"
            )
        return error_response(exc.status_code, HTTPStatus(exc.status_code).name, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # A bug or corrupt data (EncodingError): the traceback goes to the log.
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(
            HTTPStatus.INTERNAL_SERVER_ERROR, "INTERNAL", "internal error (see the server log)"
        )
