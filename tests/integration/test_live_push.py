"""Live pushes end to end: Kafka -> the real job -> change stream -> API -> WebSocket / SSE.

The streaming job (``lb run``) runs as a subprocess on the test's own topic
and namespace; events are produced to Kafka as a game server would. The
client side uses the ``websockets`` library and a raw ``http.client`` reader
for Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from functools import partial
from typing import Any

import pytest
import redis.asyncio
from websockets.sync.client import ClientConnection, connect

from adapters.redis import RedisClient
from api.live import MAX_PENDING, ChangeHub, Subscriber
from domain.keys import GroupKeys
from tests.integration.live_events import GAME, best
from tests.integration.streams import produce
from tests.poll import Deadline, apoll, poll


def ws_url(base: str, query: str) -> str:
    return f"{base.replace('http://', 'ws://')}/v1/leaderboards/{GAME}/live?{query}"


def receive(ws: ClientConnection, timeout: float = 10.0) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(ws.recv(timeout=timeout))
    return message


def until(ws: ClientConnection, check: Any, timeout: float = 60.0) -> dict[str, Any]:
    """The first message satisfying ``check`` within ``timeout`` seconds."""
    deadline = Deadline("such a message", timeout)
    while True:
        message = receive(ws, deadline.left())
        if check(message):
            return message


def top_players(message: dict[str, Any]) -> list[tuple[str, int]]:
    return [(e["playerId"], e["score"]) for e in message["entries"]]


def test_pushes_follow_the_job_and_resume_without_a_gap(
    live_job: Any,
    live_api: str,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
) -> None:
    api = live_api
    with connect(ws_url(api, "top=3&playerId=p1&interval=50"), open_timeout=30) as ws:
        first = receive(ws)
        assert (first["type"], first["window"], first["entries"]) == ("top", "alltime", [])
        rank = receive(ws)
        assert (rank["type"], rank["playerId"], rank["rank"], rank["score"]) == (
            "rank",
            "p1",
            None,
            None,
        )

        produce(kafka_bootstrap, topic, [best("p1", 10), best("p2", 20)])
        # p1 and p2 may land in two stream entries, and a push's rank read may already
        # see the second while its page read did not: the rank of 2 can come before the
        # page of two. So wait until the newest of each says so, in either order.
        newest: dict[str, dict[str, Any]] = {}

        def settled(message: dict[str, Any]) -> bool:
            newest[message["type"]] = message
            page, rank = newest.get("top"), newest.get("rank")
            return bool(page and len(page["entries"]) == 2 and rank and rank["rank"] == 2)

        until(ws, settled)
        page, mine = newest["top"], newest["rank"]
        assert top_players(page) == [("p2", 20), ("p1", 10)]
        changes = {(c["playerId"], c["old"], c["new"]) for c in page["changes"]}
        assert changes <= {("p1", None, 10), ("p2", None, 20)}
        assert (mine["score"], mine["window"]) == (10, "alltime")
        last_id = mine["id"]

    # Missed while disconnected: replayed on reconnect, in the first page's changes.
    produce(kafka_bootstrap, topic, [best("p3", 30), best("p4", 5)])
    stream = GroupKeys(namespace, GAME).changes
    board = GroupKeys(namespace, GAME).board("alltime")
    # p3 and p4 may be in partitions of two job processes: wait for both.
    poll(
        "the job applies the events",
        lambda: (
            redis_client.xlen(stream) >= 3
            and redis_client.zscore(board, "p3") is not None
            and redis_client.zscore(board, "p4") is not None
        ),
    )
    with connect(ws_url(api, f"top=3&interval=50&lastEventId={last_id}")) as ws:
        page = receive(ws)
        assert page["type"] == "top"
        assert top_players(page) == [("p3", 30), ("p2", 20), ("p1", 10)]
        assert ("p3", None, 30) in {(c["playerId"], c["old"], c["new"]) for c in page["changes"]}
        resumed_at = page["id"]

    # The same over Server-Sent Events, resuming from Last-Event-ID.
    produce(kafka_bootstrap, topic, [best("p1", 40)])
    host, port = api.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    conn.request(
        "GET", f"/v1/leaderboards/{GAME}/events?top=3", headers={"Last-Event-ID": resumed_at}
    )
    response = conn.getresponse()
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    event = read_sse(response)
    assert event["event"] == "top" and event["id"] == event["data"]["id"]
    if top_players(event["data"])[0] != ("p1", 40):
        event = read_sse(response)
    assert top_players(event["data"]) == [("p1", 40), ("p3", 30), ("p2", 20)]
    conn.close()

    # Fell off the end of the capped stream: told so, then a fresh page.
    redis_client.xtrim(stream, maxlen=0)
    produce(kafka_bootstrap, topic, [best("p5", 1)])
    poll("the job appends to the trimmed stream", lambda: redis_client.xlen(stream) >= 1)
    with connect(ws_url(api, f"top=3&lastEventId={last_id}")) as ws:
        gap = receive(ws)
        assert (gap["type"], gap["lastEventId"]) == ("gap", last_id)
        page = receive(ws)
        assert page["type"] == "top" and top_players(page)[0] == ("p1", 40)


def read_sse(response: http.client.HTTPResponse) -> dict[str, Any]:
    """The next event of an SSE stream: its fields, ``data`` parsed as JSON."""
    fields: dict[str, Any] = {}
    while True:
        line = response.readline().decode().rstrip("\n")
        if not line:
            if fields:
                fields["data"] = json.loads(fields["data"])
                return fields
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        fields[name] = value


def test_bad_subscriptions_are_refused_with_the_error_document(live_api: str) -> None:
    api = live_api
    with connect(ws_url(api, "windw=weekly")) as ws:
        message = receive(ws)
        assert message["type"] == "error"
        assert message["error"]["code"] == "BAD_REQUEST" and "windw" in message["error"]["message"]
    with connect(ws_url(api, "").replace(GAME, "nope")) as ws:
        assert receive(ws)["error"]["code"] == "UNKNOWN_GAME"
    host, port = api.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    for path, status, code in [
        (f"/v1/leaderboards/{GAME}/events?top=101", 400, "BAD_REQUEST"),
        (f"/v1/leaderboards/{GAME}/events?lastEventId=x", 400, "BAD_REQUEST"),
        ("/v1/leaderboards/nope/events", 404, "UNKNOWN_GAME"),
    ]:
        conn.request("GET", path)
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["error"]["code"]) == (status, code)
    conn.close()


def test_a_subscriber_that_stops_draining_is_dropped_and_others_are_not(
    redis_url: str, redis_client: RedisClient, namespace: str
) -> None:
    """The hub's bound, against real Redis: a subscriber whose queue is not drained
    (its connection stuck in a send) is dropped and detached; one that drains stays."""
    stream = GroupKeys(namespace, GAME).changes
    entry = {"c": json.dumps([{"w": "alltime", "p": "y", "o": "", "n": "1", "r": 1}])}

    async def scenario() -> tuple[str | None, str | None, int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        hub = ChangeHub(client, block_ms=100)

        def everything(changes: list[Any]) -> list[Any]:
            return changes

        stuck = Subscriber((stream,), watch="all", select_top=everything)
        draining = Subscriber((stream,), watch="all", select_top=everything)
        await hub.attach(stuck)
        await hub.attach(draining)
        drained = 0

        def drained_all(sent: int) -> bool:
            nonlocal drained
            drained += len(draining.take() or [])
            return drained >= sent

        for round_ in range(MAX_PENDING // 100 + 5):
            pipe = redis_client.pipeline(transaction=False)
            for _ in range(100):
                pipe.xadd(stream, entry)
            pipe.execute()
            # Drain like a healthy connection: until the hub has handed over this
            # round's entries (not a fixed sleep, which a loaded machine outlasts).
            await apoll("the hub hands over a round", partial(drained_all, (round_ + 1) * 100))
        await hub.close()
        await client.aclose()
        return stuck.dropped, draining.dropped, drained

    stuck, draining, drained = asyncio.run(scenario())
    assert stuck is not None and "too slow" in stuck
    assert draining is None and drained == (MAX_PENDING // 100 + 5) * 100


def test_top_pages_follow_every_change_and_respect_each_subscribers_interval(
    live_job: Any, live_api: str, kafka_bootstrap: str, topic: str
) -> None:
    """Top-only subscribers are pushed by the hub itself (one shared frame) when
    their task is idle and their interval has passed; a throttled one is not."""
    with (
        connect(ws_url(live_api, "top=3&interval=50"), open_timeout=30) as fast,
        connect(ws_url(live_api, "top=3&interval=50"), open_timeout=30) as twin,
        connect(ws_url(live_api, "top=3&interval=60000"), open_timeout=30) as slow,
    ):
        firsts = [receive(ws) for ws in (fast, twin, slow)]
        assert all(m["type"] == "top" and m["entries"] == [] for m in firsts)

        produce(kafka_bootstrap, topic, [best("p1", 10)])
        first = {"rank": 1, "playerId": "p1", "score": 10, "profile": None}
        page = until(fast, lambda m: m["entries"][:1] == [first])
        assert page["changes"] == [{"playerId": "p1", "old": None, "new": 10, "rank": 1}]
        assert until(twin, lambda m: m["id"] == page["id"]) == page  # the same page, same bytes

        produce(kafka_bootstrap, topic, [best("p2", 20)])
        second = until(fast, lambda m: top_players(m)[:1] == [("p2", 20)])
        assert top_players(second) == [("p2", 20), ("p1", 10)]
        assert stream_id_of(second) > stream_id_of(page)
        host, port = live_api.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        conn.request("GET", f"/v1/leaderboards/{GAME}/top?limit=3")
        assert json.loads(conn.getresponse().read())["entries"] == second["entries"]
        conn.close()

        # The throttled subscriber's push was decided with the fast one's (same
        # entries, same hub step), so a wrongly sent page would be waiting by now.
        with pytest.raises(TimeoutError):
            slow.recv(timeout=0.5)


def stream_id_of(message: dict[str, Any]) -> tuple[int, int]:
    ms, _, seq = message["id"].partition("-")
    return int(ms), int(seq)


@pytest.mark.parametrize(("game", "mine", "ahead"), [("gbest", 20, 30), ("gasc", 20, 10)])
def test_a_player_following_their_rank_hears_of_a_newcomer_ahead_of_them(
    live_job: Any,
    live_api: str,
    kafka_bootstrap: str,
    topic: str,
    game: str,
    mine: int,
    ahead: int,
) -> None:
    """On either order (``gasc`` is lowest-wins), a newcomer entering ahead of a
    player who follows their own rank moves them down, and a ``rank`` message says so."""
    produce(kafka_bootstrap, topic, [best("me", mine, game)])
    url = ws_url(live_api, "top=0&playerId=me&interval=50").replace(f"/{GAME}/", f"/{game}/")
    with connect(url, open_timeout=30) as ws:
        until(ws, lambda m: m["type"] == "rank" and m["rank"] == 1)
        produce(kafka_bootstrap, topic, [best("ahead", ahead, game)])
        moved = until(ws, lambda m: m["type"] == "rank", timeout=30)
        assert (moved["playerId"], moved["rank"], moved["score"]) == ("me", 2, mine)
