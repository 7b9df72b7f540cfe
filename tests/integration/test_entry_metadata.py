"""Schema v2 end to end: v1 and v2 records on one topic, entries keep their metadata.

Real Kafka records of both schema ids (v2 with and without metadata, and
some with too much of it) go through the streaming job into real Redis,
standalone and cluster; every board entry's metadata must be the oracle's
(that of the event that set its value), every read returns it with the
entry, ``lb verify`` compares it and ``lb rebuild`` restores it.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import RedisCluster
from websockets.sync.client import connect

from adapters.kafka import header_map
from adapters.redis import RedisClient
from domain.games import GameCatalog
from domain.keys import GroupKeys
from readers.boards import BoardReader
from tests.integration.live_events import GAME, best
from tests.integration.streams import (
    GAMES_TOML,
    Stream,
    generate,
    job_env,
    lb,
    oracle_with_metadata,
    produce,
    read_boards,
    read_dead_letters,
    read_metadata,
)
from tests.poll import poll

NOW_MS = 1_793_000_000_000  # the reads name explicit windows; "now" only picks defaults


def _stream(kafka_bootstrap: str, topic: str, tmp_path: Path, seed: int) -> tuple[Stream, Path]:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    stream = generate(seed=seed, count=4000, metadata_ratio=0.4)
    produce(kafka_bootstrap, topic, stream.records)
    ids = {r.value[1:5] for r in stream.records if r.expected == "ok"}
    assert ids == {(1).to_bytes(4, "big"), (2).to_bytes(4, "big")}, "both versions on the topic"
    return stream, games


def _fullest(metadata: dict[str, dict[str, str]], game: str) -> str:
    """The window id of ``game``'s board with the most entries carrying metadata."""
    key = max((k for k in metadata if k.startswith(f"{game}:")), key=lambda k: len(metadata[k]))
    return key.split(":", 1)[1]


