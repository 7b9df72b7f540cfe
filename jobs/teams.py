"""The membership job: the team-membership topic -> every team game's membership and boards.

Delivery guarantee: each record's effect lands exactly once per game (the
watermark in the membership write, :mod:`sinks.teams.store`); a refused record
goes to ``<topic>.dlq`` with its reason, **at least once** (a crash after the
letter and before the batch's Redis write repeats the letter when the batch is
re-read). Where it starts: per partition, after the lowest watermark the team
games hold, so Redis alone says how far the topic was applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from adapters.kafka import Tail, topic_offsets
from adapters.redis import RedisClient
from config.clients import quiet_kafka_config
from config.settings import Settings
from domain.errors import CodecError, ConfigError, ServiceError
from domain.games import GameConfig
from domain.keys import watermark_field
from domain.records import DeadLetter, RecordBatch
from domain.signing import Keyring
from domain.teams import TeamKeys
from schemas.membership import MembershipCodec, check
from sinks.dead_letters import letter_headers
from sinks.teams.store import apply_membership

log = logging.getLogger(__name__)


def team_games(games: Mapping[str, GameConfig]) -> dict[str, GameConfig]:
    """The games that keep team boards; a :class:`ConfigError` when there are none."""
    chosen = {g: c for g, c in games.items() if c.teams is not None}
    if not chosen:
        raise ConfigError(
            'no game has team boards: set teams = "sum", "best" or "avg" in a '
            '[games."<gameId>"] table of LB_GAMES'
        )
    return chosen


def check_batch(
    codec: MembershipCodec, keyring: Keyring, batch: RecordBatch
) -> tuple[list[tuple[int, str, str | None]], list[DeadLetter]]:
    """A batch's acceptable records as ``(offset, player, team or None)``, and its refused ones."""
    accepted: list[tuple[int, str, str | None]] = []
    dead: list[DeadLetter] = []
    for record in batch.records:
        try:
            player, team = check(codec, keyring, record.key, record.value)
        except CodecError as exc:
            dead.append(DeadLetter(batch.topic, batch.partition, record, exc.code, exc.detail))
            continue
        accepted.append((record.offset, player, team))
    return accepted, dead


@dataclass
class MembershipTotals:
    """What a run did, for its last line and the tests."""

    records: int = 0
    moved: int = 0
    dead: dict[str, int] = field(default_factory=dict)


class MembershipApplier:
    """Applies checked batches to every team game (one Lua call per game and piece)."""

    def __init__(
        self, client: RedisClient, namespace: str, games: Mapping[str, GameConfig], topic: str
    ) -> None:
        self._client = client
        self._topic = topic
        self._games = [(TeamKeys(namespace, g), c) for g, c in team_games(games).items()]

    def starts(self, partitions: Sequence[int]) -> dict[int, int]:
        """Per partition, the first offset some team game has not applied."""
        out: dict[int, int] = {}
        for p in partitions:
            name = watermark_field(self._topic, p)
            stored = [self._client.hget(keys.watermarks, name) for keys, _ in self._games]
            out[p] = min(-1 if v is None else int(v) for v in stored) + 1
        return out

    def apply(self, batch: RecordBatch, accepted: Sequence[tuple[int, str, str | None]]) -> int:
        """Write one checked batch to every team game; how many (game, player) moves it made."""
        if not batch.records:
            return 0
        name = watermark_field(batch.topic, batch.partition)
        through = batch.records[-1].offset
        moved = 0
        for keys, config in self._games:
            assert config.teams is not None
            moved += apply_membership(
                self._client,
                keys,
                config.teams,
                name,
                accepted,
                through,
                dense=config.dense_ranks,
            )
        return moved


#: Partitions of a membership topic ``lb teams`` creates (key = playerId).
MEMBERSHIP_PARTITIONS = 4


def ensure_membership_topic(settings: Settings) -> None:
    """Create the membership topic (compacted) and its ``.dlq`` when they are missing."""
    config = quiet_kafka_config(settings)
    admin = AdminClient(config)
    have = admin.list_topics(timeout=30).topics
    wanted = [
        NewTopic(
            settings.teams_topic,
            num_partitions=MEMBERSHIP_PARTITIONS,
            config={"cleanup.policy": "compact"},
        ),
        NewTopic(f"{settings.teams_topic}.dlq", num_partitions=MEMBERSHIP_PARTITIONS),
    ]
    missing = [topic for topic in wanted if topic.topic not in have]
    if not missing:
        return
    for name, future in admin.create_topics(missing).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise ServiceError(f"cannot create {name!r}: {exc}") from exc
    _wait_served(config, [topic.topic for topic in missing])


def _wait_served(config: Mapping[str, Any], names: Sequence[str], timeout_s: float = 30.0) -> None:
    """Until the offsets of every partition of ``names`` can be read.

    A created topic is served a moment later: first its metadata lacks leaders,
    then a leader named in it may still answer "not leader" for a while.
    """
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            try:
                topic_offsets(config, name)
                break
            except ServiceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _send_letters(producer: Producer, dlq_topic: str, letters: Sequence[DeadLetter]) -> None:
    for letter in letters:
        producer.produce(
            dlq_topic,
            value=letter.record.value,
            key=letter.record.key,
            headers=list(letter_headers(letter)),
        )
    if letters and producer.flush(30) > 0:
        raise ServiceError(f"dead letters to {dlq_topic!r} not acknowledged within 30 s")


def run_membership(
    kafka_config: Mapping[str, str],
    applier: MembershipApplier,
    codec: MembershipCodec,
    keyring: Keyring,
    topic: str,
    *,
    until_end: bool,
    stopping: Callable[[], bool] = lambda: False,
) -> MembershipTotals:
    """Read the membership topic from where Redis says and apply it (to its end, or on).

    Letters of a batch are acknowledged by Kafka before its Redis write.
    """
    _, ends = topic_offsets(kafka_config, topic)
    starts = applier.starts(sorted(ends))
    ranges = {p: (starts[p], ends[p]) for p in ends}
    tail = Tail(kafka_config, topic, ranges)
    producer = Producer({**kafka_config, "enable.idempotence": True, "linger.ms": 5})
    totals = MembershipTotals()
    try:
        while not stopping() and not (until_end and tail.past(ranges)):
            for batch in tail.poll(0.2):
                accepted, dead = check_batch(codec, keyring, batch)
                _send_letters(producer, f"{topic}.dlq", dead)
                totals.moved += applier.apply(batch, accepted)
                totals.records += len(batch.records)
                for letter in dead:
                    totals.dead[letter.code] = totals.dead.get(letter.code, 0) + 1
    finally:
        tail.close()
        producer.flush(10)
    return totals
