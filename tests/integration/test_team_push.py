"""Team board pushes end to end: score and membership records in Kafka -> both jobs -> pushes.

``lb run`` and ``lb teams run`` tail the test's own topics; the API serves
``/live?teams=true`` (WebSocket) and ``/events?teams=true`` (SSE). A member's
score and a player's change of team must each reach a subscriber as a new
team page and a new rank of the followed team, equal to an oracle
(:func:`domain.teams.team_boards`) of what was produced.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from websockets.sync.client import ClientConnection, connect

from domain.signing import parse_keyring
from domain.teams import TeamAggregate, team_boards
from schemas.membership import MembershipCodec, sign_membership
from tests.integration.api_server import api_settings, running_api
from tests.integration.live_events import best, now_ms
from tests.integration.streams import KEYS, job_env, produce
from tests.integration.watching import start_job
from tests.poll import Deadline

GAME = "tsquad"
GAMES_TOML = f'[games."{GAME}"]\noperator = "best"\nteams = "sum"\nmax_score = 1000000\n'


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


def settle(ws: ClientConnection, page: list[tuple[str, int]], team: str, rank: int) -> str:
    """Read pushes until the newest page and rank are the expected ones; the last one's id."""
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
            assert [e["rank"] for e in top["entries"]] == list(range(1, len(page) + 1))
            return str(message["id"])


def oracle(membership: dict[str, str | None], scores: dict[str, int]) -> list[tuple[str, int]]:
    boards, _ = team_boards(TeamAggregate.SUM, membership, {"alltime": scores})
    ranked = sorted(boards.get("alltime", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return [(team, int(score)) for team, score in ranked]


def test_team_pushes_follow_scores_and_membership(
    kafka_bootstrap: str,
    redis_url: str,
    topic: str,
    teams_topic: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = {**job_env(topic, namespace, tmp_path / "state", games), "LB_TEAMS_TOPIC": teams_topic}
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games)
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
