"""Erase a player: find them, produce the erasure record, wait for the projection, clean up.

What ``lb forget`` and ``DELETE /v1/players/{player}`` share. The erasure itself
is a record in the log (``domain.erasure``); the job applies it. This module
finds where the player is before (for the receipt, and to refuse a typo),
waits until every group that held the player has applied the record (its
watermark of the record's partition reached the record's offset) and no
longer holds them, then removes what the log does not produce: the player's
friend sets and their place in other players' friend sets, and the merged
top-K of sharded games (rewritten from the shards by the merger anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, text
from domain.erasure import Receipt, Removed, erasure_event_id, erasure_fields
from domain.errors import LeaderboardError, QueryError, ServiceError
from domain.games import GameCatalog
from domain.keys import GroupKeys, watermark_field
from domain.signing import Keyring, signed_event
from readers.games import glob_escape
from schemas.codec import ScoreEventCodec

#: How long to wait for the job by default, and how often to look.
WAIT_S = 60.0
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Presence:
    """Where a player is: board members per group, and friend-set keys."""

    boards: tuple[Removed, ...]
    own_friend_sets: tuple[str, ...]
    followed_in: tuple[str, ...]

    @property
    def tags(self) -> set[str]:
        return {item.tag for item in self.boards}

    def __bool__(self) -> bool:
        return bool(self.boards or self.own_friend_sets or self.followed_in)


@dataclass(frozen=True, slots=True)
class Position:
    """Where the erasure record landed."""

    topic: str
    partition: int
    offset: int
    event_id: str
    requested_ms: int


def _scan(client: RedisClient, pattern: str) -> list[str]:
    try:
        return sorted({text(raw) for raw in client.scan_iter(match=pattern, count=1000)})
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis scan failed: {exc}") from exc


def _game_of(tag: str) -> str:
    return tag.rsplit("/", 1)[0] if "/" in tag else tag


def _score(catalog: GameCatalog, game_id: str, window_id: str, composite: float) -> int | None:
    """The score a board value stands for (None when the game or window is not known now)."""
    game = catalog.lookup(game_id)
    if game is None:
        return None
    try:
        return game.codec(game.window(window_id)).split(composite)[0]
    except LeaderboardError:
        return None


def find(client: RedisClient, namespace: str, player: str, catalog: GameCatalog) -> Presence:
    """Every board (of every game and group) and friend set that holds ``player`` now."""
    prefix = glob_escape(namespace)
    boards: list[Removed] = []
    for registry in _scan(client, f"{prefix}:{{*}}:meta:boards"):
        tag = registry.split("{", 1)[1].split("}", 1)[0]
        keys = GroupKeys(namespace, tag)
        windows = sorted(text(w) for w in client.smembers(registry))
        if not windows:
            continue
        pipe = client.pipeline(transaction=False)
        for window in windows:
            pipe.zscore(keys.board(window), player)
        for window, score in zip(windows, pipe.execute(), strict=True):
            if score is not None:
                game = _game_of(tag)
                boards.append(Removed(game, tag, window, _score(catalog, game, window, score)))
    own: list[str] = []
    followed: list[str] = []
    for key in _scan(client, f"{prefix}:{{*}}:friends:*"):
        if key.endswith(f":friends:{player}"):
            own.append(key)
        elif client.sismember(key, player):
            followed.append(key)
    return Presence(tuple(boards), tuple(own), tuple(followed))


def produce(
    bootstrap: str,
    extra: dict[str, Any],
    topic: str,
    keyring: Keyring,
    key_id: str,
    player: str,
    now_ms: int,
    timeout_s: float = 30.0,
) -> Position:
    """Produce ``player``'s erasure record (keyed by the player) and wait for its offset."""
    game_id, kind, score = erasure_fields()
    event_id = erasure_event_id()
    event = signed_event(
        keyring,
        key_id,
        event_id=event_id,
        game_id=game_id,
        player_id=player,
        score=score,
        ts_ms=now_ms,
        kind=kind,
    )
    value = ScoreEventCodec.from_registry().encode(event, 1)
    got: list[Message] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            got.append(message)

    config = {
        **extra,
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
    }
    try:
        producer = Producer(config)
        producer.produce(topic, value, player.encode(), on_delivery=report, timestamp=now_ms)
        producer.flush(timeout_s)
    except KafkaException as exc:
        raise ServiceError(f"cannot produce the erasure record to {topic!r}: {exc}") from exc
    if errors:
        raise ServiceError(f"the erasure record was not delivered to {topic!r}: {errors[0].str()}")
    if not got:
        raise ServiceError(f"the erasure record was not acknowledged within {timeout_s:g} s")
    message = got[0]
    return Position(
        topic, int(message.partition() or 0), int(message.offset() or 0), event_id, now_ms
    )


def pending_groups(
    client: RedisClient, namespace: str, player: str, where: Position, tags: set[str]
) -> list[str]:
    """The groups that have not applied the erasure yet, or still hold the player."""
    field = watermark_field(where.topic, where.partition)
    waiting: list[str] = []
    for tag in sorted(tags):
        keys = GroupKeys(namespace, tag)
        stored = client.hget(keys.watermarks, field)
        if stored is None or int(stored) < where.offset:
            waiting.append(tag)
            continue
        windows = sorted(text(w) for w in client.smembers(keys.boards))
        pipe = client.pipeline(transaction=False)
        for window in windows:
            pipe.zscore(keys.board(window), player)
        if any(score is not None for score in pipe.execute()):
            waiting.append(tag)
    return waiting


def wait_applied(
    client: RedisClient,
    namespace: str,
    player: str,
    where: Position,
    tags: set[str],
    timeout_s: float,
    progress: Callable[[int, int], None],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait until every group in ``tags`` applied the erasure and holds the player no more."""
    deadline = clock() + timeout_s
    total = len(tags)
    while True:
        waiting = pending_groups(client, namespace, player, where, tags)
        progress(total - len(waiting), total)
        if not waiting:
            return
        if clock() >= deadline:
            raise QueryError(
                f"the erasure of {player!r} (record {where.topic}[{where.partition}]@"
                f"{where.offset}) was not applied within {timeout_s:g} s by group(s) "
                f"{', '.join(waiting[:8])}: is `lb run` running? The record stays in the log "
                "and takes effect when the job reads it; run `lb forget` again to wait"
            )
        time.sleep(POLL_S)


def remove_outside_log(
    client: RedisClient, namespace: str, player: str, found: Presence
) -> tuple[int, int]:
    """Remove what the log does not produce; (own friend sets deleted, follower sets left)."""
    for key in found.own_friend_sets:
        tag = key.split("{", 1)[1].split("}", 1)[0]
        keys = GroupKeys(namespace, tag)
        client.delete(key, keys.friends_board(player))
    for key in found.followed_in:
        tag = key.split("{", 1)[1].split("}", 1)[0]
        follower = key.rsplit(":friends:", 1)[1]
        client.srem(key, player)
        client.delete(GroupKeys(namespace, tag).friends_board(follower))
    for key in _scan(client, f"{glob_escape(namespace)}:{{*}}:top:*"):
        client.zrem(key, player)
    return len(found.own_friend_sets), len(found.followed_in)


def receipt(
    player: str, where: Position, found: Presence, done_ms: int | None, friends: tuple[int, int]
) -> Receipt:
    """The receipt of a finished erasure."""
    return Receipt(
        player=player,
        topic=where.topic,
        partition=where.partition,
        offset=where.offset,
        event_id=where.event_id,
        requested_ms=where.requested_ms,
        done_ms=done_ms,
        removed=found.boards,
        friend_sets=friends[0],
        followers=friends[1],
    )
