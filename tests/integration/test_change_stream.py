"""The job's change stream: every board write is announced, in order, exactly once.

Folding a game's change stream (the ``new`` score of each player's last change
on each board) must give exactly the boards the job wrote, and each change's
``old`` must be the previous change's ``new``: no write is missing, doubled or
out of order, so a live client that follows the stream stays in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.redis import RedisClient
from domain.games import GameCatalog
from domain.keys import GroupKeys
from tests.integration.streams import GAMES, GAMES_TOML, lb, read_boards, stream_and_env


def _changes(client: RedisClient, namespace: str, game: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    entries: list[Any] = client.xrange(GroupKeys(namespace, game).changes) or []
    for _, fields in entries:
        out += json.loads(fields[b"c"])
    return out


def test_folding_the_change_streams_gives_the_boards(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=11, count=3000)
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    catalog = GameCatalog.from_toml(GAMES_TOML)
    boards = read_boards(redis_client, namespace)
    for game in GAMES:
        config = catalog.lookup(game)
        assert config is not None
        folded: dict[tuple[str, str], str] = {}
        changes = _changes(redis_client, namespace, game)
        assert changes, game
        for change in changes:
            key = (change["w"], change["p"])
            if change["o"] and key in folded:
                assert change["o"] == folded[key], change
            assert set(change) == {"w", "p", "o", "n"}, change
            folded[key] = change["n"]
        expected = {
            (window, player): str(config.codec(config.window(window)).split(value)[0])
            for name, members in boards.items()
            if name.startswith(f"{game}:")
            for window in [name.split(":", 1)[1]]
            for player, value in members.items()
        }
        assert {key: new for key, new in folded.items() if new} == expected, game
