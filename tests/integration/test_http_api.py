"""The HTTP API (FastAPI under uvicorn) over a real socket, real Redis, a real Kafka topic.

The server runs in a thread on a free loopback port; requests go through
``urllib``. These tests pin the public contract of docs/API.md: URLs, JSON
shapes and error codes. Reads must give exactly the Python API's answers; a
signed score must come out of the test's own topic as a record the job would
accept, and only once Kafka acknowledged it.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

from adapters.kafka import read_topic
from adapters.redis import RedisClient
from domain.events import EventKind
from domain.games import GameCatalog
from domain.keys import shard_of
from domain.profiles import ProfileKeys, bucket_of, stored_bytes
from domain.signing import Verdict, canonical, parse_keyring, sign, verify
from readers.boards import BoardReader
from readers.profiles import ProfileReader
from schemas.codec import ScoreEventCodec
from tests.integration.api_server import api_settings, running_api

KEYS = "k1:" + "11" * 32 + ",k2:" + "22" * 32
KEYRING = parse_keyring(KEYS)
GAMES = (
    '[games."g"]\nmax_score = 1000\n[games."sh"]\nshards = 2\n'
    '[games."g".tournaments]\ncup = { start = 2026-05-06, end = 2026-05-07, max_attempts = 3 }\n'
)
NOW_MS = int(datetime(2026, 5, 6, 12, 0, tzinfo=UTC).timestamp() * 1000)
SLOTS = 631_152_000  # seconds from 2020-01-01 to 2040-01-01: the all-time board's slots


class Client:
    """Tiny JSON client: returns (status, headers, parsed body)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, Any]:
        request = urllib.request.Request(
            self.base + path, data=body, method=method, headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, exc.headers, json.loads(raw) if raw else None

    def get(self, path: str) -> tuple[int, Any, Any]:
        return self.call("GET", path)

    def post_json(self, path: str, doc: Any) -> tuple[int, Any, Any]:
        body = json.dumps(doc).encode()
        return self.call("POST", path, body, {"Content-Type": "application/json"})


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


@pytest.fixture
def server(
    redis_url: str, namespace: str, catalog: GameCatalog, kafka_bootstrap: str, topic: str
) -> Iterator[str]:
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS)
    with running_api(settings, catalog=catalog, clock=lambda: NOW_MS, max_body=16 * 1024) as url:
        yield url


@pytest.fixture
def http(server: str) -> Client:
    return Client(server)


def _seed(client: RedisClient, namespace: str) -> None:
    board = {f"p{i}": (i * 7) % 50 * SLOTS + (SLOTS - 1 - i) for i in range(40)}
    client.zadd(f"{namespace}:{{g}}:alltime", board)


def test_binds_loopback_by_default(server: str) -> None:
    assert server.startswith("http://127.0.0.1:")


