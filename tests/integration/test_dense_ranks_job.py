"""Dense ranks end to end: signed records in Kafka, the streaming job, Redis, ``lb`` and HTTP.

``lb produce`` writes a stream with many ties (scores 0..20), duplicates and
retracts for a dense-ranked game and a plain one; ``lb run --until-end``
applies it. The oracle sorts each board as Redis holds it and counts its
distinct scores: the counts the job kept, ``lb top/rank --rank-mode dense`` and
the HTTP routes must all equal it, and ``lb verify`` must find the counts equal
to the log's. A count then changed by hand is named by ``lb verify`` and put
right by ``lb rebuild`` (which cuts the counts over with their group), and a
board filled in by a bounded ``lb backfill`` comes with its counts. A dense
read of the plain game is one line and exit 2 on the CLI, a 400 over HTTP.
Standalone and on the cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.redis import text
from domain.games import GameCatalog
from domain.keys import GroupKeys
from tests.integration.api_server import job_api_settings, running_api
from tests.integration.streams import KEYS, job_env, lb

GAMES = """
[games."podium"]
max_score = 20
dense_ranks = true
[games."plainboard"]
max_score = 20
"""


def _board(client: Any, ns: str, game: str, window: str) -> dict[str, int]:
    key = GroupKeys(ns, game).board(window)
    return {text(m): int(c) for m, c in client.zrange(key, 0, -1, withscores=True)}


def _oracle(board: dict[str, int], slots: int) -> dict[str, int]:
    """Each player's dense rank: 1 + the distinct scores above theirs (sort + distinct)."""
    floors = sorted({c - c % slots for c in board.values()}, reverse=True)
    place = {floor: i + 1 for i, floor in enumerate(floors)}
    return {player: place[c - c % slots] for player, c in board.items()}


def _check(client: Any, ns: str, env: dict[str, str], api: str) -> None:
    catalog = GameCatalog.from_toml(GAMES)
    config = catalog.lookup("podium")
    assert config is not None
    slots = config.codec(config.window("alltime")).slots
    board = _board(client, ns, "podium", "alltime")
    assert len(board) > 20
    expected = _oracle(board, slots)
    assert len(set(expected.values())) < len(board)  # ties: dense differs from unique
    keys = GroupKeys(ns, "podium")
    counts = {text(k): int(v) for k, v in client.hgetall(keys.dense_counts("alltime")).items()}
    assert counts.pop("#") == len(board)
    assert counts == dict(Counter(str(c - c % slots) for c in board.values()))

    top = lb(["top", "podium", "--limit", "1000", "--rank-mode", "dense", "--json"], env)
    assert top.returncode == 0, top.stderr
    lines = json.loads(top.stdout)["entries"]
    assert {line["playerId"]: line["rank"] for line in lines} == expected
    player = lines[len(lines) // 2]["playerId"]
    rank = lb(["rank", "podium", player, "--rank-mode", "dense", "--json"], env)
    assert json.loads(rank.stdout)["rank"] == expected[player]

    page = httpx.get(f"{api}/v1/leaderboards/podium/top?limit=1000&rank_mode=dense").json()
    assert {e["playerId"]: e["rank"] for e in page["entries"]} == expected
    one = httpx.get(f"{api}/v1/leaderboards/podium/players/{player}?rank_mode=dense").json()
    assert one["rank"] == expected[player]
    near = httpx.get(
        f"{api}/v1/leaderboards/podium/players/{player}/neighbors?k=3&rank_mode=dense"
    ).json()
    for line in [*near["above"], near["player"], *near["below"]]:
        assert line["rank"] == expected[line["playerId"]]

    refused = httpx.get(f"{api}/v1/leaderboards/plainboard/top?rank_mode=dense")
    assert refused.status_code == 400
    assert "keeps no distinct-score counts" in refused.json()["error"]["message"]
    mistake = lb(["top", "plainboard", "--rank-mode", "dense"], env)
    assert mistake.returncode == 2
    assert len(mistake.stderr.strip().splitlines()) == 1, mistake.stderr
    assert "keeps no distinct-score counts" in mistake.stderr


def _run(
    env: dict[str, str], client: Any, ns: str, api_over: dict[str, Any], fill: bool = False
) -> None:
    produce = [
        "produce",
        "--games",
        "podium,plainboard",
        "--count",
        "3000",
        "--players",
        "120",
        "--max-score",
        "20",
        "--dup-ratio",
        "0.02",
        "--retract-ratio",
        "0.02",
        "--seed",
        "5",
        "--quiet",
    ]
    assert lb(produce, env).returncode == 0
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    settings = job_api_settings(env, ns, KEYS, **api_over)
    with running_api(settings) as api:
        _check(client, ns, env, api)
        verify = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        # A count that no longer matches the log: verify names it, a rebuild recounts it.
        podium = GroupKeys(ns, "podium")
        client.hincrby(podium.dense_counts("alltime"), "#", 1)
        client.zadd(podium.dense_scores("alltime"), {"1": 1})
        wrong = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert wrong.returncode == 1, wrong.stdout[-3000:] + wrong.stderr[-3000:]
        assert "meta:dense:n:alltime" in wrong.stdout
        assert "meta:dense:s:alltime" in wrong.stdout
        rebuilt = lb(["rebuild"], env, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
        _check(client, ns, env, api)
        again = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        if fill:
            _fill(client, ns, env)


def _fill(client: Any, ns: str, env: dict[str, str]) -> None:
    """A board the live group lacks, filled by a bounded backfill, comes with its counts."""
    podium = GroupKeys(ns, "podium")
    daily = sorted(w for w in map(text, client.smembers(podium.boards)) if w.startswith("daily:"))
    window = daily[-1]
    kept = _board(client, ns, "podium", window)
    client.delete(podium.board(window), podium.dense_counts(window), podium.dense_scores(window))
    args = ["backfill", "--game", "podium", "--from", "2020-01-01T00:00:00+00:00"]
    done = lb([*args, "--window", window], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _board(client, ns, "podium", window) == kept
    config = GameCatalog.from_toml(GAMES).lookup("podium")
    assert config is not None
    slots = config.codec(config.window(window)).slots
    counts = {text(k): int(v) for k, v in client.hgetall(podium.dense_counts(window)).items()}
    assert counts.pop("#") == len(kept)
    assert counts == dict(Counter(str(c - c % slots) for c in kept.values()))
    top = lb(
        ["top", "podium", "--window", window, "--limit", "1000", "--rank-mode", "dense", "--json"],
        env,
    )
    assert {e["playerId"]: e["rank"] for e in json.loads(top.stdout)["entries"]} == _oracle(
        kept, slots
    )


def _env(topic: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    return job_env(topic, namespace, tmp_path / "state", games)


def test_the_job_keeps_dense_ranks_exact_through_verify_and_rebuild(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: Any, tmp_path: Path
) -> None:
    _run(_env(topic, namespace, tmp_path), redis_client, namespace, {}, fill=True)


@pytest.mark.cluster
def test_the_same_on_a_redis_cluster(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    cluster_client: Any,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    env = _env(topic, namespace, tmp_path)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1", LB_WRITE_MAX_UPDATES="9")
    _run(env, cluster_client, namespace, {"redis_cluster": True})
