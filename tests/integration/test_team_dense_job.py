"""Dense team ranks end to end: Kafka, ``lb run``, ``lb teams run``, Redis, ``lb teams``, HTTP.

``lb produce`` writes score events with few distinct values (scores 0..5) for a
team game with ``dense_ranks = true`` and a team game without; membership
records put 40 players in 7 teams, so teams tie on their sums. After both jobs
caught up, the distinct-score counts of the team board must be the board's
(sort + distinct), and ``lb teams top/rank/around --rank-mode dense`` and the
HTTP routes must give the oracle's ranks, through a second round of joins and
leaves. ``lb teams verify`` and ``lb verify`` name counts changed by hand;
``lb teams resync``, ``lb rebuild`` and ``lb backfill`` leave them complete.
Dense reads of the game without counts, or of counts that miss teams, are one
line and exit 2 on the CLI and a 400 over HTTP. Standalone and on the cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.redis import text
from domain.keys import GroupKeys
from domain.teams import TeamKeys
from tests.integration.api_server import job_api_settings, running_api
from tests.integration.streams import KEYS, job_env, lb
from tests.integration.test_team_push import join

GAMES = """
[games."squad"]
teams = "sum"
dense_ranks = true
max_score = 5
[games."plainteam"]
teams = "sum"
max_score = 5
"""
PLAYERS = [f"p{i:07d}" for i in range(40)]


def _board(client: Any, keys: TeamKeys, window: str) -> dict[str, float]:
    return {text(t): float(s) for t, s in client.zrange(keys.board(window), 0, -1, withscores=True)}


def _oracle(board: dict[str, float]) -> dict[str, int]:
    """Each team's dense rank: 1 + the distinct sums above its own (sort + distinct)."""
    values = sorted(set(board.values()), reverse=True)
    return {team: values.index(score) + 1 for team, score in board.items()}


def _counts(client: Any, keys: TeamKeys, board: dict[str, float], window: str) -> None:
    """The distinct-score counts beside the team board are exactly the board's."""
    counts = {text(k): int(v) for k, v in client.hgetall(keys.dense_counts(window)).items()}
    assert counts.pop("#") == len(board)
    assert {float(v): n for v, n in counts.items()} == dict(Counter(board.values()))
    present = {
        float(s) for _, s in client.zrange(keys.dense_values(window), 0, -1, withscores=True)
    }
    assert present == set(board.values())


def _check(client: Any, ns: str, env: dict[str, str], api: str) -> None:
    keys = TeamKeys(ns, "squad")
    board = _board(client, keys, "alltime")
    expected = _oracle(board)
    assert 1 < len(set(expected.values())) < len(board)  # ties: dense differs from unique
    _counts(client, keys, board, "alltime")

    top = lb(["teams", "top", "squad", "--limit", "100", "--rank-mode", "dense", "--json"], env)
    assert top.returncode == 0, top.stderr
    assert {e["teamId"]: e["rank"] for e in json.loads(top.stdout)["entries"]} == expected
    team = sorted(board, key=lambda t: board[t])[0]  # the lowest: ranked after every tie
    rank = lb(["teams", "rank", "squad", team, "--rank-mode", "dense", "--json"], env)
    assert json.loads(rank.stdout)["rank"] == expected[team]
    around = lb(["teams", "around", "squad", team, "--k", "3", "--rank-mode", "dense"], env)
    assert around.returncode == 0, around.stderr
    assert f"> {expected[team]:>4}  {team}" in around.stdout

    base = f"{api}/v1/leaderboards/squad/teams"
    page = httpx.get(f"{base}?limit=100&rank_mode=dense").json()
    assert {e["teamId"]: e["rank"] for e in page["entries"]} == expected
    assert httpx.get(f"{base}/{team}?rank_mode=dense").json()["rank"] == expected[team]
    near = httpx.get(f"{base}/{team}/around?k=2&rank_mode=dense").json()
    for line in [*near["above"], near["team"], *near["below"]]:
        assert line["rank"] == expected[line["teamId"]]
    competition = httpx.get(f"{base}?limit=100&rank_mode=competition").json()["entries"]
    assert [e["rank"] for e in competition] == [
        1 + sum(1 for v in board.values() if v > e["score"]) for e in competition
    ]