def test_reads_give_the_python_api_answers(
    http: Client, redis_client: RedisClient, namespace: str, catalog: GameCatalog
) -> None:
    _seed(redis_client, namespace)
    reader = BoardReader(redis_client, catalog, namespace)
    # Some players have a profile; pages carry them (null for the others) unless profile=false.
    for player in ("p4", "p8", "s7"):
        redis_client.hset(
            ProfileKeys(namespace, bucket_of(player)).profiles,
            player,
            stored_bytes(
                {"displayName": player.upper(), "avatarUrl": None, "country": None, "updatedAt": 1}
            ),
        )
    hydrated = ProfileReader(redis_client, namespace).hydrate
    status, _, bare = http.get("/v1/leaderboards/g/top?limit=7&offset=3&profile=false")
    assert bare == reader.top("g", "alltime", 7, 3, now_ms=NOW_MS)

    status, _, page = http.get("/v1/leaderboards/g/top?window=alltime&limit=7&offset=3")
    assert status == 200
    assert page == hydrated(reader.top("g", "alltime", 7, 3, now_ms=NOW_MS))
    assert [e["rank"] for e in page["entries"]] == list(range(4, 11))

    status, _, nxt = http.get(f"/v1/leaderboards/g/top?limit=7&cursor={page['nextCursor']}")
    assert status == 200
    assert nxt == hydrated(reader.top("g", "alltime", 7, cursor=page["nextCursor"], now_ms=NOW_MS))
    assert nxt["entries"][0]["rank"] == 11

    status, _, rank = http.get("/v1/leaderboards/g/players/p8?window=alltime")
    assert status == 200
    assert rank == reader.rank("g", "p8", "alltime", now_ms=NOW_MS)
    assert set(rank) == {"window", "playerId", "rank", "score", "percentile"}

    status, _, around = http.get("/v1/leaderboards/g/players/p8/neighbors?k=2")
    assert status == 200
    assert around == hydrated(reader.around("g", "p8", "alltime", 2, now_ms=NOW_MS))
    assert len(around["above"]) == 2 and len(around["below"]) == 2
    assert around["player"]["profile"]["displayName"] == "P8"

    # A sharded game (its own path in the async reader) answers like the Python API too.
    for i in range(30):
        player = f"s{i}"
        shard = shard_of(player, 2)
        redis_client.zadd(f"{namespace}:{{sh/{shard}}}:alltime", {player: (i % 9) * SLOTS + i})
    for path, expected in [
        (
            "/v1/leaderboards/sh/top?limit=5&offset=2",
            hydrated(reader.top("sh", "alltime", 5, 2, now_ms=NOW_MS)),
        ),
        ("/v1/leaderboards/sh/players/s7", reader.rank("sh", "s7", "alltime", now_ms=NOW_MS)),
        (
            "/v1/leaderboards/sh/players/s7/neighbors?k=3",
            hydrated(reader.around("sh", "s7", "alltime", 3, now_ms=NOW_MS)),
        ),
    ]:
        assert http.get(path)[2] == expected, path

    # rank_mode=competition: equal scores share a rank, like the Python API's ranks=.
    for path, expected in [
        (
            "/v1/leaderboards/g/top?limit=9&offset=1&rank_mode=competition",
            hydrated(reader.top("g", "alltime", 9, 1, now_ms=NOW_MS, ranks="competition")),
        ),
        (
            "/v1/leaderboards/g/players/p8?rank_mode=competition",
            reader.rank("g", "p8", "alltime", now_ms=NOW_MS, ranks="competition"),
        ),
        (
            "/v1/leaderboards/sh/players/s7/neighbors?k=3&rank_mode=competition",
            hydrated(reader.around("sh", "s7", "alltime", 3, now_ms=NOW_MS, ranks="competition")),
        ),
    ]:
        assert http.get(path)[2] == expected, path
    shared = http.get("/v1/leaderboards/sh/top?limit=10&rank_mode=competition")[2]["entries"]
    assert [e["rank"] for e in shared] == [1, 1, 1, 4, 4, 4, 7, 7, 7, 10]  # scores 8,8,8,7,7,7,..
    assert http.get("/v1/leaderboards/g/top?rank_mode=dense")[0] == 400

    # "daily" is resolved with the server's clock (fixed here): empty board, no error.
    status, _, daily = http.get("/v1/leaderboards/g/top?window=daily")
    assert (status, daily["window"], daily["entries"]) == (200, "daily:2026-05-06", [])


