"""The ASGI application: routes, live pushes, docs and the live page, wired from the settings.

Clients are made once, in the app's lifespan, and shared through
``app.state``: a synchronous Redis client for the readers (run in the thread
pool), an asyncio one (``redis.asyncio``, standalone or cluster) for the
change-stream hub and the health check, and the Kafka producer, made on the
first ``POST``. ``/openapi.json`` is generated from the routes' models and
names no server (clients use the address they reached it at); ``/docs`` serves
Swagger UI 5 (which renders OpenAPI 3.1) from the assets the ``fastapi-offline``
package ships, so no CDN is needed.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from api import erasure, push, routes, team_routes
from api.auth.guard import Guard
from api.auth.keyfile import ApiKeys
from api.auth.tokens import PlayerTokens
from api.erasure import Eraser
from api.errors import error_response, install_error_handlers
from api.hot import HotRoutes
from api.intake import ACK_TIMEOUT_S, INTAKE_LINGER_MS, AckingProducer, ScoreIntake
from api.limits import RateLimits, rates, redis_storage
from api.live import ChangeHub, SharedReads
from api.metrics import RATE_LIMIT_ERRORS, RequestMetrics, exposition
from api.models import page_bytes
from api.pages import DEFAULT_TTL_MS, PageCache
from api.profile_intake import ProfileIntake
from config.clients import async_redis_client, game_catalog
from config.heap import settle_heap
from config.settings import Settings
from config.version import VERSION
from domain.errors import ConfigError
from domain.games import GameCatalog
from domain.signing import parse_keyring
from producer.profiles import ensure_profiles_topic
from producer.score_producer import ScoreProducer
from readers import redis_client
from readers.async_boards import AsyncBoardReader
from readers.boards import BoardReader
from readers.friends import FriendsReader
from readers.hot import HotReader
from readers.profiles import AsyncProfileReader, ProfileReader
from readers.teams import TeamReader
from schemas.codec import ScoreEventCodec
from schemas.profile_codec import ProfileCodec

API_VERSION = VERSION
#: Largest request body accepted: a batch of 1,000 events is ~300 KB of JSON.
MAX_BODY_BYTES = 512 * 1024
STATIC = Path(__file__).with_name("static")


def docs_assets() -> Path:
    """Swagger UI's script, stylesheet and icon, as the fastapi-offline package ships them."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise ConfigError("fastapi-offline is not installed (run scripts/bootstrap.sh)")
    return Path(spec.origin).parent / "static"


def wall_clock_ms() -> int:
    """Epoch milliseconds: the clock a request reads once."""
    return time.time_ns() // 1_000_000


