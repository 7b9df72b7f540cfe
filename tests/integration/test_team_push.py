"""Team board pushes end to end: score and membership records in Kafka -> both jobs -> pushes.

``lb run`` and ``lb teams run`` tail the test's own topics; the API serves
``/live?teams=true`` (WebSocket) and ``/events?teams=true`` (SSE). A member's
score and a player's change of team must each reach a subscriber as a new
team page and a new rank of the followed team, equal to an oracle
(:func:`domain.teams.team_boards`) of what was produced; a ``rank_mode=dense``
subscriber gets tied teams one shared rank and the next aggregate the next
one. Standalone Redis and the local Redis Cluster.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from websockets.sync.client import ClientConnection, connect

from domain.signing import parse_keyring
from domain.teams import TeamAggregate, TeamKeys, team_boards
from schemas.membership import MembershipCodec, sign_membership
from tests.integration.api_server import api_settings, running_api
from tests.integration.live_events import best, now_ms
from tests.integration.streams import KEYS, job_env, produce
from tests.integration.watching import start_job
from tests.poll import Deadline

GAME = "tsquad"
GAMES_TOML = (
    f'[games."{GAME}"]\noperator = "best"\nteams = "sum"\ndense_ranks = true\n'
    'max_score = 1000000\n[games."plain"]\nteams = "sum"\n'
)


@contextlib.contextmanager
def tailing(args: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """``lb ARGS`` running until the block ends."""
    proc = start_job(args, env, log)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def join(bootstrap: str, topic: str, moves: list[tuple[str, str | None]]) -> None:
    keyring, codec = parse_keyring(KEYS), MembershipCodec()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for player, team in moves:
        value = codec.encode(sign_membership(keyring, "k1", player, team, now_ms()))
        producer.produce(topic, key=player.encode(), value=value)
    assert producer.flush(60) == 0


def receive(ws: ClientConnection, timeout: float) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(ws.recv(timeout=timeout))
    return message


def settle(
    ws: ClientConnection,
    page: list[tuple[str, int]],
    team: str,
    rank: int | None,
    ranks: list[int] | None = None,
) -> str:
    """Read pushes until the newest page and rank are the expected ones; the last one's id.

    ``ranks``: the page's expected ranks (default: unique, 1..n).
    """
    deadline = Deadline(f"a team page {page} and {team} at rank {rank}", 120)
    newest: dict[str, dict[str, Any]] = {}
    while True:
        message = receive(ws, deadline.left())
        assert message["type"] in ("top", "rank"), message
        newest[message["type"]] = message
        top, mine = newest.get("top"), newest.get("rank")
        if (
            top is not None
            and [(e["teamId"], e["score"]) for e in top["entries"]] == page
            and mine is not None
            and (mine["teamId"], mine["rank"]) == (team, rank)
        ):
            want = ranks if ranks is not None else list(range(1, len(page) + 1))
            assert [e["rank"] for e in top["entries"]] == want
            return str(message["id"])


def oracle(membership: dict[str, str | None], scores: dict[str, int]) -> list[tuple[str, int]]:
    boards, _ = team_boards(TeamAggregate.SUM, membership, {"alltime": scores})
    ranked = sorted(boards.get("alltime", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return [(team, int(score)) for team, score in ranked]


@dataclass(frozen=True)
class Where:
    """One test's topics, namespace and Redis (standalone or cluster)."""

    kafka: str
    redis_url: str
    cluster: bool
    topic: str
    teams_topic: str
    namespace: str
    tmp: Path
    client: Any


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def where(
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    redis_url: str,
    topic: str,
    teams_topic: str,
    namespace: str,
    tmp_path: Path,
) -> Where:
    cluster = request.param == "cluster"
    url = request.getfixturevalue("cluster_services")[0] if cluster else redis_url
    client = request.getfixturevalue("cluster_client" if cluster else "redis_client")
    return Where(kafka_bootstrap, url, cluster, topic, teams_topic, namespace, tmp_path, client)


