"""The short way (api/hot.py) and the page cache (api/pages.py) against FastAPI's routes.

Two servers on the same Redis namespace and Kafka topic, one with the hot
routes and one sending every request through FastAPI: the same requests must
get the same status, content type and body bytes, errors included. The page
cache is then checked against the real change stream: a page is served again
while nothing could have changed it, dropped when the stream says the board
changed, and never served past its age bound.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.redis import RedisClient
from api.pages import DEFAULT_TTL_MS
from domain.games import GameCatalog
from domain.profiles import ProfileKeys, bucket_of, stored_bytes
from tests.integration.api_server import api_settings, running_api
from tests.integration.test_http_api import GAMES, KEYS, NOW_MS, SLOTS, _signed
from tests.poll import poll


def _call(
    base: str, method: str, path: str, body: bytes | None = None, ctype: str | None = None
) -> tuple[int, str | None, bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Content-Type": ctype} if ctype else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("content-type"), response.read()
    finally:
        conn.close()


@pytest.fixture
def servers(
    redis_url: str, namespace: str, kafka_bootstrap: str, topic: str
) -> Iterator[tuple[str, str]]:
    """(hot routes and a page cache, FastAPI only) on the same board and topic.

    The cache's age bound is long here, so only the change stream drops pages.
    """
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS)
    catalog = GameCatalog.from_toml(GAMES)
    options: dict[str, Any] = {"catalog": catalog, "clock": lambda: NOW_MS}
    with (
        running_api(settings, page_cache_ms=60_000, **options) as hot,
        running_api(settings, hot_routes=False, page_cache_ms=0, **options) as plain,
    ):
        yield hot, plain


def _seed(client: RedisClient, namespace: str, players: int = 40) -> None:
    board = {f"p{i}": (i * 7) % 50 * SLOTS + (SLOTS - 1 - i) for i in range(players)}
    client.zadd(f"{namespace}:{{g}}:alltime", board)


TOP_QUERIES = [
    "",
    "?limit=10",
    "?window=alltime&limit=7&offset=3",
    "?limit=5&offset=38",  # the last page: no nextCursor
    "?limit=100",
    "?window=daily",  # an empty board of the current day
    "?window=weekly&limit=3",
    "?limit=9&offset=1&rank_mode=competition",
    "?rank_mode=unique&limit=2",
    "?limit=%31%30",  # percent-encoded digits are still a number
    # Refused: the hot routes hand these to FastAPI, which must answer as before.
    "?limit=0",
    "?limit=ten",
    "?limit=",
    "?limit=5&limit=6",
    "?windw=weekly",
    "?window=monthly",
    "?cursor=not-a-cursor",
    "?rank_mode=dense",
    "?offset=-1",
]


def test_top_answers_are_the_same_bytes_both_ways(
    servers: tuple[str, str], redis_client: RedisClient, namespace: str
) -> None:
    hot, plain = servers
    _seed(redis_client, namespace)
    paths = [f"/v1/leaderboards/g/top{q}" for q in TOP_QUERIES]
    paths += ["/v1/leaderboards/unknown.game/top", "/v1/leaderboards/a%2Fb/top"]
    paths += ["/v1/leaderboards/%FF/top", "/v1/leaderboards/sh/top?limit=3"]
    for path in paths:
        for _ in range(2):  # the second time from the page cache where it applies
            assert _call(hot, "GET", path) == _call(plain, "GET", path), path
    # A cursor page (never cached) too.
    cursor = json.loads(_call(plain, "GET", "/v1/leaderboards/g/top?limit=7")[2])["nextCursor"]
    path = f"/v1/leaderboards/g/top?limit=7&cursor={cursor}"
    assert _call(hot, "GET", path) == _call(plain, "GET", path)
    assert _call(hot, "DELETE", "/v1/leaderboards/g/top") == _call(
        plain, "DELETE", "/v1/leaderboards/g/top"
    )


def _top_requests_counted(base: str) -> float:
    status, _, body = _call(base, "GET", "/metrics")
    assert status == 200
    line = 'lb_http_requests_total{method="GET",route="/v1/leaderboards/{gameId}/top",status="200"}'
    found = [row for row in body.decode().splitlines() if row.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


def test_the_short_way_is_counted_under_the_route_template(
    servers: tuple[str, str], redis_client: RedisClient, namespace: str
) -> None:
    hot, _ = servers
    _seed(redis_client, namespace)
    before = _top_requests_counted(hot)
    for query in ("?limit=3", "?limit=4", "?limit=3"):  # the third from the page cache
        assert _call(hot, "GET", f"/v1/leaderboards/g/top{query}")[0] == 200
    assert _top_requests_counted(hot) == before + 3


def test_score_answers_are_the_same_both_ways(servers: tuple[str, str]) -> None:
    hot, plain = servers
    one = _signed(event_id=f"e-{uuid.uuid4().hex}")
    batch = [_signed(event_id=f"b-{uuid.uuid4().hex}", playerId=f"p{i}") for i in range(3)]
    anonymous = _signed("k2", playerId="bob", score=7)
    bodies: list[tuple[bytes, str | None]] = [
        (json.dumps(doc).encode(), "application/json")
        for doc in [
            one,
            batch,
            anonymous,
            one | {"score": 421},  # signature mismatch
            one | {"keyId": "k9"},
            _signed(event_id="x", score=1001),
            _signed(event_id="x", gameId="unknown"),
            one | {"extra": 1},
            [*batch[:1], batch[1] | {"extra": 1}],
            [],
            [1, 2],
        ]
    ]
    bodies += [
        (b"{not json", "application/json"),
        (json.dumps(one).encode(), "application/json; charset=utf-8"),
        (json.dumps(one).encode(), "text/plain"),
        (json.dumps(one).encode(), None),
    ]
    for body, ctype in bodies:
        assert _call(hot, "POST", "/v1/scores", body, ctype) == _call(
            plain, "POST", "/v1/scores", body, ctype
        ), body
    # A query string is refused the same way.
    body = json.dumps(one).encode()
    assert _call(hot, "POST", "/v1/scores?x=1", body, "application/json") == _call(
        plain, "POST", "/v1/scores?x=1", body, "application/json"
    )


def _changed(client: RedisClient, namespace: str, player: str, old: int | None, new: int) -> None:
    """Write a board change the way the job does: the member and its stream entry at once."""
    change = [{"w": "alltime", "p": player, "o": "" if old is None else str(old), "n": str(new)}]
    pipe = client.pipeline(transaction=True)
    pipe.zadd(f"{namespace}:{{g}}:alltime", {player: new * SLOTS + SLOTS - 1})
    pipe.xadd(f"{namespace}:{{g}}:changes", {"c": json.dumps(change)})
    pipe.execute()


def _top(base: str, query: str = "?limit=5") -> list[tuple[str, int]]:
    status, _, body = _call(base, "GET", f"/v1/leaderboards/g/top{query}")
    assert status == 200, body
    return [(e["playerId"], e["score"]) for e in json.loads(body)["entries"]]


def test_the_change_stream_drops_a_cached_page_that_a_change_could_alter(
    servers: tuple[str, str], redis_client: RedisClient, namespace: str
) -> None:
    hot, _ = servers
    _seed(redis_client, namespace)
    last_page = "?limit=5&offset=38"  # nothing follows it: any change may alter it
    _top(hot)  # the first read of the game: the server follows its change stream from now on
    first, last = _top(hot), _top(hot, last_page)  # read while following: both are kept
    key = f"{namespace}:{{g}}:alltime"

    # Written without a stream entry (as a restore would): the cached pages stay.
    redis_client.zadd(key, {"quiet": 60 * SLOTS})
    assert (_top(hot), _top(hot, last_page)) == (first, last)

    # A change far below the first page's last score cannot alter it: still served,
    # once the server has seen the change (it drops the last page, which shows it).
    _changed(redis_client, namespace, "low", None, 1)
    poll("the stream drops the last page", lambda: _top(hot, last_page) != last)
    assert _top(hot) == first

    # A change reaching the page drops it: the next read shows the board as it is
    # (with the quiet write too, which the page cache had hidden).
    _changed(redis_client, namespace, "climber", None, 55)
    poll("the stream drops the page", lambda: _top(hot) != first)
    assert _top(hot)[:2] == [("quiet", 60), ("climber", 55)]

    # A player on the page who moves drops it too.
    before = _top(hot)
    _changed(redis_client, namespace, "climber", 55, 56)
    poll("a move on the page drops it", lambda: _top(hot) != before)
    assert _top(hot)[1] == ("climber", 56)


def test_a_cached_page_is_never_older_than_its_bound(
    redis_url: str, namespace: str, kafka_bootstrap: str, topic: str, redis_client: RedisClient
) -> None:
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS)
    catalog = GameCatalog.from_toml(GAMES)
    ttl_ms = 300
    assert ttl_ms < DEFAULT_TTL_MS
    with running_api(settings, catalog=catalog, clock=lambda: NOW_MS, page_cache_ms=ttl_ms) as hot:
        _seed(redis_client, namespace)
        _top(hot)  # the server follows the game's change stream from now on
        first = _top(hot)
        redis_client.zadd(f"{namespace}:{{g}}:alltime", {"quiet": 60 * SLOTS})
        time.sleep(ttl_ms / 1000)  # past the bound (no stream entry tells the cache here)
        assert _top(hot) != first
        assert _top(hot)[0] == ("quiet", 60)


def test_no_acknowledgement_is_a_503_both_ways(redis_url: str, namespace: str) -> None:
    """Kafka unreachable: the record times out in the client and the answer says so."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{closed.getsockname()[1]}"
    settings = api_settings(
        nobody, redis_url, "nowhere", namespace, KEYS, kafka_extra={"message.timeout.ms": "1500"}
    )
    catalog = GameCatalog.from_toml(GAMES)
    body = json.dumps(_signed(event_id=f"e-{uuid.uuid4().hex}")).encode()
    for hot_routes in (True, False):
        with running_api(settings, catalog=catalog, hot_routes=hot_routes) as base:
            status, _, answer = _call(base, "POST", "/v1/scores", body, "application/json")
        assert status == 503, answer
        assert json.loads(answer)["error"]["code"] == "UNAVAILABLE"


