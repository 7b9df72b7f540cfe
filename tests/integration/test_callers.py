"""Callers of the real API with real tokens and keys: who may read, write and subscribe.

The API runs under uvicorn on loopback against the shared Redis (each test its
own namespace); tokens are signed with keys made in the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from api.auth.keyfile import key_line, new_key
from api.auth.policy import RouteClass
from api.limits import RateLimits, rates, redis_storage
from config.settings import Secret
from tests.integration.api_server import api_settings, running_api
from tests.integration.streams import GAMES_TOML, KEYS
from tests.jwt_keys import AUDIENCE, ISSUER, SECRET, ec_key, hs256, jwk, signed, write_jwks
from tests.poll import poll

Answer = tuple[int, dict[str, str], Any]


def call(
    url: str, method: str = "GET", token: str | None = None, headers: dict[str, str] | None = None
) -> Answer:
    """``(status, headers, JSON body)`` of one request (a new connection each time)."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
            json_body = answer.headers.get("content-type", "").startswith("application/json")
            return answer.status, dict(answer.headers), json.loads(body) if json_body else body
    except urllib.error.HTTPError as error:
        body = error.read()
        json_body = error.headers.get("content-type", "").startswith("application/json")
        return error.code, dict(error.headers), json.loads(body) if json_body else body


@pytest.fixture
def keys_file(tmp_path: Path) -> tuple[Path, str, str]:
    """A key file with two live server keys; yields (path, first key, second key)."""
    first, second = new_key(), new_key()
    path = tmp_path / "api-keys"
    path.write_text(f"{key_line('backend-a', first)}\n{key_line('backend-b', second)}\n")
    return path, first, second


@pytest.fixture
def secured(
    kafka_bootstrap: str,
    redis_url: str,
    topic: str,
    namespace: str,
    tmp_path: Path,
    keys_file: tuple[Path, str, str],
) -> Iterator[str]:
    """The API with HS256 player tokens and the key file (writes authenticated, reads public)."""
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    settings = api_settings(
        kafka_bootstrap,
        redis_url,
        topic,
        namespace,
        KEYS,
        games_file=games,
        jwt_secret=Secret(SECRET),
        jwt_audience=AUDIENCE,
        jwt_issuer=ISSUER,
        api_keys_file=keys_file[0],
    )
    with running_api(settings) as url:
        yield url


def friend(url: str, player: str, other: str = "zed") -> str:
    return f"{url}/v1/leaderboards/gbest/players/{player}/friends/{other}"