def test_team_pushes_follow_scores_and_membership(where: Where) -> None:
    kafka_bootstrap, topic, teams_topic = where.kafka, where.topic, where.teams_topic
    games = where.tmp / "games.toml"
    games.write_text(GAMES_TOML)
    env = {
        **job_env(topic, where.namespace, where.tmp / "state", games),
        "LB_TEAMS_TOPIC": teams_topic,
        "LB_REDIS_URL": where.redis_url,
    }
    if where.cluster:
        env["LB_REDIS_CLUSTER"] = "1"
    settings = api_settings(
        kafka_bootstrap,
        where.redis_url,
        topic,
        where.namespace,
        KEYS,
        games_file=games,
        redis_cluster=where.cluster,
    )
    tmp_path = where.tmp
    with (
        tailing(["run"], env, tmp_path / "job.log"),
        tailing(["teams", "run"], env, tmp_path / "teams.log"),
        running_api(settings) as api,
    ):
        url = f"{api.replace('http://', 'ws://')}/v1/leaderboards/{GAME}/live"
        with connect(f"{url}?teams=true&top=3&teamId=blue&interval=50", open_timeout=30) as ws:
            first, rank = receive(ws, 30), receive(ws, 30)
            assert (first["type"], first["window"], first["aggregate"]) == ("top", "alltime", "sum")
            assert first["entries"] == []
            assert (rank["type"], rank["teamId"], rank["rank"], rank["members"]) == (
                "rank",
                "blue",
                None,
                0,
            )

            membership: dict[str, str | None] = {"p1": "red", "p2": "red", "p3": "blue"}
            scores = {"p1": 10, "p2": 20, "p3": 25, "p4": 99}  # p4: in no team
            join(kafka_bootstrap, teams_topic, list(membership.items()))
            produce(kafka_bootstrap, topic, [best(p, s, GAME) for p, s in scores.items()])
            expected = oracle(membership, scores)
            assert expected == [("red", 30), ("blue", 25)]
            settle(ws, expected, "blue", 2)

            # A change of team alone (no score moves) reorders the team board.
            membership["p2"] = "blue"
            join(kafka_bootstrap, teams_topic, [("p2", "blue")])
            expected = oracle(membership, scores)
            assert expected == [("blue", 45), ("red", 10)]
            last_id = settle(ws, expected, "blue", 1)

            # A member's score alone does too.
            scores["p1"] = 60
            produce(kafka_bootstrap, topic, [best("p1", 60, GAME)])
            expected = oracle(membership, scores)
            assert expected == [("red", 60), ("blue", 45)]
            settle(ws, expected, "blue", 2)

        # Missed while away: replayed over SSE from Last-Event-ID, the changes included.
        host, port = api.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request(
            "GET",
            f"/v1/leaderboards/{GAME}/events?teams=true&top=3",
            headers={"Last-Event-ID": last_id},
        )
        response = conn.getresponse()
        assert response.status == 200
        event = read_sse(response)
        assert event["event"] == "top"
        assert [(e["teamId"], e["score"]) for e in event["data"]["entries"]] == expected
        assert ("red", 10, 60, 1) in {
            (c["teamId"], c["old"], c["new"], c["rank"]) for c in event["data"]["changes"]
        }
        conn.close()

        # Dense ranks: a new team ties blue; both share rank 2, as GET answers.
        dense = f"{url}?teams=true&top=3&teamId=green&interval=50&rank_mode=dense"
        with connect(dense, open_timeout=30) as ws:
            settle(ws, expected, "green", None)
            membership["p5"], scores["p5"] = "green", 45
            join(kafka_bootstrap, teams_topic, [("p5", "green")])
            produce(kafka_bootstrap, topic, [best("p5", 45, GAME)])
            expected = oracle(membership, scores)
            assert expected == [("red", 60), ("blue", 45), ("green", 45)]
            # Equal aggregates in Redis's order: team id, descending bytes.
            tied = [("red", 60), ("green", 45), ("blue", 45)]
            settle(ws, tied, "green", 2, ranks=[1, 2, 2])
        # The boards are where the deployment says (the cluster's node of the game's tag).
        keys = TeamKeys(where.namespace, GAME)
        assert where.client.zscore(keys.board("alltime"), "green") == 45
        assert where.client.hget(keys.dense_counts("alltime"), "45") == b"2"
        with connect(f"{url}?teams=true&top=3&rank_mode=competition", open_timeout=30) as ws:
            page = receive(ws, 30)
            assert [(e["teamId"], e["rank"]) for e in page["entries"]] == [
                ("red", 1),
                ("green", 2),
                ("blue", 2),
            ]
        # A game without distinct-score counts is refused, as GET refuses it.
        plain = url.replace(f"/{GAME}/", "/plain/")
        with connect(f"{plain}?teams=true&rank_mode=dense", open_timeout=30) as ws:
            refused = receive(ws, 10)
            assert refused["type"] == "error" and "dense_ranks" in refused["error"]["message"]


def read_sse(response: http.client.HTTPResponse) -> dict[str, Any]:
    event: dict[str, Any] = {}
    while True:
        line = response.readline().decode().rstrip("\n")
        if not line:
            if "data" in event:
                return event
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        event[name] = json.loads(value) if name == "data" else value
