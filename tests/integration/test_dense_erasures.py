"""Dense-rank counts stay equal to the boards through erasures.

Every game of the mixed test stream is made dense-ranked; the stream carries
erasures (``lb forget`` records) among scores, duplicates and retracts. The job
applies it in small batches and pieces, so an erasure is often a group's first
record, or the only record of a group (it names no game: the group's rules come
from the catalog). After the run, each board's distinct-score counts must equal
a count of the board's own members' score floors (the hash ``floor -> members``
and the set of floors): an oracle independent of the planner, which ``lb
verify`` (a replay through the same planner) is not.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from adapters.redis import RedisClient, text
from domain.games import GameCatalog
from domain.keys import GroupKeys
from tests.integration.streams import (
    GAMES_TOML,
    generate,
    job_env,
    lb,
    produce,
    read_boards,
)


def _dense_toml() -> str:
    out = []
    for line in GAMES_TOML.splitlines():
        out.append(line)
        if line.startswith('[games."') and "." not in line.split('"')[2]:
            out.append("dense_ranks = true")
    return "\n".join(out) + "\n"


def _counts(client: RedisClient, namespace: str, catalog: GameCatalog) -> dict[str, object]:
    """Per board, (floor counts, floors) as the job kept them and as the board implies."""
    out: dict[str, object] = {}
    for name, board in read_boards(client, namespace).items():
        game, window = name.split(":", 1)
        config = catalog.lookup(game)
        assert config is not None
        slots = config.codec(config.window(window)).slots
        keys = GroupKeys(namespace, game)
        kept = {text(f): int(n) for f, n in client.hgetall(keys.dense_counts(window)).items()}
        kept.pop("#", None)
        floors = {text(m) for m in client.zrange(keys.dense_scores(window), 0, -1)}
        wanted = Counter(str(c - c % slots) for c in board.values())
        out[name] = (kept == dict(wanted), floors == set(wanted), len(kept), len(wanted))
    return out


def test_dense_counts_follow_erasures(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    toml = _dense_toml()
    games = tmp_path / "games.toml"
    games.write_text(toml)
    catalog = GameCatalog.from_toml(toml)
    stream = generate(seed=31, count=4000, erasures=0.02)
    produce(kafka_bootstrap, topic, stream.records)
    env = job_env(topic, namespace, tmp_path / "state", games)
    env.update(LB_WRITE_MAX_UPDATES="40", LB_BATCH_MAX="64")
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    result = _counts(redis_client, namespace, catalog)
    bad = {k: v for k, v in result.items() if not (v[0] and v[1])}  # type: ignore[index]
    assert len(result) > 100 and not bad, bad
    verify = lb(["verify", "--json", "--quiet"], env, timeout=300)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