def test_a_players_write_needs_that_players_valid_token(secured: str) -> None:
    status, headers, body = call(friend(secured, "ada"), "PUT")
    assert (status, body["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert headers["www-authenticate"] == "Bearer"

    bad = {
        "expired": hs256("ada", exp=int(time.time()) - 600),
        "forged": hs256("ada", secret="another-secret-of-the-same-length-00000"),
        "wrong audience": hs256("ada", aud="some-other-api"),
        "wrong issuer": hs256("ada", iss="https://evil.example"),
        "not yet valid": hs256("ada", nbf=int(time.time()) + 3600),
    }
    for what, token in bad.items():
        status, headers, body = call(friend(secured, "ada"), "PUT", token)
        assert (status, body["error"]["code"]) == (401, "UNAUTHENTICATED"), what
        assert headers["www-authenticate"] == 'Bearer error="invalid_token"', what

    status, _, body = call(friend(secured, "ada"), "PUT", hs256("bob"))
    assert (status, body["error"]["code"]) == (403, "FORBIDDEN")
    status, _, body = call(friend(secured, "ada"), "DELETE", hs256("bob"))
    assert status == 403

    assert call(friend(secured, "ada"), "PUT", hs256("ada"))[2]["added"] is True
    assert call(friend(secured, "ada"), "DELETE", hs256("ada"))[2]["removed"] is True
    # Reads stay public; a bad token is still refused there (the client learns it is bad).
    assert call(f"{secured}/v1/leaderboards/gbest/players/ada/friends")[0] == 200
    assert call(f"{secured}/v1/leaderboards/gbest/top", token=bad["forged"])[0] == 401


def test_server_keys_act_for_any_player_and_a_revoked_key_stops_working(
    secured: str, keys_file: tuple[Path, str, str]
) -> None:
    path, first, second = keys_file
    assert call(friend(secured, "ada"), "PUT", first)[2]["added"] is True
    assert call(friend(secured, "bob"), "PUT", second)[2]["added"] is True
    status, _, body = call(f"{secured}/v1/scores", "POST", hs256("ada"))
    assert (status, body["error"]["code"]) == (403, "FORBIDDEN")  # players do not submit
    assert call(f"{secured}/v1/scores", "POST")[0] == 401

    # Revoke the first key: edit the file; no restart.
    path.write_text(key_line("backend-b", second) + "\n")
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    poll(
        "the revoked key is refused",
        lambda: call(friend(secured, "ada"), "PUT", first)[0] == 401,
        10,
    )
    status, _, body = call(friend(secured, "ada"), "PUT", first)
    assert body["error"]["message"] == "unknown or revoked API key"
    assert call(friend(secured, "ada"), "PUT", second)[0] == 200
    assert call(friend(secured, "ada"), "PUT", "lbk_" + "x" * 43)[0] == 401


def test_authenticated_reads_and_pushes_take_the_token_as_a_header_or_a_parameter(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, tmp_path: Path
) -> None:
    signer = ec_key()
    jwks = write_jwks(tmp_path / "jwks.json", jwk(signer, "2026-05"))
    settings = api_settings(
        kafka_bootstrap,
        redis_url,
        topic,
        namespace,
        KEYS,
        jwt_keys_file=jwks,
        jwt_audience=AUDIENCE,
        jwt_issuer=ISSUER,
        api_reads="authenticated",
    )
    token = signed(signer, "ada", "2026-05")
    with running_api(settings) as url:
        top = f"{url}/v1/leaderboards/g1/top"
        status, _, body = call(top)
        assert (status, body["error"]["code"]) == (401, "UNAUTHENTICATED")
        assert call(top, token=token)[0] == 200
        assert call(f"{top}?limit=3&token={token}")[0] == 200  # the parameter, not a bad query
        assert call(f"{url}/livez")[0] == 200  # open routes stay open
        assert call(f"{url}/")[0] == 200

        ws = url.replace("http://", "ws://") + "/v1/leaderboards/g1/live"
        with pytest.raises(InvalidStatus) as refused:
            connect(f"{ws}?top=3", open_timeout=10)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "UNAUTHENTICATED"
        wrong = signed(ec_key(), "ada", "2026-05")
        with pytest.raises(InvalidStatus) as refused:
            connect(f"{ws}?top=3&token={wrong}", open_timeout=10)
        assert refused.value.response.status_code == 401
        with connect(f"{ws}?top=3&token={token}", open_timeout=10) as socket:
            assert json.loads(socket.recv(timeout=10))["type"] == "top"

        events = f"{url}/v1/leaderboards/g1/events?top=3"
        assert call(events)[0] == 401
        request = urllib.request.Request(f"{events}&token={token}")
        with urllib.request.urlopen(request, timeout=10) as stream:
            assert stream.status == 200
            assert stream.readline().startswith(b"event: top")


def test_exact_429s_per_caller_with_the_ratelimit_headers(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, redis_client: Any
) -> None:
    settings = api_settings(
        kafka_bootstrap,
        redis_url,
        topic,
        namespace,
        KEYS,
        jwt_secret=Secret(SECRET),
        jwt_audience=AUDIENCE,
        jwt_issuer=ISSUER,
        rate_reads="4/minute",
        rate_writes="2/minute",
    )
    wait_for_a_fresh_window(60, 15)
    with running_api(settings) as url:
        top = f"{url}/v1/leaderboards/g1/top"
        answers = [call(top) for _ in range(6)]
        assert [a[0] for a in answers] == [200, 200, 200, 200, 429, 429]
        assert [a[1]["ratelimit-remaining"] for a in answers] == ["3", "2", "1", "0", "0", "0"]
        assert {a[1]["ratelimit-limit"] for a in answers} == {"4"}
        refused = answers[-1]
        assert refused[2]["error"]["code"] == "RATE_LIMITED"
        assert 1 <= int(refused[1]["retry-after"]) <= 60
        assert refused[1]["retry-after"] == refused[1]["ratelimit-reset"]
        # Another caller (a player) has a budget of its own; writes count apart.
        assert [call(top, token=hs256("ada"))[0] for _ in range(5)] == [200] * 4 + [429]
        puts = [call(friend(url, "ada"), "PUT", hs256("ada"))[0] for _ in range(3)]
        assert puts == [200, 200, 429]
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
        assert 'lb_http_refusals_total{reason="rate_limited",route_class="reads"}' in metrics
        assert redis_client.keys(f"{namespace}:limits*")  # counted in Redis, in the namespace


def wait_for_a_fresh_window(period_s: int, needed_s: float) -> None:
    """Sleep into the next window when fewer than ``needed_s`` are left in this one."""
    left = period_s - time.time() % period_s
    if left < needed_s:
        time.sleep(left + 0.05)


def test_cors_allows_the_listed_origins_and_websockets_from_other_pages_are_refused(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str
) -> None:
    settings = api_settings(
        kafka_bootstrap,
        redis_url,
        topic,
        namespace,
        KEYS,
        cors_origins=("https://game.example",),
        rate_reads="1000/minute",
    )
    with running_api(settings) as url:
        top = f"{url}/v1/leaderboards/g1/top"
        preflight = {
            "Origin": "https://game.example",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        }
        status, headers, _ = call(top, "OPTIONS", headers=preflight)
        assert status == 200
        assert headers["access-control-allow-origin"] == "https://game.example"
        status, headers, _ = call(top, "OPTIONS", headers={**preflight, "Origin": "https://x.test"})
        assert status == 400 and "access-control-allow-origin" not in headers
        status, headers, _ = call(top, headers={"Origin": "https://game.example"})
        assert headers["access-control-allow-origin"] == "https://game.example"
        assert "RateLimit-Remaining" in headers["access-control-expose-headers"]

        ws = url.replace("http://", "ws://") + "/v1/leaderboards/g1/live?top=1"
        with pytest.raises(InvalidStatus) as refused:
            connect(ws, origin=Origin("https://x.test"), open_timeout=10)
        assert refused.value.response.status_code == 403
        with connect(ws, origin=Origin(url), open_timeout=10) as socket:
            assert json.loads(socket.recv(timeout=10))["type"] == "top"  # its own page
        with connect(ws, origin=Origin("https://game.example"), open_timeout=10) as socket:
            assert json.loads(socket.recv(timeout=10))["type"] == "top"


def test_limits_count_on_a_redis_cluster(
    cluster_services: list[str], cluster_client: Any, namespace: str
) -> None:
    settings = api_settings(
        "127.0.0.1:1",
        cluster_services[0],
        "unused",
        namespace,
        KEYS,
        redis_cluster=True,
        rate_writes="3/hour",
    )
    wait_for_a_fresh_window(3600, 30)

    async def five() -> list[bool]:
        limits = RateLimits(redis_storage(settings, None), rates(settings))
        verdicts = [await limits.hit(RouteClass.WRITES, "k:backend") for _ in range(5)]
        return [v.allowed for v in verdicts if v is not None]

    assert asyncio.run(five()) == [True, True, True, False, False]
    assert asyncio.run(five()) == [False] * 5  # a new process sees the same count
    assert any(cluster_client.scan_iter(match=f"{namespace}:limits*"))
