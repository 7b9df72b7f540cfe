"""A sharded game's game-wide dense counts under SIGKILL: exactly once, nothing left queued.

``lb produce`` writes a stream with many ties for a game split over four
shards, in parts while the job runs; ``lb run`` is killed (SIGKILL) at random
moments while it applies it, restarted each time with another piece size (so
kills land between a shard's write and the game-wide one, and restarts cut
batches differently), then run to the end. Then each shard's counts must equal
its board, the game-wide counts the merged board (every member counted once),
no change may be left queued, every dense rank read must equal the oracle's,
and ``lb verify`` must find nothing.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import text
from domain.games import GameCatalog
from domain.keys import GroupKeys
from readers.boards import BoardReader
from tests.faults.harness import Job, outcomes, wait_for
from tests.integration.streams import job_env, lb

pytestmark = pytest.mark.timeout(600)

SHARDS = 4
GAMES = f"""
[games."hotdense"]
max_score = 30
dense_ranks = true
shards = {SHARDS}
"""
KILLS = 4
BOUNDS = ("7", "1000", "0")
EVENTS = 12_000
PARTS = 12


def _floors(board: dict[str, int], slots: int) -> dict[str, int]:
    out = dict(Counter(str(c - c % slots) for c in board.values()))
    if board:
        out["#"] = len(board)
    return out


def _counts(client: Any, keys: GroupKeys) -> dict[str, int]:
    return {text(k): int(v) for k, v in client.hgetall(keys.dense_counts("alltime")).items()}


def test_kill_9_neither_loses_nor_doubles_a_game_wide_count(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: Any, tmp_path: Path
) -> None:
    seed = int(os.environ.get("LB_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    env = job_env(topic, namespace, tmp_path / "state", games)

    def feed() -> None:  # the records arrive while the job runs and is killed
        for part in range(PARTS):
            produce = ["produce", "--games", "hotdense", "--count", str(EVENTS // PARTS)]
            produce += ["--players", "400", "--max-score", "30", "--retract-ratio", "0.02"]
            assert lb([*produce, "--seed", str(seed + part), "--quiet"], env).returncode == 0
            time.sleep(0.5)

    feeder = threading.Thread(target=feed)
    feeder.start()
    job: Job | None = None
    progress: list[int] = []
    try:
        for kill in range(KILLS):
            before = outcomes(redis_client, namespace)
            job = Job({**env, "LB_WRITE_MAX_UPDATES": BOUNDS[kill % 3]}, tmp_path / "job.log")
            wait_for(
                lambda b=before: outcomes(redis_client, namespace) > b,  # type: ignore[misc]
                120,
                f"the restarted job applying records (seed={seed})",
            )
            time.sleep(rng.uniform(0.0, 1.0))
            job.kill()
            progress.append(outcomes(redis_client, namespace))
            if progress[-1] >= EVENTS:
                break
    finally:
        if job is not None and job.alive():
            job.kill()
        feeder.join(timeout=300)
    assert not feeder.is_alive()
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    config = GameCatalog.from_toml(GAMES).lookup("hotdense")
    assert config is not None
    slots = config.codec(config.window("alltime")).slots
    merged: dict[str, int] = {}
    for shard in range(SHARDS):
        keys = GroupKeys(namespace, f"hotdense/{shard}")
        board = {
            text(m): int(c)
            for m, c in redis_client.zrange(keys.board("alltime"), 0, -1, withscores=True)
        }
        assert _counts(redis_client, keys) == _floors(board, slots), f"seed={seed}"
        queued = redis_client.hgetall(keys.dense_outbox)
        assert not [f for f in queued if not text(f).endswith("@")], f"seed={seed}"
        merged.update(board)
    game = GroupKeys(namespace, "hotdense")
    assert _counts(redis_client, game) == _floors(merged, slots), f"seed={seed}"
    floors = sorted({c - c % slots for c in merged.values()}, reverse=True)
    place = {floor: i + 1 for i, floor in enumerate(floors)}
    catalog = GameCatalog.from_toml(GAMES)
    top = BoardReader(redis_client, catalog, namespace).top(
        "hotdense", "alltime", 1000, now_ms=int(time.time() * 1000), ranks="dense"
    )
    assert len(top["entries"]) == len(merged)
    for entry in top["entries"]:
        assert entry["rank"] == place[merged[entry["playerId"]] - merged[entry["playerId"]] % slots]
    verify = lb(["verify", "--json", "--quiet"], env, timeout=300)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    # The kills landed while records were being applied.
    assert any(0 < n < EVENTS for n in progress), (progress, f"seed={seed}")
