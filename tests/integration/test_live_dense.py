"""Live pushes numbered in ``rank_mode`` (competition, dense) on a board with many ties.

The real job tails the test's topic for a game with ``dense_ranks``; pushed
pages and the followed player's rank must carry the ranks an oracle counts
from what was produced (strictly better players; distinct better scores).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.integration.api_server import api_settings, running_api
from tests.integration.live_events import best
from tests.integration.streams import KEYS, job_env, produce
from tests.integration.test_team_push import tailing
from tests.poll import Deadline

GAME = "gdense"
GAMES_TOML = (
    f'[games."{GAME}"]\noperator = "best"\ndense_ranks = true\nmax_score = 1000000\n'
    '[games."gplain"]\noperator = "best"\nmax_score = 1000000\n'
)


def settled(ws: ClientConnection, players: int, me: str, want: int) -> tuple[Any, Any]:
    """The newest page once it holds ``players`` entries and the newest rank is ``want``."""
    deadline = Deadline(f"a page of {players} and {me} at rank {want}", 120)
    newest: dict[str, dict[str, Any]] = {}
    while True:
        message: dict[str, Any] = json.loads(ws.recv(timeout=deadline.left()))
        newest[message["type"]] = message
        page, rank = newest.get("top"), newest.get("rank")
        if page and len(page["entries"]) == players and rank and rank["rank"] == want:
            return page, rank


def test_pushed_pages_and_ranks_are_numbered_in_the_rank_mode_asked(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games)
    rng = random.Random(26)
    scores = {f"p{i:02d}": rng.choice([10, 20, 30, 40, 50]) for i in range(30)}
    me = "p07"
    # The oracle: board order is score desc; ties share a rank in both modes.
    distinct = sorted(set(scores.values()), reverse=True)
    dense = {p: 1 + distinct.index(s) for p, s in scores.items()}
    competition = {p: 1 + sum(1 for o in scores.values() if o > s) for p, s in scores.items()}
    with tailing(["run"], env, tmp_path / "job.log"), running_api(settings) as api:
        base = f"{api.replace('http://', 'ws://')}/v1/leaderboards/{GAME}/live"
        query = f"top=30&playerId={me}&interval=50"
        with (
            connect(f"{base}?{query}&rank_mode=dense", open_timeout=30) as dense_ws,
            connect(f"{base}?{query}&rank_mode=competition", open_timeout=30) as comp_ws,
        ):
            produce(kafka_bootstrap, topic, [best(p, s, GAME) for p, s in scores.items()])
            for ws, oracle in ((dense_ws, dense), (comp_ws, competition)):
                page, rank = settled(ws, len(scores), me, oracle[me])
                assert {e["playerId"]: e["rank"] for e in page["entries"]} == oracle
                assert rank["score"] == scores[me]
        # A game without distinct-score counts is refused, as GET refuses it.
        with connect(base.replace(GAME, "gplain") + "?rank_mode=dense") as ws:
            refused = json.loads(ws.recv(timeout=10))
            assert refused["type"] == "error" and "dense_ranks" in refused["error"]["message"]