class RawPathRouting:
    """Route on the percent-encoded path, so ``%2F`` inside an id stays inside it.

    The server decodes ``/players/a%2Fb`` to ``/players/a/b``, which would
    match no route; with the raw path the route sees ``a%2Fb`` and
    :mod:`api.routes` decodes each segment strictly (bad UTF-8 is a 400).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] in ("http", "websocket") and raw:
            scope = {**scope, "path": raw.decode("latin-1")}
        await self.app(scope, receive, send)


class BodyLimits:
    """Refuse a chunked body (411) or one above ``max_body`` (413) before reading it."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length", b"").strip()
            refusal = None
            if b"transfer-encoding" in headers:
                refusal = (
                    HTTPStatus.LENGTH_REQUIRED,
                    "LENGTH_REQUIRED",
                    "send the body with a Content-Length",
                )
            elif length and not length.isdigit():
                refusal = (HTTPStatus.BAD_REQUEST, "BAD_REQUEST", "bad Content-Length")
            elif length and int(length) > self.max_body:
                refusal = (
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    f"the body may be at most {self.max_body} bytes",
                )
            if refusal is not None:
                # The body is not read: close the connection rather than drain it.
                response = error_response(*refusal, {"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def app_from_environment() -> Any:
    """The app of one ``lb serve --workers N`` process (uvicorn's factory import string).

    Worker processes are spawned fresh, so they rebuild the app from the
    settings of the environment they inherit (``lb serve`` adds its
    ``--max-body`` and ``--page-cache-ms`` there) instead of receiving the
    parent's objects.
    """
    settings = Settings.from_env()
    app = create_app(
        settings,
        max_body=MAX_BODY_BYTES if settings.serve_max_body is None else settings.serve_max_body,
        page_cache_ms=(
            DEFAULT_TTL_MS if settings.serve_page_cache_ms is None else settings.serve_page_cache_ms
        ),
    )
    settle_heap()
    return app


def _profile_producer(settings: Settings) -> ScoreProducer:
    """The profile intake's producer, made by the first ``PUT``: the topic exists, compacted."""
    ensure_profiles_topic(settings)
    return ScoreProducer(
        settings.kafka_bootstrap,
        settings.profiles_topic,
        {"linger.ms": INTAKE_LINGER_MS, **settings.kafka_extra},
    )


def _lifespan(
    settings: Settings, games: GameCatalog, clock: Callable[[], int], page_cache_ms: int
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Makes the clients at start-up, shares them through ``app.state``, closes them at exit."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sync_client = redis_client(settings)
        async_client = async_redis_client(settings)
        producer = AckingProducer(
            lambda: ScoreProducer(
                settings.kafka_bootstrap,
                settings.topic,
                {"linger.ms": INTAKE_LINGER_MS, **settings.kafka_extra},
            ),
            ACK_TIMEOUT_S,
        )
        state = app.state
        state.clock = clock
        state.boards = BoardReader(sync_client, games, settings.namespace)
        state.async_boards = AsyncBoardReader(state.boards, async_client)
        state.friends = FriendsReader(sync_client, games, settings.namespace)
        state.profiles = ProfileReader(sync_client, settings.namespace)
        state.async_profiles = AsyncProfileReader(async_client, settings.namespace)
        state.hot = HotReader(sync_client, games, settings.namespace)
        state.teams = TeamReader(sync_client, games, settings.namespace)
        state.intake = ScoreIntake(
            parse_keyring(settings.hmac_keys.reveal()),
            games,
            ScoreEventCodec.from_registry(),
            producer,
        )
        state.profile_intake = ProfileIntake(
            parse_keyring(settings.hmac_keys.reveal()),
            ProfileCodec.from_registry(),
            AckingProducer(lambda: _profile_producer(settings), ACK_TIMEOUT_S),
        )
        state.async_redis = async_client
        state.erasure = Eraser(settings, sync_client, games)
        state.hub = ChangeHub(async_client)
        state.shared_reads = SharedReads(state.hub, state.async_boards, state.async_profiles)
        state.pages = (
            PageCache(state.hub, state.async_boards, page_bytes, page_cache_ms / 1000)
            if page_cache_ms > 0
            else None
        )
        limited = rates(settings)
        state.rate_limits = (
            RateLimits(
                redis_storage(settings, async_client), limited, on_error=RATE_LIMIT_ERRORS.inc
            )
            if limited
            else None
        )
        try:
            yield
        finally:
            await state.hub.close()
            state.intake.close()
            state.profile_intake.close()
            await async_client.aclose()
            sync_client.close()

    return lifespan


def _add_pages(app: FastAPI) -> None:
    """The metrics, the Swagger UI and the live page: routes outside the OpenAPI document."""

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """The Prometheus metrics of this process (request counts and latencies)."""
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="Real-time leaderboard API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon.png",
        )

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        if not (STATIC / "live.js").exists():  # bundled at install from live.ts and clients/js
            return error_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                "the live page's script is not built: run scripts/build_js.sh",
            )
        return FileResponse(STATIC / "index.html")


def create_app(
    settings: Settings,
    *,
    catalog: GameCatalog | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    max_body: int = MAX_BODY_BYTES,
    hot_routes: bool = True,
    page_cache_ms: int = DEFAULT_TTL_MS,
) -> Any:
    """The whole HTTP API of one deployment (an ASGI app for uvicorn).

    Readers use ``LB_REDIS_URL``, ``LB_NAMESPACE`` and the ``LB_GAMES`` catalog
    (or ``catalog``); intake verifies with ``LB_HMAC_KEYS`` and produces to
    ``LB_TOPIC``. ``clock`` (epoch ms) decides which daily/weekly board is
    current; tests pass a fixed one. ``hot_routes=False`` sends every request
    through FastAPI (:mod:`api.hot` is only a shorter way to the same answers;
    the tests compare the two). ``page_cache_ms`` bounds the age of a cached
    top page (:mod:`api.pages`; 0: no cache).
    """
    games = catalog if catalog is not None else game_catalog(settings)

    app = FastAPI(
        title="Real-time leaderboard API",
        version=API_VERSION,
        description="Reads of the Redis leaderboards, live pushes and signed score intake; "
        'see docs/API.md. Every error is {"error": {"code", "message"}}.',
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan(settings, games, clock, page_cache_ms),
    )
    install_error_handlers(app, [routes.router, push.router, erasure.router, team_routes.router])
    app.include_router(routes.router)
    app.include_router(push.router)
    app.include_router(erasure.router)
    app.include_router(team_routes.router)
    app.mount("/docs-assets", StaticFiles(directory=docs_assets()), name="docs-assets")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    _add_pages(app)
    hot = HotRoutes(app, enabled=hot_routes)
    return _guarded(BodyLimits(RawPathRouting(RequestMetrics(hot)), max_body), app, settings)


def _guarded(inner: ASGIApp, app: FastAPI, settings: Settings) -> ASGIApp:
    """``inner`` behind the callers' checks (:mod:`api.auth.guard`) and, if any, CORS.

    The guard is the outermost layer but CORS, so that it takes the ``token``
    parameter off the server's own request scope (uvicorn logs that one).
    """
    tokens = None
    if settings.player_tokens and settings.jwt_audience and settings.jwt_issuer:
        tokens = PlayerTokens(
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            secret=settings.jwt_secret.reveal() if settings.jwt_secret else None,
            keys_file=settings.jwt_keys_file,
            leeway_s=settings.jwt_leeway_s,
        )
    guard = Guard(
        inner,
        app.state,
        tokens=tokens,
        keys=ApiKeys(settings.api_keys_file) if settings.api_keys_file else None,
        reads_authenticated=settings.api_reads == "authenticated",
        writes_authenticated=settings.writes_authenticated,
        limited=bool(rates(settings)),
        cors_origins=settings.cors_origins,
    )
    if not settings.cors_origins:
        return guard
    return CORSMiddleware(
        guard,
        allow_origins=list(settings.cors_origins),
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        expose_headers=["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"],
        max_age=600,
    )
