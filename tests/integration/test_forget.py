"""``lb forget``: a player erased from every game through records in the logs, for good.

Real Kafka records and real Redis (standalone and the cluster of ``lb up --cluster``):
the receipt lists what was on the boards, the profile and the team memberships; the
projection no longer holds the player (boards, profile, team boards, members and
membership); events after the erasure count again as a new entry, and ``lb rebuild``
(a replay of the whole log), a re-read of the membership topic and ``lb verify`` give
the same state: the player does not come back.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from adapters.redis import RedisClient
from api.auth.keyfile import key_line, new_key
from domain.events import EventKind
from domain.signing import parse_keyring, signed_event
from domain.teams import TeamKeys
from schemas.codec import ScoreEventCodec
from tests.integration.api_server import api_settings, running_api
from tests.integration.streams import (
    GAMES_TOML,
    KEYS,
    REPO,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_boards,
    read_stats,
    stream_and_env,
)
from tests.poll import poll

pytestmark = pytest.mark.slow


def _boards_of(boards: dict[str, dict[str, int]], player: str) -> set[str]:
    return {board for board, members in boards.items() if player in members}


def _busiest(boards: dict[str, dict[str, int]]) -> str:
    counts: dict[str, int] = {}
    for members in boards.values():
        for player in members:
            counts[player] = counts.get(player, 0) + 1
    return max(sorted(counts), key=lambda p: counts[p])


def _forget_beside_the_job(
    env: dict[str, str], player: str, extra: list[str], also: Sequence[Callable[[], None]] = ()
) -> dict[str, Any]:
    """``lb forget`` started first; once its records are produced, the job reads to the end.

    Then each of ``also`` runs (checks between the two jobs, ``lb teams run``).
    """
    forget = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "forget", player, "--json", "--timeout", "240", *extra],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert forget.stderr is not None
    line = forget.stderr.readline()  # the first progress line: the records are in the logs
    assert "applied the erasure" in line, line + forget.stderr.read()
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    for command in also:
        command()
    out, err = forget.communicate(timeout=240)
    assert forget.returncode == 0, err
    receipt: dict[str, Any] = json.loads(out)
    return receipt


def _score_again(bootstrap: str, topic: str, player: str, score: int) -> None:
    now = time.time_ns() // 1_000_000
    event = signed_event(
        parse_keyring(KEYS),
        "k1",
        event_id=f"after-erasure-{player}",
        game_id="gbest",
        player_id=player,
        score=score,
        ts_ms=now,
        kind=EventKind.SCORE,
    )
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    value = ScoreEventCodec.from_registry().encode(event, 1)
    producer.produce(topic, value, player.encode(), timestamp=now)
    assert producer.flush(60) == 0


def _erase_replay_and_rebuild(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    env: dict[str, str],
    read: Any,
    client: Any,
) -> None:
    before = read()
    player = _busiest(before)
    had = _boards_of(before, player)
    assert had
    named = lb(["profiles", "set", player, "--name", "Ada L.", "--country", "GB"], env)
    assert named.returncode == 0, named.stderr
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    assert lb(["profiles", "show", player], env).returncode == 0

    receipt = _forget_beside_the_job(env, player, [])
    listed = sorted(
        f"{game}:{item['board']}" for game, items in receipt["games"].items() for item in items
    )
    # Boards are named by group (a sharded game's shard); the receipt by game.
    assert listed == sorted(f"{b.split(':', 1)[0].split('/')[0]}:{b.split(':', 1)[1]}" for b in had)
    assert receipt["boards"] == len(had)
    scores = [item["score"] for items in receipt["games"].values() for item in items]
    assert all(isinstance(score, int) and 0 <= score <= 1_000_000 for score in scores)
    assert receipt["record"]["topic"] == topic and receipt["record"]["offset"] >= 0
    assert receipt["profile"]["removed"] is True
    assert receipt["profile"]["record"]["topic"] == f"{topic}.profiles"
    assert receipt["teams"] == {"removed": [], "record": None}  # no game keeps team boards
    gone = lb(["profiles", "show", player, "--json"], env)
    assert gone.returncode == 1 and json.loads(gone.stdout)["profile"] is None
    after = read()
    assert not _boards_of(after, player)
    attempts = f"{namespace}:{{gtour}}:meta:attempts:cup"
    if "gtour:tournament:cup" in had:  # the tournament's attempts forget the player too
        assert not client.hexists(attempts, player)
    # Every other player's boards are untouched.
    strip = {b: {p: v for p, v in m.items() if p != player} for b, m in before.items()}
    assert {b: m for b, m in strip.items() if m} == after

    # A new event after the erasure counts again, as a new entry.
    _score_again(kafka_bootstrap, topic, player, 7)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    again = read()
    back = _boards_of(again, player)
    assert back and all(b.startswith("gbest:") for b in back)

    # A replay of the whole log erases the player again: the same boards, whether
    # swapped in at once or cut over group by group beside the live keys, or only
    # the player's game replayed (the erasure names no game, yet reaches it).
    for how in (
        ["rebuild", "--offline"],
        ["rebuild", "--processes", "2"],
        ["backfill", "--game", "gbest"],
    ):
        rebuilt = lb(how, env, timeout=600)
        assert rebuilt.returncode == 0, rebuilt.stderr
        now = read()
        diff = {
            b: (
                {p: v for p, v in now.get(b, {}).items() if again.get(b, {}).get(p) != v},
                {p: v for p, v in again.get(b, {}).items() if now.get(b, {}).get(p) != v},
            )
            for b in set(now) | set(again)
            if now.get(b) != again.get(b)
        }
        assert not diff, (how, player, diff)
        # The profiles topic is replayed too: its tombstone keeps the profile gone.
        assert lb(["profiles", "show", player], env).returncode == 1, how
    audit = lb(["verify", "--quiet"], env, timeout=300)
    assert audit.returncode == 0, audit.stdout + audit.stderr

    # A second erasure of someone on no board is a typo: one line, exit 2.
    typo = lb(["forget", "nobody-by-that-name"], env, timeout=60)
    assert typo.returncode == 2
    assert "nothing to erase" in typo.stderr and "Traceback" not in typo.stderr


def test_forget_erases_everywhere_and_a_rebuild_keeps_the_player_gone(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=26, count=3000)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0  # makes the profiles topic

    def read() -> dict[str, dict[str, int]]:
        return read_boards(redis_client, namespace)

    _erase_replay_and_rebuild(kafka_bootstrap, topic, namespace, env, read, redis_client)


def test_forget_removes_friend_sets_both_ways(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=27, count=600)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    player = _busiest(read_boards(redis_client, namespace))
    assert lb(["friends-add", "gbest", player, "p-friend"], env).returncode == 0
    assert lb(["friends-add", "gbest", "p-follower", player], env).returncode == 0
    receipt = _forget_beside_the_job(env, player, [])
    assert (receipt["friendSets"], receipt["followers"]) == (1, 1)
    assert not redis_client.exists(f"{namespace}:{{gbest}}:friends:{player}")
    assert not redis_client.sismember(f"{namespace}:{{gbest}}:friends:p-follower", player)


@pytest.mark.cluster
def test_forget_on_a_redis_cluster(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    cluster_client: Any,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=28, count=2000)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1", LB_WRITE_MAX_UPDATES="9")
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0  # makes the profiles topic

    def read() -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for node in cluster_client.get_primaries():
            out.update(read_boards(cluster_client.get_redis_connection(node), namespace))
        return out

    _erase_replay_and_rebuild(kafka_bootstrap, topic, namespace, env, read, cluster_client)


def test_the_http_route_needs_a_server_key_and_answers_the_receipt(
    kafka_bootstrap: str,
    redis_url: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
    live_job: Any,
) -> None:
    stream = generate(seed=29, count=400)
    produce(kafka_bootstrap, topic, stream.records)
    poll("the job projects the stream", lambda: bool(read_boards(redis_client, namespace)), 120)
    poll(
        "the job reads to the end",
        lambda: sum(int(v) for v in _applied(redis_client, namespace)) >= _accepted(stream),
        120,
    )
    player = _busiest(read_boards(redis_client, namespace))
    games_file = tmp_path / "cli-games.toml"
    games_file.write_text(GAMES_TOML)
    cli = job_env(topic, namespace, tmp_path / "cli-state", games_file)
    named = lb(["profiles", "set", player, "--name", "Grace", "--wait", "120"], cli, timeout=180)
    assert named.returncode == 0, named.stderr
    key = new_key()
    keys = tmp_path / "api-keys"
    keys.write_text(key_line("privacy-desk", key) + "\n")
    games = tmp_path / "api-games.toml"
    games.write_text(GAMES_TOML)
    base = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games)
    with running_api(base) as url:  # no key file: nobody may erase
        assert call(f"{url}/v1/players/{player}", "DELETE", key)[0] == 403
    secured = api_settings(
        kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games, api_keys_file=keys
    )
    with running_api(secured) as url:
        route = f"{url}/v1/players/{player}?timeoutS=100"
        assert call(route, "DELETE")[0] == 401
        assert call(route, "DELETE", "lbk_" + "x" * 43)[0] == 401
        assert call(f"{url}/v1/players/nobody-at-all", "DELETE", key)[0] == 404
        status, _, receipt = call(route, "DELETE", key, timeout=110)
        assert status == 200, receipt
        assert receipt["player"] == player and receipt["boards"] > 0
        assert receipt["profile"]["removed"] is True
        assert receipt["profile"]["record"]["topic"] == f"{topic}.profiles"
    assert not _boards_of(read_boards(redis_client, namespace), player)
    assert lb(["profiles", "show", player], cli).returncode == 1


def call(url: str, method: str, token: str | None = None, timeout: float = 10) -> Any:
    """``(status, headers, JSON body)`` of one request."""
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def _applied(client: RedisClient, namespace: str) -> list[int]:
    out = []
    for key in client.scan_iter(match=f"{namespace}:*:meta:stats"):
        stats = client.hgetall(key)
        out += [int(stats.get(name, 0)) for name in (b"applied", b"noop", b"duplicate")]
    return out


def _accepted(stream: Any) -> int:
    return sum(1 for rec in stream.records if rec.expected == "ok")


def test_erasures_mixed_in_a_stream_give_the_oracles_boards(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    stream = generate(seed=30, count=4000, erasures=0.01)
    assert sum(rec.expected == "erased" for rec in stream.records) > 10
    produce(kafka_bootstrap, topic, stream.records)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env["LB_WRITE_MAX_UPDATES"] = "40"  # erasures inside pieces, not only whole groups
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    expected, counts = oracle(stream.records)
    assert read_boards(redis_client, namespace) == expected
    stats = read_stats(redis_client, namespace)
    assert stats.get("applied", 0) + stats.get("noop", 0) == counts["accepted"]


# -- team boards ---------------------------------------------------------------------

TEAM_GAMES = (
    '[games."squad"]\nteams = "sum"\nmax_score = 1000\n'
    '[games."duo"]\nteams = "best"\nmax_score = 1000\n'
)
#: (player, team); p4 has no team.
MEMBERS = [("p1", "red"), ("p2", "red"), ("p3", "blue"), ("p5", "blue")]
#: Each player's one score per game (``best`` is the default operator): squad, duo.
SCORES = {"p1": (70, 90), "p2": (50, 40), "p3": (60, 30), "p4": (20, 10), "p5": (5, 80)}


@pytest.fixture
def teams_topic(kafka_bootstrap: str, topic: str) -> Iterator[str]:
    name = f"{topic}-teams"
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        with contextlib.suppress(Exception):  # best-effort cleanup
            future.result(timeout=30)


def _team_env(topic: str, teams_topic: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    games = tmp_path / "team-games.toml"
    games.write_text(TEAM_GAMES)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env["LB_TEAMS_TOPIC"] = teams_topic
    return env


def _team_top(env: dict[str, str], game: str) -> dict[str, int]:
    page = lb(["teams", "top", game, "--json", "--limit", "100"], env)
    assert page.returncode == 0, page.stderr
    return {e["teamId"]: e["score"] for e in json.loads(page.stdout)["entries"]}


def _members(env: dict[str, str], game: str, team: str) -> set[str]:
    page = lb(["teams", "members", game, team, "--json", "--limit", "100"], env)
    assert page.returncode == 0, page.stderr
    return {e["playerId"] for e in json.loads(page.stdout)["entries"]}


def _expected(without: str | None) -> dict[str, dict[str, int]]:
    """The all-time team boards of SCORES and MEMBERS (squad: sum, duo: best)."""
    out: dict[str, dict[str, int]] = {"squad": {}, "duo": {}}
    for player, team in MEMBERS:
        if player == without:
            continue
        squad, duo = SCORES[player]
        out["squad"][team] = out["squad"].get(team, 0) + squad
        out["duo"][team] = max(out["duo"].get(team, 0), duo)
    return out


def _teams_verified(env: dict[str, str]) -> None:
    verify = lb(["teams", "verify", "--json"], env, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["equal"] is True


def _forget_a_team_member(bootstrap: str, topic: str, env: dict[str, str]) -> None:
    """Scores, memberships and a profile; forget p1; the team boards and membership follow."""
    keyring, codec = parse_keyring(KEYS), ScoreEventCodec.from_registry()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    now = time.time_ns() // 1_000_000
    for player, scores in SCORES.items():
        for game, score in zip(("squad", "duo"), scores, strict=True):
            event = signed_event(
                keyring,
                "k1",
                event_id=f"{game}-{player}",
                game_id=game,
                player_id=player,
                score=score,
                ts_ms=now,
                kind=EventKind.SCORE,
            )
            producer.produce(topic, codec.encode(event, 1), player.encode(), timestamp=now)
    assert producer.flush(60) == 0
    for player, team in MEMBERS:
        joined = lb(["teams", "join", player, team], env, timeout=60)
        assert joined.returncode == 0, joined.stderr
    assert lb(["profiles", "set", "p1", "--name", "Ada"], env).returncode == 0
    for args in (["run", "--until-end"], ["teams", "run", "--until-end"]):
        done = lb(args, env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    assert {g: _team_top(env, g) for g in ("squad", "duo")} == _expected(None)
    assert _members(env, "squad", "red") == {"p1", "p2"}

    def between_the_jobs() -> None:
        # lb run applied the erasure, lb teams run not yet the tombstone: p1 still
        # belongs to red, but with no score left it is on no team board already.
        assert _members(env, "squad", "red") == {"p2"}
        assert _team_top(env, "squad")["red"] == SCORES["p2"][0]
        _teams_verified(env)

    def teams_run() -> None:
        done = lb(["teams", "run", "--until-end"], env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]

    receipt = _forget_beside_the_job(env, "p1", [], [between_the_jobs, teams_run])
    assert receipt["applied"] is True
    assert receipt["teams"]["removed"] == [
        {"game": "duo", "teamId": "red"},
        {"game": "squad", "teamId": "red"},
    ]
    assert receipt["teams"]["record"]["topic"] == env["LB_TEAMS_TOPIC"]
    assert receipt["profile"]["removed"] is True
    assert sorted(receipt["games"]) == ["duo", "squad"]

    def gone(how: str) -> None:
        assert {g: _team_top(env, g) for g in ("squad", "duo")} == _expected("p1"), how
        for game in ("squad", "duo"):
            assert _members(env, game, "red") == {"p2"}, (how, game)
            of = lb(["teams", "of", game, "p1", "--json"], env)
            assert json.loads(of.stdout)["teamId"] is None, (how, game)
        assert lb(["profiles", "show", "p1"], env).returncode == 1, how
        _teams_verified(env)

    gone("forgotten")
    # Replays bring nothing back: the boards and profiles rebuilt from the log (and the
    # team boards recomputed from them), and the whole membership topic read again.
    for how in (["rebuild", "--offline"], ["rebuild"]):
        rebuilt = lb(how, env, timeout=600)
        assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
        gone(" ".join(how))
    audit = lb(["verify", "--json", "--quiet"], env, timeout=300)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    assert json.loads(audit.stdout)["teams"]["equal"] is True
    # Forgetting p1 again finds nothing: no board, no profile, no team.
    again = lb(["forget", "p1"], env, timeout=60)
    assert again.returncode == 2 and "nothing to erase" in again.stderr


def test_forget_takes_a_member_out_of_the_team_boards_and_the_membership(
    kafka_bootstrap: str,
    topic: str,
    teams_topic: str,
    namespace: str,
    redis_client: RedisClient,
    tmp_path: Path,
) -> None:
    env = _team_env(topic, teams_topic, namespace, tmp_path)
    _forget_a_team_member(kafka_bootstrap, topic, env)
    # The membership topic read again from its start: the tombstone keeps p1 out.
    for game in ("squad", "duo"):
        redis_client.delete(TeamKeys(namespace, game).watermarks)
    again = lb(["teams", "run", "--until-end"], env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not redis_client.hexists(TeamKeys(namespace, "squad").membership, "p1")
    assert {g: _team_top(env, g) for g in ("squad", "duo")} == _expected("p1")
    _teams_verified(env)


@pytest.mark.cluster
def test_forget_takes_a_member_out_of_the_team_boards_on_a_redis_cluster(
    kafka_bootstrap: str,
    topic: str,
    teams_topic: str,
    namespace: str,
    cluster_client: Any,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    env = _team_env(topic, teams_topic, namespace, tmp_path)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1")
    _forget_a_team_member(kafka_bootstrap, topic, env)
    for game in ("squad", "duo"):
        cluster_client.delete(TeamKeys(namespace, game).watermarks)
    again = lb(["teams", "run", "--until-end"], env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not cluster_client.hexists(TeamKeys(namespace, "duo").membership, "p1")
    _teams_verified(env)