def _refusals(client: Any, ns: str, env: dict[str, str], api: str) -> None:
    """No counts (the plain game), or counts that miss teams: refused, never guessed."""
    refused = httpx.get(f"{api}/v1/leaderboards/plainteam/teams?rank_mode=dense")
    assert refused.status_code == 400
    assert "keeps no distinct-score counts" in refused.json()["error"]["message"]
    mistake = lb(["teams", "top", "plainteam", "--rank-mode", "dense"], env)
    assert mistake.returncode == 2
    assert len(mistake.stderr.strip().splitlines()) == 1, mistake.stderr
    assert "keeps no distinct-score counts" in mistake.stderr
    keys = TeamKeys(ns, "squad")
    client.delete(keys.dense_counts("alltime"), keys.dense_values("alltime"))  # as if they predate
    missing = httpx.get(f"{api}/v1/leaderboards/squad/teams/t0?rank_mode=dense")
    assert missing.status_code == 400
    assert "incomplete distinct-score counts" in missing.json()["error"]["message"]
    partial = lb(["teams", "rank", "squad", "t0", "--rank-mode", "dense"], env)
    assert partial.returncode == 2 and "lb teams resync" in partial.stderr, partial.stderr
    verify = lb(["teams", "verify", "--json"], env)
    assert verify.returncode == 1 and "dense counts alltime" in verify.stdout, verify.stdout
    assert lb(["teams", "resync", "--game", "squad"], env).returncode == 0
    assert lb(["teams", "verify"], env).returncode == 0


def _run(env: dict[str, str], client: Any, ns: str, api_over: dict[str, Any]) -> None:
    produce = ["produce", "--games", "squad,plainteam", "--count", "800", "--players", "40"]
    done = lb([*produce, "--max-score", "5", "--seed", "7", "--quiet"], env)
    assert done.returncode == 0, done.stderr
    # lb teams creates the membership topic (compacted) when it is missing.
    assert lb(["teams", "run", "--until-end"], env, timeout=300).returncode == 0
    join(
        env["LB_KAFKA_BOOTSTRAP"],
        env["LB_TEAMS_TOPIC"],
        [(p, f"t{i % 7}") for i, p in enumerate(PLAYERS)],
    )
    for args in (["run", "--until-end"], ["teams", "run", "--until-end"]):
        done = lb(args, env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    settings = job_api_settings(env, ns, KEYS, **api_over)
    with running_api(settings) as api:
        _check(client, ns, env, api)
        # Joins and leaves move teams between sums: the counts follow in the same write.
        moves = [(PLAYERS[0], None), (PLAYERS[1], "t6"), (PLAYERS[2], "t6"), (PLAYERS[3], "t9")]
        join(env["LB_KAFKA_BOOTSTRAP"], env["LB_TEAMS_TOPIC"], moves)
        assert lb(["teams", "run", "--until-end"], env, timeout=300).returncode == 0
        _check(client, ns, env, api)
        _refusals(client, ns, env, api)
        verify = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        assert json.loads(verify.stdout)["teams"]["equal"] is True
        # A count changed by hand: lb verify names it, lb rebuild recounts it.
        keys = TeamKeys(ns, "squad")
        client.hincrby(keys.dense_counts("alltime"), "#", 1)
        wrong = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert wrong.returncode == 1 and "dense counts alltime" in wrong.stdout, wrong.stdout
        rebuilt = lb(["rebuild"], env, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
        _check(client, ns, env, api)
        _fill(client, ns, env)


def _fill(client: Any, ns: str, env: dict[str, str]) -> None:
    """A daily board filled in by a bounded backfill comes with its team counts."""
    group, keys = GroupKeys(ns, "squad"), TeamKeys(ns, "squad")
    daily = sorted(w for w in map(text, client.smembers(group.boards)) if w.startswith("daily:"))
    window = daily[-1]
    kept = _board(client, keys, window)
    client.delete(group.board(window), keys.dense_counts(window), keys.dense_values(window))
    args = ["backfill", "--game", "squad", "--from", "2020-01-01T00:00:00+00:00"]
    done = lb([*args, "--window", window], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _board(client, keys, window) == kept
    _counts(client, keys, kept, window)
    assert lb(["teams", "verify"], env).returncode == 0


def _env(topic: str, teams_topic: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    return {**job_env(topic, namespace, tmp_path / "state", games), "LB_TEAMS_TOPIC": teams_topic}


def test_team_dense_ranks_through_both_jobs_the_cli_and_http(
    topic: str, teams_topic: str, namespace: str, redis_client: Any, tmp_path: Path
) -> None:
    _run(_env(topic, teams_topic, namespace, tmp_path), redis_client, namespace, {})


@pytest.mark.cluster
def test_the_same_on_a_redis_cluster(
    topic: str,
    teams_topic: str,
    namespace: str,
    cluster_client: Any,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    env = _env(topic, teams_topic, namespace, tmp_path)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1")
    _run(env, cluster_client, namespace, {"redis_cluster": True})