def _seed_profiles(client: RedisClient, namespace: str, players: int = 40) -> None:
    """Profiles for every other player (the rest answer with ``profile: null``)."""
    for i in range(0, players, 2):
        player = f"p{i}"
        doc = stored_bytes(
            {
                "displayName": f"Player é{i}",
                "avatarUrl": None if i % 4 else f"https://cdn.example/{i}.png",
                "country": "FR" if i % 3 else None,
                "updatedAt": 1_700_000_000_000 + i,
            }
        )
        client.hset(ProfileKeys(namespace, bucket_of(player)).profiles, player, doc)


def test_hydrated_top_pages_are_the_same_bytes_both_ways_with_and_without_the_cache(
    servers: tuple[str, str],
    redis_url: str,
    namespace: str,
    kafka_bootstrap: str,
    topic: str,
    redis_client: RedisClient,
) -> None:
    hot, plain = servers
    _seed(redis_client, namespace)
    _seed_profiles(redis_client, namespace)
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS)
    options: dict[str, Any] = {"catalog": GameCatalog.from_toml(GAMES), "clock": lambda: NOW_MS}
    queries = ["?profile=true", "?limit=100&profile=true", "?limit=7&offset=3&profile=true"]
    queries += ["?limit=9&rank_mode=competition&profile=true", "?limit=5&profile=false"]
    with running_api(settings, page_cache_ms=0, **options) as uncached:
        for query in queries:
            path = f"/v1/leaderboards/g/top{query}"
            expected = _call(plain, "GET", path)
            assert expected[0] == 200, path
            entries = json.loads(expected[2])["entries"]
            assert all(("profile" in e) == ("profile=true" in query) for e in entries), path
            for _ in range(2):  # the second time from the page cache where it applies
                assert _call(hot, "GET", path) == expected, path
                assert _call(uncached, "GET", path) == expected, path
        named = json.loads(
            _call(uncached, "GET", "/v1/leaderboards/g/top?limit=40&profile=true")[2]
        )
        for entry in named["entries"]:
            number = int(entry["playerId"][1:])
            name = (entry["profile"] or {}).get("displayName")
            assert name == (None if number % 2 else f"Player é{number}"), entry