def test_a_players_tournaments(
    http: Client, redis_client: RedisClient, namespace: str, catalog: GameCatalog
) -> None:
    config = catalog.lookup("g")
    assert config is not None
    codec = config.codec(config.window("tournament:cup"))
    start = config.tournament("cup").start_ms
    # What the job leaves: the board and each entrant's attempts (p3 left by a RETRACT).
    redis_client.zadd(
        f"{namespace}:{{g}}:tournament:cup",
        {f"p{i}": codec.encode(10 * i, start + i * 1000) for i in range(3)},
    )
    redis_client.hset(f"{namespace}:{{g}}:meta:attempts:cup", mapping={"p1": 2, "p3": 1})
    reader = BoardReader(redis_client, catalog, namespace)

    status, _, doc = http.get("/v1/leaderboards/g/players/p1/tournaments")
    assert status == 200
    assert doc == reader.player_tournaments("g", "p1", now_ms=NOW_MS)
    (cup,) = doc["tournaments"]
    assert (cup["window"], cup["status"], cup["rank"], cup["score"]) == (
        "tournament:cup",
        "running",
        2,
        10,
    )
    assert (cup["attempts"], cup["maxAttempts"], cup["maxEntries"]) == (2, 3, None)
    path = "/v1/leaderboards/g/players/p1/tournaments?rank_mode=competition"
    assert http.get(path)[2] == reader.player_tournaments(
        "g", "p1", now_ms=NOW_MS, ranks="competition"
    )
    for player in ("p3", "p9"):  # left the board; never entered
        status, _, doc = http.get(f"/v1/leaderboards/g/players/{player}/tournaments")
        assert (status, doc["tournaments"]) == (200, [])
    assert http.get("/v1/leaderboards/nope/players/p1/tournaments")[0] == 404
    assert http.get("/v1/leaderboards/g/players/p1/tournaments?window=alltime")[0] == 400
    status, _, page = http.get("/v1/leaderboards/g/top?window=tournament:cup")
    assert (status, [e["playerId"] for e in page["entries"]]) == (200, ["p2", "p1", "p0"])


def test_friends_routes(http: Client, redis_client: RedisClient, namespace: str) -> None:
    _seed(redis_client, namespace)
    for friend in ("p1", "p2", "p3"):
        status, _, doc = http.call("PUT", f"/v1/leaderboards/g/players/p8/friends/{friend}")
        assert (status, doc["added"]) == (200, True)
    status, _, doc = http.call("PUT", "/v1/leaderboards/g/players/p8/friends/p1")
    assert (status, doc["added"]) == (200, False)
    status, _, doc = http.call("DELETE", "/v1/leaderboards/g/players/p8/friends/p3")
    assert (status, doc["removed"]) == (200, True)
    status, _, doc = http.get("/v1/leaderboards/g/players/p8/friends")
    assert (status, doc) == (200, {"playerId": "p8", "friends": ["p1", "p2"]})

    status, headers, board = http.get("/v1/leaderboards/g/friends?playerId=p8&window=alltime")
    assert status == 200
    assert board["cached"] is False and board["window"] == "alltime"
    # Scores (i * 7) % 50: p2 has 14, p1 has 7, p8 has 6.
    assert [e["playerId"] for e in board["entries"]] == ["p2", "p1", "p8"]
    assert [e["rank"] for e in board["entries"]] == [1, 2, 3]
    assert headers["Cache-Control"] == f"private, max-age={board['ttl']}"
    assert [e["profile"] for e in board["entries"]] == [None, None, None]
    status, _, again = http.get("/v1/leaderboards/g/friends?playerId=p8")
    assert again["cached"] is True and again["entries"] == board["entries"]

    status, _, doc = http.get("/v1/leaderboards/g/friends")
    assert status == 400 and doc["error"]["code"] == "BAD_REQUEST"
    status, _, doc = http.call("PUT", "/v1/leaderboards/g/players/p8/friends/p8")
    assert status == 400


def test_player_ids_are_percent_decoded(
    http: Client, redis_client: RedisClient, namespace: str
) -> None:
    player = "ü/ser 1"
    redis_client.zadd(f"{namespace}:{{g}}:alltime", {player: 5 * SLOTS})
    status, _, doc = http.get(f"/v1/leaderboards/g/players/{quote(player, safe='')}")
    assert (status, doc["playerId"], doc["score"]) == (200, player, 5)


