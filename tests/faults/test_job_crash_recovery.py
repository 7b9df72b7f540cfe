"""Exactly-once effects under SIGKILL: the job is killed at random moments while
events arrive, restarted each time, and every board must equal the oracle.
Players' erasures are mixed in: a restart must neither lose one nor let a player
erased before a kill come back.

The stream's games include gtour's tournament with both caps: its seats and
attempt counts live in Redis beside the boards, so a kill between a batch's
write and its acknowledgement must neither admit a player twice nor count an
attempt twice (the oracle's board sums every counted attempt). v1 and v2
records share the topic, and each board entry's metadata must be that of the
event that set its value (written in the same atomic group write).

gbest also keeps a team board (``teams = "sum"``): membership records arrive
while the scores do, applied by ``lb teams run``, which is killed and restarted
with the job. The team boards, members sets and sums must then equal the
reference function of the last membership record per player and the boards
(which equal the oracle)."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from adapters.redis import RedisClient, text
from domain.signing import parse_keyring
from domain.teams import TeamAggregate, TeamKeys
from jobs.team_verify import verify_game
from schemas.membership import MembershipCodec, sign_membership
from tests.faults.harness import Job, board_bound, outcomes, verify, wait_for
from tests.integration.streams import (
    GAMES_TOML,
    KEYS,
    chunks,
    generate,
    job_env,
    lb,
    produce,
    read_stats,
)

TIMEOUT_S = 420

pytestmark = pytest.mark.timeout(TIMEOUT_S)

KILLS = 4
#: Each run of the job cuts group writes into pieces of another size (0: whole),
#: so kills land between pieces and a restart cuts the same batch differently;
#: and paces them otherwise (LB_WRITES_IN_FLIGHT: 1, 0 = all at once, 3), so a
#: kill also lands with pieces still waiting in the job.
BOUNDS = ("40", "1000", "0")
PACES = ("1", "0", "3")
#: gbest with a team board: its group writes carry the team part of every change.
TEAM_GAMES_TOML = GAMES_TOML.replace(
    '[games."gbest"]\noperator = "best"\n', '[games."gbest"]\noperator = "best"\nteams = "sum"\n'
)


def _memberships(rng: random.Random, count: int) -> list[tuple[str, str | None]]:
    """(player, team or None) records over the stream's players (p0000..p0149)."""
    teams = ["red", "blue", "green", "gold", "teal"]
    return [
        (f"p{rng.randrange(150):04d}", None if rng.random() < 0.1 else rng.choice(teams))
        for _ in range(count)
    ]


def _produce_memberships(bootstrap: str, topic: str, records: list[tuple[str, str | None]]) -> None:
    keyring, codec = parse_keyring(KEYS), MembershipCodec()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for player, team in records:
        value = codec.encode(sign_membership(keyring, "k1", player, team, 0))
        producer.produce(topic, key=player.encode(), value=value)
    assert producer.flush(60) == 0


def test_kill_9_at_random_moments_loses_and_doubles_nothing(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    seed = int(os.environ.get("LB_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed={seed}")
    games = tmp_path / "games.toml"
    games.write_text(TEAM_GAMES_TOML)
    # A third of the valid SCORE events are v2 records with metadata, some more v2
    # without it, v1 for the rest: verify() checks the boards' metadata too. A few
    # erasures in the mix: each must stay applied exactly where its partition's order
    # puts it, across the kills and restarts (the oracle erases the same way).
    stream = generate(seed=seed, count=30_000, metadata_ratio=0.3, erasures=0.002)
    teams_topic = f"{topic}-teams"
    env = {**job_env(topic, namespace, tmp_path / "state", games), "LB_TEAMS_TOPIC": teams_topic}
    memberships = _memberships(rng, 3000)
    started = lb(["teams", "run", "--until-end"], env, timeout=120)  # creates its topics
    assert started.returncode == 0, started.stderr[-2000:]

    def feed() -> None:
        for n, part in enumerate(chunks(stream.records, 1000)):
            produce(kafka_bootstrap, topic, part)
            _produce_memberships(kafka_bootstrap, teams_topic, memberships[n * 100 : n * 100 + 100])
            time.sleep(0.6)

    producer = threading.Thread(target=feed)
    producer.start()
    progress = []
    job: Job | None = None
    members_job: Job | None = None
    everything = board_bound(stream.records)
    try:
        for kill in range(KILLS):
            bound, pace = BOUNDS[kill % len(BOUNDS)], PACES[kill % len(PACES)]
            before = outcomes(redis_client, namespace)
            job = Job(
                {**env, "LB_WRITE_MAX_UPDATES": bound, "LB_WRITES_IN_FLIGHT": pace},
                tmp_path / "job.log",
            )
            members_job = Job(env, tmp_path / "teams.log", ("teams", "run"))
            # A random moment once this run applies records: its start-up alone
            # takes seconds, more on a loaded machine, and a kill before it only
            # tests the start.
            # The previous run may have applied every record before its kill (its
            # Bytewax snapshot lagging behind Redis): then this one only re-reads.
            wait_for(
                lambda b=before: outcomes(redis_client, namespace) > b or b >= everything,  # type: ignore[misc]
                90,
                "the restarted job applying records",
            )
            time.sleep(rng.uniform(0.0, 1.5))
            job.kill()
            members_job.kill()
            progress.append(outcomes(redis_client, namespace))
            if progress[-1] >= everything:
                break  # nothing left to interrupt
    finally:
        for running in (job, members_job):
            if running is not None and running.alive():
                running.kill()  # a failed wait must not leave a job running past the test
        producer.join(timeout=120)
    assert not producer.is_alive()
    # The kills really landed while records were being applied, not before or after.
    assert sum(1 for a, b in zip([0, *progress], progress, strict=False) if b > a) >= 2, progress
    assert progress[-1] < len(stream.records), progress

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    verify(stream.records, redis_client, namespace, kafka_bootstrap, topic, f"seed={seed}")
    try:
        _verify_teams(redis_client, namespace, env, memberships, f"seed={seed}")
    finally:
        _drop_topics(kafka_bootstrap, teams_topic)
    stats = read_stats(redis_client, namespace)
    # The tournament's caps were exercised (verify() compared them with the oracle's).
    assert stats.get("tournament_full", 0) > 0 and stats.get("attempts_used_up", 0) > 0, stats


def _verify_teams(
    client: RedisClient,
    namespace: str,
    env: dict[str, str],
    memberships: list[tuple[str, str | None]],
    context: str,
) -> None:
    """Membership = each player's last record; team state = the reference of it and the boards."""
    done = lb(["teams", "run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    keys = TeamKeys(namespace, "gbest")
    last: dict[str, str | None] = {}
    for player, team in memberships:
        last[player] = team
    raw: Any = client.hgetall(keys.membership)
    stored = {text(p): text(t) for p, t in raw.items()}
    assert stored == {p: t for p, t in last.items() if t}, context
    assert verify_game(client, keys, TeamAggregate.SUM) == [], context
    assert client.zcard(keys.board("alltime")) > 0, context


def _drop_topics(bootstrap: str, teams_topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([teams_topic, f"{teams_topic}.dlq"]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
