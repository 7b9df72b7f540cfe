"""Route classes and the decision for one request (api/auth/policy.py), table-driven."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from api.auth.policy import Caller, CallerKind, Route, RouteClass, classify, decide

OPEN, READS = RouteClass.OPEN, RouteClass.READS
PUSHES, WRITES = RouteClass.PUSHES, RouteClass.WRITES
ERASE = Route(WRITES, servers_only=True, always=True)


@pytest.mark.parametrize(
    ("method", "path", "websocket", "expected"),
    [
        ("GET", "/", False, Route(OPEN)),
        ("GET", "/static/live.js", False, Route(OPEN)),
        ("GET", "/metrics", False, Route(OPEN)),
        ("GET", "/healthz", False, Route(OPEN)),
        ("GET", "/openapi.json", False, Route(OPEN)),
        ("GET", "/v1/leaderboards/g1/top", False, Route(READS)),
        ("HEAD", "/v1/leaderboards/g1/players/p1", False, Route(READS)),
        ("GET", "/v1/leaderboards/g1/players/p1/friends", False, Route(READS)),
        ("GET", "/v1/leaderboards/g1/events", False, Route(PUSHES)),
        ("GET", "/v1/leaderboards/g1/live", True, Route(PUSHES)),
        ("GET", "/v1/leaderboards/g1/top", True, Route(OPEN)),  # no such socket: a 404 later
        ("PUT", "/v1/leaderboards/g1/players/p1/friends/p2", False, Route(WRITES, player="p1")),
        ("DELETE", "/v1/leaderboards/g1/players/a%2Fb/friends/p2", False, Route(WRITES, "a/b")),
        ("PUT", "/v1/leaderboards/g1/players/%FF/friends/p2", False, Route(WRITES, "\x00")),
        ("POST", "/v1/scores", False, Route(WRITES, servers_only=True)),
        ("POST", "/v1/leaderboards/g1/players/p1/friends/p2", False, Route(WRITES, None, True)),
        ("PATCH", "/v1/anything", False, Route(WRITES, servers_only=True)),
        ("DELETE", "/v1/players/p1", False, ERASE),
        ("DELETE", "/v1/players/p1/x", False, Route(WRITES, servers_only=True)),
    ],
)
def test_classify(method: str, path: str, websocket: bool, expected: Route) -> None:
    assert classify(method, path, websocket=websocket) == expected


ANON = Caller(CallerKind.ANONYMOUS, "127.0.0.1")
P1 = Caller(CallerKind.PLAYER, "p1")
P2 = Caller(CallerKind.PLAYER, "p2")
SERVER = Caller(CallerKind.SERVER, "game-backend")
FRIENDS_P1 = Route(WRITES, player="p1")
SCORES = Route(WRITES, servers_only=True)


@pytest.mark.parametrize(
    ("route", "caller", "reads", "writes", "expected"),
    [
        (Route(OPEN), ANON, True, True, None),
        (Route(READS), ANON, False, True, None),
        (Route(READS), ANON, True, True, HTTPStatus.UNAUTHORIZED),
        (Route(PUSHES), ANON, True, False, HTTPStatus.UNAUTHORIZED),
        (Route(PUSHES), P2, True, False, None),
        (Route(READS), SERVER, True, False, None),
        (FRIENDS_P1, ANON, False, False, None),
        (FRIENDS_P1, P2, False, False, None),
        (FRIENDS_P1, ANON, False, True, HTTPStatus.UNAUTHORIZED),
        (FRIENDS_P1, P2, False, True, HTTPStatus.FORBIDDEN),
        (FRIENDS_P1, P1, False, True, None),
        (FRIENDS_P1, SERVER, False, True, None),
        (Route(WRITES, player="\x00"), Caller(CallerKind.PLAYER, "\x00x"), False, True, 403),
        (SCORES, P1, False, True, HTTPStatus.FORBIDDEN),
        (SCORES, SERVER, False, True, None),
        (SCORES, ANON, False, True, HTTPStatus.UNAUTHORIZED),
        # Erasure needs a server key even while writes are public.
        (ERASE, ANON, False, False, HTTPStatus.UNAUTHORIZED),
        (ERASE, P1, False, False, HTTPStatus.FORBIDDEN),
        (ERASE, P1, False, True, HTTPStatus.FORBIDDEN),
        (ERASE, SERVER, False, False, None),
    ],
)
def test_decide(
    route: Route, caller: Caller, reads: bool, writes: bool, expected: int | None
) -> None:
    refusal = decide(route, caller, reads_authenticated=reads, writes_authenticated=writes)
    assert (refusal.status if refusal else None) == expected


def test_each_kind_of_caller_is_counted_apart() -> None:
    keys = {c.limit_key for c in (ANON, P1, SERVER, Caller(CallerKind.SERVER, "p1"))}
    assert len(keys) == 4
