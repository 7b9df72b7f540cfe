"""JSON over HTTP with the standard library: routes, errors, score intake, OpenAPI.

Why ``http.server``: the API is a thin edge in front of Redis reads that take
well under a millisecond, so a threaded standard-library server (one thread per
connection, HTTP/1.1 keep-alive) is fast enough and adds no dependency to pin,
audit or keep compatible. It binds ``127.0.0.1`` by default: exposing it is a
deliberate act (``lb serve --host``), normally behind a reverse proxy that adds
TLS, authentication of readers and rate limits.

The request logic lives in :class:`Api`, which maps ``(method, target, body)``
to a :class:`Response` without touching sockets; the server class only moves
bytes, enforces the body size limit and writes the answer.

Errors are always ``{"error": {"code": ..., "message": ...}}``:

====  =======================  ================================================
400   ``BAD_REQUEST``          malformed query (window, limit, cursor, id, ...)
400   ``INVALID_BODY``         ``POST /v1/scores`` body is not a valid event
400   ``BOUNDS``/``UNKNOWN_GAME``  event outside the game's bounds / unknown game
401   ``SIGNATURE``            the HMAC does not match
401   ``UNKNOWN_KEY``          ``keyId`` is not in the keyring
404   ``NOT_FOUND``            no such route, or the player has no score there
404   ``UNKNOWN_GAME``         the game in the path is not served
405   ``METHOD_NOT_ALLOWED``   known path, other method (``Allow`` lists them)
411   ``LENGTH_REQUIRED``      a body without ``Content-Length`` (e.g. chunked)
413   ``PAYLOAD_TOO_LARGE``    body above the limit (16 KiB by default)
500   ``INTERNAL``             a bug or corrupt data (details go to the log)
503   ``UNAVAILABLE``          Redis or Kafka did not answer
====  =======================  ================================================
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from config.settings import Settings
from domain.errors import QueryError, ServiceError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, valid_game_id
from domain.ranking import MAX_K, MAX_LIMIT
from domain.signing import Keyring, Verdict, canonical, parse_keyring, sign, verify
from domain.validation import MAX_ID_LENGTH
from readers import RedisClient, game_catalog, redis_client
from readers.boards import BoardReader, UnknownGameError
from readers.friends import FriendsReader
from schemas.codec import ScoreEventCodec
from sources.producer import ScoreProducer

__all__ = [
    "DEFAULT_HOST",
    "MAX_BODY_BYTES",
    "Api",
    "ApiError",
    "ApiServer",
    "Response",
    "ScoreIntake",
    "build_api",
    "make_server",
    "openapi_document",
]

DEFAULT_HOST = "127.0.0.1"
#: Largest request body accepted; a score event is ~300 bytes of JSON.
MAX_BODY_BYTES = 16 * 1024
#: How long ``POST /v1/scores`` waits for Kafka to acknowledge the record.
FLUSH_TIMEOUT_S = 10.0
DEFAULT_WINDOW = "alltime"
DEFAULT_LIMIT = 10
DEFAULT_K = 5
API_VERSION = "1.0.0"

_BODY_FIELDS = frozenset(
    {"eventId", "gameId", "playerId", "score", "timestamp", "kind", "keyId", "sig"}
)
_MAX_LONG = 2**63 - 1


class ApiError(Exception):
    """An answer other than 2xx, raised anywhere below :meth:`Api.handle`."""

    def __init__(
        self, status: HTTPStatus, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Response:
    """Status, JSON document and extra headers of one answer."""

    status: HTTPStatus
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()


def _error(status: HTTPStatus, code: str, message: str, **headers: str) -> Response:
    return Response(status, {"error": {"code": code, "message": message}}, headers)


# --- score intake ----------------------------------------------------------------------


class ScoreIntake:
    """Checks a signed score event from a request body and produces it to Kafka.

    The signature is verified before any other field is trusted (as the job
    does), so the answers distinguish "not yours to send" (401) from "yours
    but invalid" (400). The record the job later reads is exactly what the
    game server signed: same eventId, same signature, Avro-encoded with
    ``schemas.codec`` and keyed by playerId.

    ``eventId`` may be omitted. The client then signs the canonical string
    with an empty eventId; the intake derives the id from the signed content
    (``api-`` + 32 hex digits of its SHA-256, so a retried request gets the
    same id and is deduplicated by the job) and re-signs the record with the
    same key.

    Delivery: 202 only after Kafka acknowledged the record (acks=all); a
    failure answers 503 and the client retries (idempotent thanks to the
    eventId). One producer is shared and serialised by a lock: the producer
    is not thread-safe, and a flush per request is the acknowledgement.
    """

    def __init__(
        self,
        keyring: Keyring,
        catalog: GameCatalog,
        codec: ScoreEventCodec,
        producer_factory: Callable[[], ScoreProducer],
        flush_timeout_s: float = FLUSH_TIMEOUT_S,
    ) -> None:
        self._keyring = keyring
        self._catalog = catalog
        self._codec = codec
        self._factory = producer_factory
        self._timeout = flush_timeout_s
        self._lock = threading.Lock()
        self._producer: ScoreProducer | None = None

    def check(self, body: Any) -> ScoreEvent:
        """The event in a parsed body, signed as the job will verify it; ApiError if not."""
        if not isinstance(body, dict):
            raise _invalid("the body must be a JSON object")
        unknown = sorted(set(body) - _BODY_FIELDS)
        if unknown:
            raise _invalid(f"unknown field(s) {unknown}; allowed: {sorted(_BODY_FIELDS)}")
        game_id = _string(body, "gameId", 64)
        player_id = _string(body, "playerId", MAX_ID_LENGTH)
        key_id = _string(body, "keyId", 64)
        event_id = _string(body, "eventId", MAX_ID_LENGTH) if "eventId" in body else None
        score = _integer(body, "score")
        ts_ms = _integer(body, "timestamp")
        raw_kind = body.get("kind", EventKind.SCORE.value)
        if raw_kind not in (EventKind.SCORE.value, EventKind.RETRACT.value):
            raise _invalid("kind must be 'SCORE' or 'RETRACT'")
        kind = EventKind(raw_kind)
        sig_hex = body.get("sig")
        if not isinstance(sig_hex, str) or len(sig_hex) != 64:
            raise _invalid("sig must be 64 hex digits (HMAC-SHA256)")
        try:
            sig = bytes.fromhex(sig_hex)
        except ValueError:
            raise _invalid("sig must be 64 hex digits (HMAC-SHA256)") from None

        signed_id = event_id if event_id is not None else ""
        claimed = ScoreEvent(signed_id, game_id, player_id, score, ts_ms, kind, key_id, sig)
        verdict = verify(self._keyring, claimed)
        if verdict is Verdict.UNKNOWN_KEY:
            raise ApiError(HTTPStatus.UNAUTHORIZED, "UNKNOWN_KEY", f"unknown keyId {key_id!r}")
        if verdict is not Verdict.OK:
            raise ApiError(
                HTTPStatus.UNAUTHORIZED, "SIGNATURE", "the signature does not match the event"
            )

        if not valid_game_id(game_id):
            raise _invalid("gameId must be 1..64 of A-Z a-z 0-9 . _ -")
        game = self._catalog.lookup(game_id)
        if game is None:
            raise ApiError(HTTPStatus.BAD_REQUEST, "UNKNOWN_GAME", f"unknown game {game_id!r}")
        if kind is EventKind.SCORE and score > game.max_score:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, "BOUNDS", f"score {score} is above {game.max_score}"
            )
        if event_id is not None:
            return claimed
        digest = hashlib.sha256(canonical("", game_id, player_id, score, ts_ms, kind)).hexdigest()
        derived = f"api-{digest[:32]}"
        resigned = sign(self._keyring, key_id, derived, game_id, player_id, score, ts_ms, kind)
        return ScoreEvent(derived, game_id, player_id, score, ts_ms, kind, key_id, resigned)

    def submit(self, body: Any) -> str:
        """Check, produce and wait for the acknowledgement; returns the eventId."""
        event = self.check(body)
        with self._lock:
            if self._producer is None:
                self._producer = self._factory()
            producer = self._producer
            try:
                producer.produce_event(event, self._codec)
                producer.flush(self._timeout)
            except ServiceError:
                # A producer remembers failures forever; start afresh next time.
                self._producer = None
                raise
        return event.event_id

    def close(self) -> None:
        """Deliver what is queued (nothing, normally: every submit flushes)."""
        with self._lock:
            if self._producer is not None:
                try:
                    self._producer.flush(self._timeout)
                finally:
                    self._producer = None


def _invalid(message: str) -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, "INVALID_BODY", message)


def _string(body: Mapping[str, Any], name: str, max_chars: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= max_chars:
        raise _invalid(f"{name} must be a string of 1..{max_chars} characters")
    return value


def _integer(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_LONG:
        raise _invalid(f"{name} must be an integer in 0..2**63-1")
    return value


# --- routing ---------------------------------------------------------------------------

_Handler = Callable[[dict[str, str], dict[str, str], bytes], Response]


@dataclass(frozen=True, slots=True)
class _Route:
    template: tuple[str, ...]
    methods: Mapping[str, str]  # HTTP method -> Api method name

    def match(self, segments: list[str]) -> dict[str, str] | None:
        if len(segments) != len(self.template):
            return None
        params: dict[str, str] = {}
        for part, segment in zip(self.template, segments, strict=True):
            if part.startswith("{"):
                if not segment:
                    return None
                params[part[1:-1]] = segment
            elif part != segment:
                return None
        return params


_ROUTES = (
    _Route(("v1", "leaderboards", "{gameId}", "top"), {"GET": "get_top"}),
    _Route(("v1", "leaderboards", "{gameId}", "players", "{playerId}"), {"GET": "get_rank"}),
    _Route(
        ("v1", "leaderboards", "{gameId}", "players", "{playerId}", "neighbors"),
        {"GET": "get_neighbors"},
    ),
    _Route(("v1", "leaderboards", "{gameId}", "friends"), {"GET": "get_friends_board"}),
    _Route(
        ("v1", "leaderboards", "{gameId}", "players", "{playerId}", "friends"),
        {"GET": "get_friends"},
    ),
    _Route(
        ("v1", "leaderboards", "{gameId}", "players", "{playerId}", "friends", "{friendId}"),
        {"PUT": "put_friend", "DELETE": "delete_friend"},
    ),
    _Route(("v1", "scores"), {"POST": "post_score"}),
    _Route(("openapi.json",), {"GET": "get_openapi"}),
    _Route(("healthz",), {"GET": "get_health"}),
)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Api:
    """Every route of the HTTP API, independent of the socket server.

    ``clock`` returns epoch milliseconds; it is read once per request, at this
    edge, and passed to the readers (``window=weekly`` means the week of that
    instant). ``intake`` is None for a read-only API (``POST /v1/scores``
    then answers 503).
    """

    def __init__(
        self,
        boards: BoardReader,
        friends: FriendsReader,
        intake: ScoreIntake | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
        ping: Callable[[], object] | None = None,
    ) -> None:
        self._boards = boards
        self._friends = friends
        self._intake = intake
        self._clock = clock
        self._ping = ping

    def handle(self, method: str, target: str, body: bytes = b"") -> Response:
        """The answer to one request; never raises."""
        try:
            parts = urlsplit(target)
            segments = [unquote(s, errors="strict") for s in parts.path.strip("/").split("/")]
            query = {
                name: values[-1]
                for name, values in parse_qs(parts.query, keep_blank_values=True).items()
            }
            for route in _ROUTES:
                params = route.match(segments)
                if params is None:
                    continue
                name = route.methods.get(method)
                if name is None:
                    allowed = ", ".join(sorted(route.methods))
                    return _error(
                        HTTPStatus.METHOD_NOT_ALLOWED,
                        "METHOD_NOT_ALLOWED",
                        f"{method} is not allowed here; allowed: {allowed}",
                        Allow=allowed,
                    )
                handler: _Handler = getattr(self, name)
                return handler(params, query, body)
            return _error(HTTPStatus.NOT_FOUND, "NOT_FOUND", f"no route for {parts.path!r}")
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message, **exc.headers)
        except UnicodeDecodeError:
            return _error(HTTPStatus.BAD_REQUEST, "BAD_REQUEST", "the path is not valid UTF-8")
        except UnknownGameError as exc:
            return _error(HTTPStatus.NOT_FOUND, "UNKNOWN_GAME", str(exc))
        except QueryError as exc:
            return _error(HTTPStatus.BAD_REQUEST, "BAD_REQUEST", str(exc))
        except ServiceError as exc:
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", str(exc))
        except Exception:  # a bug or corrupt data (EncodingError): log it, answer 500
            traceback.print_exc(file=sys.stderr)
            return _error(
                HTTPStatus.INTERNAL_SERVER_ERROR, "INTERNAL", "internal error (see the server log)"
            )

    def close(self) -> None:
        """Release what the API holds (flushes the score producer, if one was made)."""
        if self._intake is not None:
            self._intake.close()

    # -- reads ------------------------------------------------------------------------

    def get_top(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        page = self._boards.top(
            params["gameId"],
            query.get("window", DEFAULT_WINDOW),
            limit=_query_int(query, "limit", DEFAULT_LIMIT),
            offset=_query_int(query, "offset", 0),
            cursor=query.get("cursor") or None,
            now_ms=self._clock(),
        )
        return Response(HTTPStatus.OK, page)

    def get_rank(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        answer = self._boards.rank(
            params["gameId"],
            params["playerId"],
            query.get("window", DEFAULT_WINDOW),
            now_ms=self._clock(),
        )
        if answer["score"] is None:
            raise _absent(params["playerId"], answer["window"])
        return Response(HTTPStatus.OK, answer)

    def get_neighbors(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        answer = self._boards.around(
            params["gameId"],
            params["playerId"],
            query.get("window", DEFAULT_WINDOW),
            k=_query_int(query, "k", DEFAULT_K),
            now_ms=self._clock(),
        )
        if answer["player"] is None:
            raise _absent(params["playerId"], answer["window"])
        return Response(HTTPStatus.OK, answer)

    def get_friends_board(
        self, params: dict[str, str], query: dict[str, str], body: bytes
    ) -> Response:
        player = query.get("playerId")
        if not player:
            raise QueryError("the playerId query parameter is required")
        board = self._friends.board(
            params["gameId"], player, query.get("window", DEFAULT_WINDOW), now_ms=self._clock()
        )
        return Response(HTTPStatus.OK, board, {"Cache-Control": f"private, max-age={board['ttl']}"})

    def get_friends(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        friends = self._friends.list_friends(params["gameId"], params["playerId"])
        return Response(HTTPStatus.OK, {"playerId": params["playerId"], "friends": friends})

    def put_friend(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        added = self._friends.add(params["gameId"], params["playerId"], [params["friendId"]])
        return Response(
            HTTPStatus.OK,
            {"playerId": params["playerId"], "friendId": params["friendId"], "added": bool(added)},
        )

    def delete_friend(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        removed = self._friends.remove(params["gameId"], params["playerId"], [params["friendId"]])
        return Response(
            HTTPStatus.OK,
            {
                "playerId": params["playerId"],
                "friendId": params["friendId"],
                "removed": bool(removed),
            },
        )

    # -- writes and meta ---------------------------------------------------------------

    def post_score(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        if self._intake is None:
            raise ApiError(
                HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", "score intake is not configured"
            )
        try:
            doc = json.loads(body)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            raise _invalid("the body is not JSON") from None
        event_id = self._intake.submit(doc)
        return Response(HTTPStatus.ACCEPTED, {"eventId": event_id})

    def get_openapi(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        return Response(HTTPStatus.OK, openapi_document())

    def get_health(self, params: dict[str, str], query: dict[str, str], body: bytes) -> Response:
        if self._ping is not None:
            try:
                self._ping()
            except Exception as exc:
                raise ApiError(
                    HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE", f"Redis: {exc}"
                ) from exc
        return Response(HTTPStatus.OK, {"status": "ok"})


def _query_int(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 12:
        raise QueryError(f"{name} must be an integer, got {raw[:40]!r}")
    return int(raw)


def _absent(player_id: str, window_id: str) -> ApiError:
    return ApiError(
        HTTPStatus.NOT_FOUND, "NOT_FOUND", f"player {player_id!r} has no score on {window_id}"
    )


def build_api(
    settings: Settings,
    client: RedisClient | None = None,
    *,
    clock: Callable[[], int] = _wall_clock_ms,
) -> Api:
    """The API of one deployment, wired from the settings.

    Readers use ``LB_REDIS_URL`` (or ``client``), ``LB_NAMESPACE`` and the
    ``LB_GAMES`` catalog; intake verifies with ``LB_HMAC_KEYS`` and produces to
    ``LB_TOPIC``. Kafka is contacted only by the first ``POST``.
    """
    catalog = game_catalog(settings)
    redis = client if client is not None else redis_client(settings)
    intake = ScoreIntake(
        parse_keyring(settings.hmac_keys.reveal()),
        catalog,
        ScoreEventCodec.from_registry(),
        lambda: ScoreProducer(settings.kafka_bootstrap, settings.topic, settings.kafka_extra),
    )
    return Api(
        BoardReader(redis, catalog, settings.namespace),
        FriendsReader(redis, catalog, settings.namespace),
        intake,
        clock,
        ping=redis.ping,
    )


# --- the socket server -----------------------------------------------------------------


class ApiServer(ThreadingHTTPServer):
    """A threaded HTTP/1.1 server around one :class:`Api` (one thread per connection)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        api: Api,
        address: tuple[str, int],
        *,
        max_body: int = MAX_BODY_BYTES,
        quiet: bool = False,
    ) -> None:
        self.api = api
        self.max_body = max_body
        self.quiet = quiet
        super().__init__(address, _RequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = host.decode() if isinstance(host, bytes) else host
        return f"http://{shown}:{port}"


class _RequestHandler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"
    server_version = "lb-api/1"
    sys_version = ""  # do not advertise the Python version
    timeout = 30  # seconds a connection may sit idle or trickle a request

    def _serve(self) -> None:
        method = self.command
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._send(
                _error(
                    HTTPStatus.LENGTH_REQUIRED,
                    "LENGTH_REQUIRED",
                    "send the body with a Content-Length",
                ),
                method,
            )
            return
        raw_length = self.headers.get("Content-Length", "0").strip() or "0"
        if not raw_length.isdigit():
            self.close_connection = True
            self._send(_error(HTTPStatus.BAD_REQUEST, "BAD_REQUEST", "bad Content-Length"), method)
            return
        length = int(raw_length)
        if length > self.server.max_body:
            # The body is not read: close instead of draining it.
            self.close_connection = True
            self._send(
                _error(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    f"the body may be at most {self.server.max_body} bytes",
                ),
                method,
            )
            return
        body = self.rfile.read(length) if length else b""
        self._send(self.server.api.handle(method, self.path, body), method)

    def _send(self, response: Response, method: str) -> None:
        payload = response.payload()
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            super().log_message(format, *args)


def make_server(
    api: Api,
    host: str = DEFAULT_HOST,
    port: int = 0,
    *,
    max_body: int = MAX_BODY_BYTES,
    quiet: bool = False,
) -> ApiServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port (see ``.url``)."""
    return ApiServer(api, (host, port), max_body=max_body, quiet=quiet)


# --- OpenAPI -----------------------------------------------------------------------------


def _param(name: str, where: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema,
        "description": description,
    }


def _json(ref: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/E{status}"} for status in statuses}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.0 description of every route (served at ``GET /openapi.json``)."""
    game = _param("gameId", "path", {"type": "string"}, "game id ([A-Za-z0-9._-]{1,64})")
    player = _param("playerId", "path", {"type": "string"}, "player id (1..128 characters)")
    window = _param(
        "window",
        "query",
        {"type": "string", "default": DEFAULT_WINDOW},
        "alltime, daily, weekly (the current one, UTC) or daily:YYYY-MM-DD / weekly:YYYY-Www",
    )
    entry = {
        "type": "object",
        "required": ["rank", "playerId", "score"],
        "properties": {
            "rank": {
                "type": "integer",
                "nullable": True,
                "description": "1-based; null beyond the game's exact tier",
            },
            "playerId": {"type": "string"},
            "score": {"type": "integer", "format": "int64"},
        },
    }
    error = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    }
    schemas: dict[str, Any] = {
        "Entry": entry,
        "Error": error,
        "TopPage": {
            "type": "object",
            "required": ["window", "entries", "nextCursor"],
            "properties": {
                "window": {"type": "string", "example": "weekly:2026-W18"},
                "entries": {"type": "array", "items": {"$ref": "#/components/schemas/Entry"}},
                "nextCursor": {
                    "type": "string",
                    "nullable": True,
                    "description": "opaque; pass as cursor for the next page; null at the end",
                },
            },
        },
        "Rank": {
            "type": "object",
            "required": ["window", "playerId", "rank", "score", "percentile"],
            "properties": {
                "window": {"type": "string"},
                "playerId": {"type": "string"},
                "rank": {"type": "integer", "nullable": True},
                "score": {"type": "integer", "format": "int64"},
                "percentile": {
                    "type": "number",
                    "description": "share (0-100, truncated to 2 decimals) of the board's "
                    "players with a strictly lower score",
                },
            },
        },
        "Neighbors": {
            "type": "object",
            "required": ["window", "above", "player", "below"],
            "properties": {
                "window": {"type": "string"},
                "above": {"type": "array", "items": {"$ref": "#/components/schemas/Entry"}},
                "player": {"$ref": "#/components/schemas/Entry"},
                "below": {"type": "array", "items": {"$ref": "#/components/schemas/Entry"}},
            },
        },
        "FriendsBoard": {
            "type": "object",
            "required": ["window", "entries", "cached", "ttl"],
            "properties": {
                "window": {"type": "string"},
                "entries": {"type": "array", "items": {"$ref": "#/components/schemas/Entry"}},
                "cached": {"type": "boolean"},
                "ttl": {"type": "integer", "description": "seconds the answer stays cached"},
            },
        },
        "Friends": {
            "type": "object",
            "properties": {
                "playerId": {"type": "string"},
                "friends": {"type": "array", "items": {"type": "string"}},
            },
        },
        "FriendChange": {
            "type": "object",
            "properties": {
                "playerId": {"type": "string"},
                "friendId": {"type": "string"},
                "added": {"type": "boolean"},
                "removed": {"type": "boolean"},
            },
        },
        "ScoreEvent": {
            "type": "object",
            "additionalProperties": False,
            "required": ["gameId", "playerId", "score", "timestamp", "keyId", "sig"],
            "properties": {
                "eventId": {
                    "type": "string",
                    "maxLength": MAX_ID_LENGTH,
                    "description": "idempotency key; when omitted, sign with an empty eventId "
                    "and the server derives one from the signed content",
                },
                "gameId": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
                "playerId": {"type": "string", "maxLength": MAX_ID_LENGTH},
                "score": {"type": "integer", "format": "int64", "minimum": 0},
                "timestamp": {
                    "type": "integer",
                    "format": "int64",
                    "description": "epoch milliseconds when the score was achieved",
                },
                "kind": {"type": "string", "enum": ["SCORE", "RETRACT"], "default": "SCORE"},
                "keyId": {"type": "string"},
                "sig": {
                    "type": "string",
                    "pattern": "^[0-9a-fA-F]{64}$",
                    "description": "hex HMAC-SHA256 of "
                    "v1|eventId|gameId|playerId|score|timestamp|kind under keyId's secret",
                },
            },
        },
        "Accepted": {
            "type": "object",
            "required": ["eventId"],
            "properties": {"eventId": {"type": "string"}},
        },
    }
    statuses = {
        400: "malformed request",
        401: "bad signature or unknown keyId",
        404: "unknown route or game, or the player has no score on that board",
        405: "method not allowed on this path",
        413: "request body too large",
        500: "internal error",
        503: "Redis or Kafka unavailable",
    }
    friend = _param("friendId", "path", {"type": "string"}, "the friend's player id")
    paths: dict[str, Any] = {
        "/v1/leaderboards/{gameId}/top": {
            "get": {
                "summary": "One page of a board, best first",
                "parameters": [
                    game,
                    window,
                    _param(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10},
                        "page size",
                    ),
                    _param(
                        "offset",
                        "query",
                        {"type": "integer", "minimum": 0, "default": 0},
                        "entries to skip (not with cursor)",
                    ),
                    _param("cursor", "query", {"type": "string"}, "nextCursor of the last page"),
                ],
                "responses": {"200": _json("TopPage", "a page"), **_errors(400, 404, 500, 503)},
            }
        },
        "/v1/leaderboards/{gameId}/players/{playerId}": {
            "get": {
                "summary": "A player's rank, score and percentile",
                "parameters": [game, player, window],
                "responses": {"200": _json("Rank", "the rank"), **_errors(400, 404, 500, 503)},
            }
        },
        "/v1/leaderboards/{gameId}/players/{playerId}/neighbors": {
            "get": {
                "summary": "The k players right above and below a player",
                "parameters": [
                    game,
                    player,
                    window,
                    _param(
                        "k",
                        "query",
                        {"type": "integer", "minimum": 0, "maximum": MAX_K, "default": 5},
                        "neighbours on each side",
                    ),
                ],
                "responses": {
                    "200": _json("Neighbors", "the neighbourhood"),
                    **_errors(400, 404, 500, 503),
                },
            }
        },
        "/v1/leaderboards/{gameId}/friends": {
            "get": {
                "summary": "A player and their friends ranked among themselves (cached briefly)",
                "parameters": [
                    game,
                    {
                        **_param("playerId", "query", {"type": "string"}, "whose friends"),
                        "required": True,
                    },
                    window,
                ],
                "responses": {
                    "200": _json("FriendsBoard", "the friends board"),
                    **_errors(400, 404, 500, 503),
                },
            }
        },
        "/v1/leaderboards/{gameId}/players/{playerId}/friends": {
            "get": {
                "summary": "The players this player follows",
                "parameters": [game, player],
                "responses": {"200": _json("Friends", "friend ids"), **_errors(400, 404, 503)},
            }
        },
        "/v1/leaderboards/{gameId}/players/{playerId}/friends/{friendId}": {
            "put": {
                "summary": "Follow a player (idempotent)",
                "parameters": [game, player, friend],
                "responses": {"200": _json("FriendChange", "done"), **_errors(400, 404, 503)},
            },
            "delete": {
                "summary": "Unfollow a player (idempotent)",
                "parameters": [game, player, friend],
                "responses": {"200": _json("FriendChange", "done"), **_errors(400, 404, 503)},
            },
        },
        "/v1/scores": {
            "post": {
                "summary": "Submit a signed score event (produced to Kafka, keyed by playerId)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ScoreEvent"}}
                    },
                },
                "responses": {
                    "202": _json("Accepted", "acknowledged by Kafka"),
                    **_errors(400, 401, 413, 500, 503),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.0 document"}},
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness: answers 200 when Redis answers PING",
                "responses": {"200": {"description": "ok"}, **_errors(503)},
            }
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Real-time leaderboard API",
            "version": API_VERSION,
            "description": "Reads of the Redis leaderboards and signed score intake; "
            'see docs/API.md. Every error is {"error": {"code", "message"}}.',
        },
        "servers": [{"url": f"http://{DEFAULT_HOST}:8080"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {f"E{status}": _json("Error", text) for status, text in statuses.items()},
        },
    }
