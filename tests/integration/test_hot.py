"""``lb hot`` and ``GET /v1/leaderboards/{game}/hot`` against exact counts of a real stream."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from adapters.redis import RedisClient
from domain.events import EventKind
from domain.games import GameCatalog
from readers.hot import HotReader
from tests.integration.streams import GAMES_TOML, lb, stream_and_env

DAY = "daily:2026-11-01"
START_MS = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
END_MS = START_MS + 86_400_000


def test_lb_hot_counts_the_periods_events_exactly_at_small_sizes(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=16, count=3000)
    counted = [
        r.event
        for r in stream.records
        if r.expected in ("ok", "duplicate")
        and r.event.kind is EventKind.SCORE
        and START_MS <= r.event.ts_ms < END_MS
    ]
    players = Counter(e.player_id for e in counted if e.game_id == "gbest")
    games = Counter(e.game_id for e in counted)

    done = lb(["hot", "gbest", "--window", DAY, "--limit", "1000", "--json", "--publish",
               "--player", "p0001"], env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    # Fewer distinct players than the sketch's counters: every count is exact.
    assert answer["window"] == DAY and answer["events"] == sum(players.values())
    assert {r["playerId"]: r["events"] for r in answer["players"]} == dict(players)
    assert {r["gameId"]: r["events"] for r in answer["games"]} == dict(games)
    assert answer["player"]["events"] >= players["p0001"]  # count-min never undercounts
    ranked = [r["events"] for r in answer["players"]]
    assert ranked == sorted(ranked, reverse=True)

    catalog = GameCatalog.from_toml(GAMES_TOML)
    published = HotReader(redis_client, catalog, namespace).hot("gbest", DAY, 5, now_ms=START_MS)
    assert published is not None
    assert published["players"] == answer["players"][:5]
    assert HotReader(redis_client, catalog, namespace).hot("gset", DAY, 5, now_ms=0) is None