def test_v1_and_v2_records_share_a_topic_and_every_read_returns_the_metadata(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, games = _stream(kafka_bootstrap, topic, tmp_path, seed=11)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env.update(LB_CACHE_PLAYERS="7", LB_WRITE_MAX_UPDATES="7")  # evictions, many pieces
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    boards, _, metadata = oracle_with_metadata(stream.records)
    assert read_boards(redis_client, namespace) == boards
    assert read_metadata(redis_client, namespace) == metadata
    assert sum(len(m) for m in metadata.values()) > 200
    letters = read_dead_letters(kafka_bootstrap, f"{topic}.dlq")
    too_large = [
        m for m in letters if header_map(m.headers())["error.code"] == "METADATA_TOO_LARGE"
    ]
    assert len(too_large) == sum(r.expected == "METADATA_TOO_LARGE" for r in stream.records) > 0

    reader = BoardReader(redis_client, GameCatalog.from_toml(GAMES_TOML), namespace)
    for game in ("gbest", "gset", "gincr"):
        window = _fullest(metadata, game)
        want = metadata[f"{game}:{window}"]
        page = reader.top(game, window, limit=200, now_ms=NOW_MS)
        assert page["entries"]
        for line in page["entries"]:
            assert line.get("metadata") == want.get(line["playerId"]), (game, line)
        player = sorted(want)[0]
        assert reader.rank(game, player, window, now_ms=NOW_MS).get("metadata") == want[player]
        around = reader.around(game, player, window, k=3, now_ms=NOW_MS)
        assert around["player"] is not None
        for line in [*around["above"], around["player"], *around["below"]]:
            assert line.get("metadata") == want.get(line["playerId"])
    tour = metadata.get("gtour:tournament:cup", {})
    for player, meta in list(tour.items())[:3]:
        (standing,) = reader.player_tournaments("gtour", player, now_ms=NOW_MS)["tournaments"]
        assert standing["metadata"] == meta

    # The CLI prints the same lines.
    window = _fullest(metadata, "gbest")
    shown = lb(["top", "gbest", "--window", window, "--limit", "50", "--json"], env)
    assert shown.returncode == 0, shown.stderr
    for line in json.loads(shown.stdout)["entries"]:
        assert line.get("metadata") == metadata[f"gbest:{window}"].get(line["playerId"])

    # lb verify compares the metadata too, and lb rebuild restores it.
    audit = lb(["verify", "--json"], env, timeout=300)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    player = sorted(metadata[f"gbest:{window}"])[0]
    meta_key = f"{namespace}:{{gbest}}:meta:entry:{window}"
    redis_client.hset(meta_key, player, "tampered")
    audit = lb(["verify", "--json"], env, timeout=300)
    assert audit.returncode == 1, audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    assert report["differences"] == {"wrong value": 1}
    (difference,) = report["examples"]
    assert difference["board"] == f"meta:entry:{window}" and difference["player"] == player
    assert difference["live"] == "tampered"
    assert difference["log"] == metadata[f"gbest:{window}"][player]
    rebuilt = lb(["rebuild"], env, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert read_metadata(redis_client, namespace) == metadata
    assert read_boards(redis_client, namespace) == boards


@pytest.mark.cluster
def test_a_redis_cluster_keeps_the_same_metadata(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    cluster_client: RedisCluster,
    cluster_services: list[str],
    tmp_path: Path,
) -> None:
    stream, games = _stream(kafka_bootstrap, topic, tmp_path, seed=12)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env.update(LB_REDIS_URL=cluster_services[0], LB_REDIS_CLUSTER="1", LB_WRITE_MAX_UPDATES="9")
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    boards, _, metadata = oracle_with_metadata(stream.records)
    got_boards: dict[str, dict[str, int]] = {}
    got: dict[str, dict[str, str]] = {}
    for node in cluster_client.get_primaries():
        conn = cluster_client.get_redis_connection(node)
        got_boards.update(read_boards(conn, namespace))
        got.update(read_metadata(conn, namespace))
    assert got_boards == boards
    assert got == metadata

    reader = BoardReader(cluster_client, GameCatalog.from_toml(GAMES_TOML), namespace)
    window = _fullest(metadata, "gtz")
    want = metadata[f"gtz:{window}"]
    for line in reader.top("gtz", window, limit=200, now_ms=NOW_MS)["entries"]:
        assert line.get("metadata") == want.get(line["playerId"])


def _get(base: str, path: str) -> Any:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200, response.read()
        return json.loads(response.read())
    finally:
        conn.close()


def test_http_answers_and_live_pushes_carry_the_metadata(
    live_job: Any,
    live_api: str,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
) -> None:
    ws_url = f"{live_api.replace('http://', 'ws://')}/v1/leaderboards/{GAME}/live?top=3&interval=50"
    with connect(ws_url, open_timeout=30) as ws:
        assert json.loads(ws.recv(timeout=10))["entries"] == []
        produce(kafka_bootstrap, topic, [best("p1", 10, metadata="car=red | Zoë"), best("p2", 20)])
        changes: dict[str, dict[str, Any]] = {}
        while True:
            page = json.loads(ws.recv(timeout=60))
            changes.update({c["playerId"]: c for c in page.get("changes", [])})
            if len(page["entries"]) == 2:
                break
    assert page["entries"] == [
        {"rank": 1, "playerId": "p2", "score": 20, "profile": None},
        {"rank": 2, "playerId": "p1", "score": 10, "metadata": "car=red | Zoë", "profile": None},
    ]
    if "p1" in changes:  # a reconnecting page may have folded the change into the page
        assert changes["p1"]["metadata"] == "car=red | Zoë"
    if "p2" in changes:
        assert "metadata" not in changes["p2"]

    base = f"/v1/leaderboards/{GAME}"
    top = _get(live_api, f"{base}/top?window=alltime&limit=5")
    assert top["entries"] == page["entries"]
    rank = _get(live_api, f"{base}/players/p1?window=alltime")
    assert (rank["score"], rank["metadata"]) == (10, "car=red | Zoë")
    around = _get(live_api, f"{base}/players/p2/neighbors?window=alltime&k=1")
    assert around["below"] == [page["entries"][1]] and "metadata" not in around["player"]

    # Not better: the entry keeps its score and metadata. Better, without metadata: none.
    produce(kafka_bootstrap, topic, [best("p1", 5, metadata="car=blue")])
    stats = GroupKeys(namespace, GAME).stats
    poll("the job to count the event", lambda: int(redis_client.hget(stats, "noop") or 0) == 1)
    assert _get(live_api, f"{base}/players/p1?window=alltime")["metadata"] == "car=red | Zoë"
    produce(kafka_bootstrap, topic, [best("p1", 30)])
    poll(
        "the better score",
        lambda: _get(live_api, f"{base}/players/p1?window=alltime")["score"] == 30,
    )
    assert "metadata" not in _get(live_api, f"{base}/players/p1?window=alltime")