def test_error_statuses(http: Client, redis_client: RedisClient, namespace: str) -> None:
    _seed(redis_client, namespace)
    cases = [
        ("GET", "/nope", 404, "NOT_FOUND"),
        ("GET", "/v1/leaderboards/g/players/ghost", 404, "NOT_FOUND"),
        ("GET", "/v1/leaderboards/g/players/ghost/neighbors", 404, "NOT_FOUND"),
        ("GET", "/v1/leaderboards/unknown.game/top", 404, "UNKNOWN_GAME"),
        ("GET", "/v1/leaderboards/g/top?limit=0", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/top?limit=ten", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/top?cursor=not-a-cursor", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/top?window=monthly", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/players/p1/neighbors?k=1000", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/players/%ff", 400, "BAD_REQUEST"),
        ("DELETE", "/v1/leaderboards/g/top", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/v1/scores", 405, "METHOD_NOT_ALLOWED"),
        # A misspelt parameter is refused, never read as the default board.
        ("GET", "/v1/leaderboards/g/top?windw=weekly", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/players/p1?limit=3", 400, "BAD_REQUEST"),
        ("GET", "/v1/leaderboards/g/players/p1/friends?x=1", 400, "BAD_REQUEST"),
        ("PUT", "/v1/leaderboards/g/players/p1/friends/p2?force=1", 400, "BAD_REQUEST"),
    ]
    for method, path, status, code in cases:
        got, headers, doc = http.call(method, path)
        assert (got, doc["error"]["code"]) == (status, code), (method, path, doc)
        assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
        assert headers["Content-Type"].startswith("application/json")
    _, headers, _ = http.call("DELETE", "/v1/leaderboards/g/top")
    assert headers["Allow"] == "GET"
    _, headers, _ = http.call("POST", "/v1/leaderboards/g/players/p8/friends/p1")
    assert headers["Allow"] == "DELETE, PUT"
    _, _, doc = http.get("/v1/leaderboards/g/top?windw=weekly")
    assert "'windw'" in doc["error"]["message"]

    status, _, doc = http.call("POST", "/v1/scores", b"x" * 20_000)
    assert (status, doc["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")


def test_openapi_document_describes_every_route(http: Client) -> None:
    status, _, doc = http.get("/openapi.json")
    assert status == 200
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) >= {
        "/v1/leaderboards/{gameId}/top",
        "/v1/leaderboards/{gameId}/players/{playerId}",
        "/v1/leaderboards/{gameId}/players/{playerId}/neighbors",
        "/v1/leaderboards/{gameId}/players/{playerId}/tournaments",
        "/v1/leaderboards/{gameId}/friends",
        "/v1/leaderboards/{gameId}/players/{playerId}/friends/{friendId}",
        "/v1/scores",
    }
    assert set(doc["paths"]["/v1/leaderboards/{gameId}/players/{playerId}/friends/{friendId}"]) == {
        "put",
        "delete",
    }
    # Generated from the code's models; it names no fixed server (the old one said :8080).
    assert "8080" not in json.dumps(doc.get("servers", []))
    assert doc["paths"]["/v1/leaderboards/{gameId}/top"]["get"]["parameters"]
    # Every $ref resolves.
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/')[1:]}:
        node: Any = doc
        for step in ref.split("/"):
            node = node[step]
    status, _, health = http.get("/healthz")
    assert (status, health) == (200, {"status": "ok"})


def test_interactive_docs_are_served_from_local_assets(http: Client) -> None:
    with urllib.request.urlopen(http.base + "/docs", timeout=30) as response:
        page = response.read().decode()
    assert "/docs-assets/swagger-ui-bundle.js" in page and "/openapi.json" in page
    assert "cdn" not in page.lower()
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        with urllib.request.urlopen(f"{http.base}/docs-assets/{asset}", timeout=30) as response:
            assert response.status == 200 and len(response.read()) > 10_000


# --- score intake ------------------------------------------------------------------------


def _signed(key_id: str = "k1", event_id: str | None = None, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "gameId": "g",
        "playerId": "alice",
        "score": 420,
        "timestamp": NOW_MS,
        "kind": "SCORE",
        "keyId": key_id,
    }
    doc.update(over)
    sig = sign(
        KEYRING,
        key_id,
        event_id or "",
        doc["gameId"],
        doc["playerId"],
        doc["score"],
        doc["timestamp"],
        EventKind(doc["kind"]),
        doc.get("metadata"),
    )
    if event_id is not None:
        doc["eventId"] = event_id
    doc["sig"] = sig.hex()
    return doc


def test_scores_with_metadata_are_produced_as_v2(
    http: Client, kafka_bootstrap: str, topic: str
) -> None:
    meta = '{"car":"red"} | Zoë 🏎'
    status, _, doc = http.post_json("/v1/scores", _signed(event_id="e-m1", metadata=meta))
    assert (status, doc) == (202, {"eventId": "e-m1"})
    status, _, derived = http.post_json("/v1/scores", _signed(playerId="bob", metadata=""))
    assert status == 202 and derived["eventId"].startswith("api-")
    refused = [
        (_signed(event_id="x", metadata="a") | {"metadata": "b"}, 401, "SIGNATURE"),
        (_signed(event_id="x", metadata="a") | {"metadata": None}, 401, "SIGNATURE"),
        (_signed(event_id="x", metadata="é" * 257), 400, "METADATA_TOO_LARGE"),
        (_signed(event_id="x") | {"metadata": 5}, 400, "INVALID_BODY"),
    ]
    for body, status_expected, code in refused:
        status, _, doc = http.post_json("/v1/scores", body)
        assert (status, doc["error"]["code"]) == (status_expected, code), body
    messages = read_topic({"bootstrap.servers": kafka_bootstrap}, topic)
    codec = ScoreEventCodec.from_registry()
    values = [m.value() or b"" for m in messages]
    assert [value[1:5] for value in values] == [(2).to_bytes(4, "big")] * 2
    events = {e.event_id: e for e in map(codec.decode, values)}
    assert events["e-m1"].metadata == meta and events[derived["eventId"]].metadata == ""
    assert all(verify(KEYRING, event) is Verdict.OK for event in events.values())


def test_signed_scores_are_produced_and_bad_ones_refused(
    http: Client, kafka_bootstrap: str, topic: str
) -> None:
    event_id = f"e-{uuid.uuid4().hex}"
    status, _, doc = http.post_json("/v1/scores", _signed(event_id=event_id))
    assert (status, doc) == (202, {"eventId": event_id})

    # Without an eventId: signed with an empty one, the server derives a stable id.
    anonymous = _signed("k2", playerId="bob", score=7, kind="RETRACT")
    status, _, first = http.post_json("/v1/scores", anonymous)
    assert status == 202 and first["eventId"].startswith("api-")
    status, _, again = http.post_json("/v1/scores", anonymous)
    assert (status, again) == (202, first)  # a retry keeps its id: the job dedupes it

    refused = [
        (_signed(event_id="x", score=421) | {"score": 422}, 401, "SIGNATURE"),
        (_signed(event_id="x") | {"sig": "00" * 32}, 401, "SIGNATURE"),
        (_signed(event_id="x") | {"keyId": "k9"}, 401, "UNKNOWN_KEY"),
        (_signed(event_id="x", score=1001), 400, "BOUNDS"),
        (_signed(event_id="x", gameId="unknown"), 400, "UNKNOWN_GAME"),
        (_signed(event_id="x") | {"extra": 1}, 400, "INVALID_BODY"),
        (_signed(event_id="x") | {"score": "420"}, 400, "INVALID_BODY"),
        (_signed(event_id="x") | {"score": True}, 400, "INVALID_BODY"),
        (_signed(event_id="x") | {"sig": "zz"}, 400, "INVALID_BODY"),
        (_signed(event_id="x") | {"kind": "BOOST"}, 400, "INVALID_BODY"),
        ([1, 2], 400, "INVALID_BODY"),
    ]
    for body, status_expected, code in refused:
        status, _, doc = http.post_json("/v1/scores", body)
        assert (status, doc["error"]["code"]) == (status_expected, code), body
    status, _, doc = http.call("POST", "/v1/scores", b"{not json")
    assert (status, doc["error"]["code"]) == (400, "INVALID_BODY")

    messages = read_topic({"bootstrap.servers": kafka_bootstrap}, topic)
    assert len(messages) == 3  # the two accepted events (one twice); nothing refused
    codec = ScoreEventCodec.from_registry()
    events = [codec.decode(m.value()) for m in messages]
    for message, event in zip(messages, events, strict=True):
        assert message.key() == event.player_id.encode()
        assert verify(KEYRING, event) is Verdict.OK  # the job will accept the signature
    by_id = {e.event_id: e for e in events}
    alice = by_id[event_id]
    assert (alice.game_id, alice.player_id, alice.score, alice.ts_ms, alice.kind) == (
        "g",
        "alice",
        420,
        NOW_MS,
        EventKind.SCORE,
    )
    assert alice.key_id == "k1"
    bob = by_id[first["eventId"]]
    assert (bob.player_id, bob.score, bob.kind, bob.key_id) == ("bob", 7, EventKind.RETRACT, "k2")
    assert canonical(bob.event_id, "g", "bob", 7, NOW_MS, EventKind.RETRACT).startswith(b"v1|api-")


def test_a_raw_socket_request_without_length_is_refused(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/scores HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"
        )
        chunks = []
        while chunk := sock.recv(4096):  # the server closes the connection after answering
            chunks.append(chunk)
        reply = b"".join(chunks).decode()
    assert reply.startswith("HTTP/1.1 411")
    assert '"LENGTH_REQUIRED"' in reply


def test_batches_and_concurrent_requests_are_all_acknowledged(
    http: Client, kafka_bootstrap: str, topic: str
) -> None:
    batch = [_signed(event_id=f"b-{i}", playerId=f"p{i}", score=i) for i in range(5)]
    status, _, doc = http.post_json("/v1/scores", batch)
    assert (status, doc) == (202, {"eventIds": [f"b-{i}" for i in range(5)]})

    # One bad event refuses the whole batch, before anything is produced.
    status, _, doc = http.post_json("/v1/scores", [*batch[:2], batch[2] | {"score": 9}])
    assert (status, doc["error"]["code"]) == (401, "SIGNATURE")
    status, _, doc = http.post_json("/v1/scores", [*batch[:2], batch[2] | {"extra": 1}])
    assert (status, doc["error"]["code"]) == (400, "INVALID_BODY")
    assert "2.extra" in doc["error"]["message"]
    status, _, doc = http.post_json("/v1/scores", [])
    assert (status, doc["error"]["code"]) == (400, "INVALID_BODY")

    # Many clients at once share the one producer; each answer waits for its ack.
    def post(i: int) -> tuple[int, Any]:
        status, _, doc = http.post_json("/v1/scores", _signed(event_id=f"c-{i}", score=i))
        return status, doc

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(post, range(64)))
    assert answers == [(202, {"eventId": f"c-{i}"}) for i in range(64)]

    ids = sorted(
        ScoreEventCodec.from_registry().decode(m.value()).event_id
        for m in read_topic({"bootstrap.servers": kafka_bootstrap}, topic)
    )
    assert ids == sorted([f"b-{i}" for i in range(5)] + [f"c-{i}" for i in range(64)])


def test_hot_serves_the_published_counts_and_404_before(
    http: Client, redis_client: RedisClient, namespace: str
) -> None:
    from domain.heavy_hitters import ActivityCounts, hot_key

    status, _, body = http.get("/v1/leaderboards/g/hot?window=daily")
    assert status == 404 and "lb hot g" in body["error"]["message"]
    players, games = ActivityCounts(), ActivityCounts()
    players.add_all(["bot"] * 50 + [f"p{i}" for i in range(20)])
    games.add("g", 70)
    redis_client.hset(
        hot_key(namespace, "g", "daily:2026-05-06"),
        mapping={"players": players.encode(), "games": games.encode(), "builtAtMs": NOW_MS},
    )
    status, _, body = http.get("/v1/leaderboards/g/hot?window=daily&limit=2&playerId=bot")
    assert status == 200
    assert body["window"] == "daily:2026-05-06" and body["events"] == 70
    assert body["players"][0] == {
        "playerId": "bot",
        "events": 50,
        "lowerBound": 50,
        "upperBound": 50,
    }
    assert len(body["players"]) == 2 and body["games"][0]["gameId"] == "g"
    assert body["player"] == {"playerId": "bot", "events": 50, "lowerBound": 50}
    assert http.get("/v1/leaderboards/g/hot?limit=0")[0] == 400
