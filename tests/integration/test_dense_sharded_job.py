"""Dense ranks of a sharded game end to end: Kafka, the job, Redis, ``lb`` and HTTP.

``lb produce`` writes a stream with many ties (scores 0..20), duplicates and
retracts for a game split over four shards; ``lb run --until-end`` applies it.
The oracle takes every shard's board as Redis holds it, merges them and counts
the distinct scores: each shard's counts, the game-wide counts, ``lb top/rank
--rank-mode dense`` and the HTTP routes must all equal it, and ``lb verify``
must find the counts equal to the log's and to the shards'. Game-wide counts
then changed by hand are named by ``lb verify`` and recounted by ``lb
rebuild``. Standalone and on the cluster (where the shards and the game-wide
counts live on different masters).
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

SHARDS = 4
GAMES = f"""
[games."hotpodium"]
max_score = 20
dense_ranks = true
shards = {SHARDS}
"""


def _boards(client: Any, ns: str, window: str) -> list[dict[str, int]]:
    out = []
    for shard in range(SHARDS):
        key = GroupKeys(ns, f"hotpodium/{shard}").board(window)
        out.append({text(m): int(c) for m, c in client.zrange(key, 0, -1, withscores=True)})
    return out


def _counts(client: Any, keys: GroupKeys, window: str) -> dict[str, int]:
    return {text(k): int(v) for k, v in client.hgetall(keys.dense_counts(window)).items()}


def _expected(board: dict[str, int], slots: int) -> dict[str, int]:
    out = dict(Counter(str(c - c % slots) for c in board.values()))
    if board:
        out["#"] = len(board)
    return out


def _check(client: Any, ns: str, env: dict[str, str], api: str) -> None:
    config = GameCatalog.from_toml(GAMES).lookup("hotpodium")
    assert config is not None
    slots = config.codec(config.window("alltime")).slots
    shards = _boards(client, ns, "alltime")
    for shard, mine in enumerate(shards):
        assert mine, "every shard has players"
        assert _counts(client, GroupKeys(ns, f"hotpodium/{shard}"), "alltime") == _expected(
            mine, slots
        )
    board = {player: c for mine in shards for player, c in mine.items()}
    game = GroupKeys(ns, "hotpodium")
    assert _counts(client, game, "alltime") == _expected(board, slots)
    floors = sorted({c - c % slots for c in board.values()}, reverse=True)
    assert sorted(int(text(f)) for f in client.zrange(game.dense_scores("alltime"), 0, -1)) == (
        sorted(floors)
    )
    place = {floor: i + 1 for i, floor in enumerate(floors)}
    expected = {player: place[c - c % slots] for player, c in board.items()}
    assert len(set(expected.values())) < len(board)  # ties: dense differs from unique

    top = lb(["top", "hotpodium", "--limit", "1000", "--rank-mode", "dense", "--json"], env)
    assert top.returncode == 0, top.stderr
    lines = json.loads(top.stdout)["entries"]
    assert {line["playerId"]: line["rank"] for line in lines} == expected
    player = lines[len(lines) // 2]["playerId"]
    rank = lb(["rank", "hotpodium", player, "--rank-mode", "dense", "--json"], env)
    assert json.loads(rank.stdout)["rank"] == expected[player]

    page = httpx.get(f"{api}/v1/leaderboards/hotpodium/top?limit=1000&rank_mode=dense").json()
    assert {e["playerId"]: e["rank"] for e in page["entries"]} == expected
    one = httpx.get(f"{api}/v1/leaderboards/hotpodium/players/{player}?rank_mode=dense").json()
    assert one["rank"] == expected[player]
    near = httpx.get(
        f"{api}/v1/leaderboards/hotpodium/players/{player}/neighbors?k=3&rank_mode=dense"
    ).json()
    for line in [*near["above"], near["player"], *near["below"]]:
        assert line["rank"] == expected[line["playerId"]]


def _run(env: dict[str, str], client: Any, ns: str, api_over: dict[str, Any]) -> None:
    produce = [
        "produce",
        "--games",
        "hotpodium",
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
        "7",
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
        # Game-wide counts that no longer match the shards: verify names them,
        # a rebuild recounts them.
        game = GroupKeys(ns, "hotpodium")
        client.hincrby(game.dense_counts("alltime"), "#", 1)
        client.zadd(game.dense_scores("alltime"), {"1": 1})
        wrong = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert wrong.returncode == 1, wrong.stdout[-3000:] + wrong.stderr[-3000:]
        assert "meta:dense:n:alltime" in wrong.stdout
        assert "meta:dense:s:alltime" in wrong.stdout
        rebuilt = lb(["rebuild"], env, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
        _check(client, ns, env, api)
        again = lb(["verify", "--json", "--quiet"], env, timeout=300)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]


def _env(topic: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    return job_env(topic, namespace, tmp_path / "state", games)


def test_a_sharded_game_keeps_dense_ranks_exact_through_verify_and_rebuild(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: Any, tmp_path: Path
) -> None:
    _run(_env(topic, namespace, tmp_path), redis_client, namespace, {})


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
