"""Who may call which route: route classes, callers, and the decision for one request.

Pure functions of the request line and the caller (no I/O, no framework), so
every rule has a table-driven test (tests/unit/test_auth_policy.py).

==========  ======================================================  ==================
class       routes                                                  who, when required
==========  ======================================================  ==================
``open``    ``/``, ``/static/*``, ``/docs``, ``/openapi.json``,     anyone, always
            ``/metrics``, ``/livez``, ``/readyz``, ``/healthz``
``reads``   every other ``GET`` under ``/v1/``                      any caller
``pushes``  ``/v1/leaderboards/{game}/live`` (WebSocket),           any caller
            ``/v1/leaderboards/{game}/events`` (SSE)
``writes``  ``PUT``/``DELETE .../players/{player}/friends/...``     that player's token,
                                                                    or a server key
``writes``  ``POST /v1/scores`` and any other non-``GET`` under     a server key
            ``/v1/``
``writes``  ``DELETE /v1/players/{player}`` (erasure)               a server key, always
==========  ======================================================  ==================

Reads and pushes require a caller only with ``LB_API_READS=authenticated``;
writes only while writes are authenticated (``LB_API_WRITES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from http import HTTPStatus
from urllib.parse import unquote


class RouteClass(StrEnum):
    """A route's class: what it needs and which rate limit it counts against."""

    OPEN = "open"
    READS = "reads"
    PUSHES = "pushes"
    WRITES = "writes"


class CallerKind(StrEnum):
    """What kind of caller sent a request."""

    PLAYER = "player"
    SERVER = "server"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Route:
    """What the guard needs to know of a request's route."""

    kind: RouteClass
    #: The player a player-scoped write names (percent-decoded), else None.
    player: str | None = None
    #: Only a server API key may call it (when writes are authenticated).
    servers_only: bool = False
    #: A server key is required even while writes are public (erasure).
    always: bool = False


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a player (token subject), a server (key name) or an address."""

    kind: CallerKind
    name: str

    @property
    def limit_key(self) -> str:
        """The identity rate limits count against."""
        return f"{self.kind.value[0]}:{self.name}"


@dataclass(frozen=True)
class Refusal:
    """A request the guard answers itself, with the API's error document."""

    status: HTTPStatus
    code: str
    message: str


_PUSH = re.compile(r"^/v1/leaderboards/[^/]+/(live|events)$")
_FRIEND = re.compile(r"^/v1/leaderboards/[^/]+/players/([^/]+)/friends/[^/]+$")
_ERASE = re.compile(r"^/v1/players/[^/]+$")
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_OPEN = Route(RouteClass.OPEN)
_READS = Route(RouteClass.READS)
#: A player id that no token subject can equal (a path segment that is not UTF-8).
_UNDECODABLE = "\x00"


def _decoded(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        return _UNDECODABLE


def classify(method: str, raw_path: str, *, websocket: bool = False) -> Route:
    """The class of a request, from its method and still percent-encoded path."""
    if not raw_path.startswith("/v1/"):
        return _OPEN
    if method == "GET" and not websocket and not raw_path.endswith("/events"):
        return _READS  # the hot case, without a regular expression
    push = _PUSH.match(raw_path)
    if websocket:
        return Route(RouteClass.PUSHES if push and push.group(1) == "live" else RouteClass.OPEN)
    if method in _SAFE:
        if push and push.group(1) == "events":
            return Route(RouteClass.PUSHES)
        return Route(RouteClass.READS)
    friend = _FRIEND.match(raw_path)
    if friend and method in ("PUT", "DELETE"):
        return Route(RouteClass.WRITES, player=_decoded(friend.group(1)))
    if method == "DELETE" and _ERASE.match(raw_path):
        return Route(RouteClass.WRITES, servers_only=True, always=True)
    return Route(RouteClass.WRITES, servers_only=True)


def decide(
    route: Route, caller: Caller, *, reads_authenticated: bool, writes_authenticated: bool
) -> Refusal | None:
    """None when ``caller`` may make the request; else the refusal to answer."""
    if route.kind is RouteClass.OPEN:
        return None
    anonymous = caller.kind is CallerKind.ANONYMOUS
    if route.kind in (RouteClass.READS, RouteClass.PUSHES):
        if reads_authenticated and anonymous:
            return Refusal(
                HTTPStatus.UNAUTHORIZED,
                "UNAUTHENTICATED",
                "reading requires a player token or an API key (Authorization: Bearer ...)",
            )
        return None
    if not writes_authenticated and not route.always:
        return None
    if anonymous:
        return Refusal(
            HTTPStatus.UNAUTHORIZED,
            "UNAUTHENTICATED",
            "this write requires a player token or an API key (Authorization: Bearer ...)",
        )
    if caller.kind is CallerKind.SERVER:
        return None
    if route.servers_only:
        return Refusal(HTTPStatus.FORBIDDEN, "FORBIDDEN", "only a server API key may do this")
    if route.player != caller.name:
        return Refusal(
            HTTPStatus.FORBIDDEN,
            "FORBIDDEN",
            "a player token may change only its own player (its sub names another)",
        )
    return None
