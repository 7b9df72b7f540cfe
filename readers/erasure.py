"""Erase a player: find them, produce the erasure records, wait for the projection, clean up.

What ``lb forget`` and ``DELETE /v1/players/{player}`` share. The erasure itself
is in the logs: a signed record on the score topic (``domain.erasure``), and a
tombstone keyed by the player on each compacted topic that holds them (the
profiles topic, and the team-membership topic when a game keeps team boards).
The jobs apply them (``lb run`` the first two, ``lb teams run`` the third).
This module finds where the player is before (for the receipt, and to refuse a
typo), waits until every place that held the player has applied its record
(the watermark of the record's partition reached the record's offset) and no
longer holds them, then removes what no log produces: the player's friend
sets and their place in other players' friend sets, and the merged top-K of
sharded games (rewritten from the shards by the merger anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from redis.exceptions import RedisClusterException

from adapters.kafka import topic_partitions
from adapters.redis import RedisClient, text
from config.clients import quiet_kafka_config
from config.settings import Settings
from domain.erasure import Receipt, Removed, Tombstone, erasure_event_id, erasure_fields
from domain.errors import LeaderboardError, MissingTopic, QueryError, ServiceError
from domain.games import GameCatalog
from domain.keys import GroupKeys, watermark_field
from domain.profiles import ProfileKeys, bucket_of
from domain.signing import Keyring, signed_event
from domain.teams import TeamKeys
from readers.games import glob_escape
from schemas.codec import ScoreEventCodec

#: How long to wait for the job by default, and how often to look.
WAIT_S = 60.0
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Presence:
    """Where a player is: board members per group, friend-set keys, profile, teams."""

    boards: tuple[Removed, ...]
    own_friend_sets: tuple[str, ...]
    followed_in: tuple[str, ...]
    profile: bool = False
    #: (game, team) of every team game whose membership names the player.
    teams: tuple[tuple[str, str], ...] = ()

    @property
    def tags(self) -> set[str]:
        return {item.tag for item in self.boards}

    def __bool__(self) -> bool:
        return bool(
            self.boards or self.own_friend_sets or self.followed_in or self.profile or self.teams
        )


@dataclass(frozen=True, slots=True)
class Topics:
    """Where an erasure's records go.

    ``profiles`` is None when the profiles topic does not exist (no profile was
    ever produced, so there is none to erase); ``teams`` is None when no game
    keeps team boards (nothing reads the membership topic) or the topic does
    not exist (no membership was ever produced).
    """

    scores: str
    profiles: str | None
    teams: str | None


@dataclass(frozen=True, slots=True)
class Position:
    """Where the erasure's records landed: the score record and the tombstones."""

    topic: str
    partition: int
    offset: int
    event_id: str
    requested_ms: int
    profile: Tombstone | None = None
    teams: Tombstone | None = None


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
    profile = bool(client.hexists(ProfileKeys(namespace, bucket_of(player)).profiles, player))
    teams: list[tuple[str, str]] = []
    for game in sorted(catalog.team_games()):
        team = client.hget(TeamKeys(namespace, game).membership, player)
        if team is not None:
            teams.append((game, text(team)))
    return Presence(tuple(boards), tuple(own), tuple(followed), profile, tuple(teams))


def _exists(settings: Settings, topic: str) -> bool:
    try:
        topic_partitions(quiet_kafka_config(settings), topic, timeout_s=10)
    except MissingTopic:
        return False
    return True


def topics(settings: Settings, catalog: GameCatalog) -> Topics:
    """The topics an erasure writes to: a topic that does not exist holds nobody to erase."""
    profiles = settings.profiles_topic if _exists(settings, settings.profiles_topic) else None
    teams = None
    if catalog.team_games() and _exists(settings, settings.teams_topic):
        teams = settings.teams_topic
    return Topics(settings.topic, profiles, teams)


def _deliver(
    producer: Producer, topic: str, player: str, value: bytes | None, now_ms: int, timeout_s: float
) -> Message:
    """Produce one record keyed by ``player`` and wait for its acknowledgement."""
    got: list[Message] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            got.append(message)

    try:
        producer.produce(topic, value, player.encode(), on_delivery=report, timestamp=now_ms)
        producer.flush(timeout_s)
    except KafkaException as exc:
        raise ServiceError(f"cannot produce the erasure record to {topic!r}: {exc}") from exc
    if errors:
        raise ServiceError(f"the erasure record was not delivered to {topic!r}: {errors[0].str()}")
    if not got:
        raise ServiceError(
            f"the erasure record was not acknowledged by {topic!r} within {timeout_s:g} s"
        )
    return got[0]


def _tombstone(message: Message) -> Tombstone:
    return Tombstone(
        str(message.topic()), int(message.partition() or 0), int(message.offset() or 0)
    )


def produce(
    bootstrap: str,
    extra: dict[str, Any],
    topics: Topics,
    keyring: Keyring,
    key_id: str,
    player: str,
    now_ms: int,
    timeout_s: float = 30.0,
) -> Position:
    """Produce ``player``'s erasure record and tombstones (keyed by the player); where they are.

    The score record first, then the profile and membership tombstones: each
    is acknowledged before the next is sent.
    """
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
    config = {
        **extra,
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
    }
    try:
        producer = Producer(config)
    except KafkaException as exc:
        raise ServiceError(f"cannot produce the erasure record: {exc}") from exc
    message = _deliver(producer, topics.scores, player, value, now_ms, timeout_s)
    profile = teams = None
    if topics.profiles is not None:
        profile = _tombstone(_deliver(producer, topics.profiles, player, None, now_ms, timeout_s))
    if topics.teams is not None:
        teams = _tombstone(_deliver(producer, topics.teams, player, None, now_ms, timeout_s))
    return Position(
        topics.scores,
        int(message.partition() or 0),
        int(message.offset() or 0),
        event_id,
        now_ms,
        profile,
        teams,
    )


def _reached(stored: Any, offset: int) -> bool:
    return stored is not None and int(stored) >= offset


def pending_groups(
    client: RedisClient, namespace: str, player: str, where: Position, tags: set[str]
) -> list[str]:
    """The groups that have not applied the erasure yet, or still hold the player."""
    field = watermark_field(where.topic, where.partition)
    waiting: list[str] = []
    for tag in sorted(tags):
        keys = GroupKeys(namespace, tag)
        if not _reached(client.hget(keys.watermarks, field), where.offset):
            waiting.append(tag)
            continue
        windows = sorted(text(w) for w in client.smembers(keys.boards))
        pipe = client.pipeline(transaction=False)
        for window in windows:
            pipe.zscore(keys.board(window), player)
        if any(score is not None for score in pipe.execute()):
            waiting.append(tag)
    return waiting


def profile_pending(client: RedisClient, namespace: str, player: str, where: Position) -> bool:
    """Whether the player's profile bucket has not applied the tombstone, or still holds them."""
    if where.profile is None:
        return False
    keys = ProfileKeys(namespace, bucket_of(player))
    field = watermark_field(where.profile.topic, where.profile.partition)
    if not _reached(client.hget(keys.offsets, field), where.profile.offset):
        return True
    return bool(client.hexists(keys.profiles, player))


def teams_pending(
    client: RedisClient,
    namespace: str,
    player: str,
    where: Position,
    teams: Sequence[tuple[str, str]],
) -> list[str]:
    """The team games that have not applied the membership tombstone, or still list the player.

    Listed: the membership hash, and the members of the player's team on every
    window the game keeps team boards for.
    """
    if where.teams is None:
        return []
    field = watermark_field(where.teams.topic, where.teams.partition)
    waiting: list[str] = []
    for game, team in teams:
        keys = TeamKeys(namespace, game)
        windows = sorted(text(w) for w in client.hkeys(keys.slots))
        pipe = client.pipeline(transaction=False)
        pipe.hget(keys.watermarks, field)
        pipe.hexists(keys.membership, player)
        for window in windows:
            pipe.zscore(keys.members(window, team), player)
        stored, member, *scores = pipe.execute()
        if (
            not _reached(stored, where.teams.offset)
            or member
            or any(score is not None for score in scores)
        ):
            waiting.append(game)
    return waiting


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the erasure is: board groups, the profile and team games done, of how many."""

    groups: tuple[int, int]
    profile: tuple[int, int]
    teams: tuple[int, int]

    @property
    def done(self) -> bool:
        return all(d == t for d, t in (self.groups, self.profile, self.teams))

    def line(self) -> str:
        """``3/5 board group(s), 1/1 profile, 0/1 team membership(s)`` (what is awaited)."""
        parts = [f"{self.groups[0]}/{self.groups[1]} board group(s)"]
        if self.profile[1]:
            parts.append(f"{self.profile[0]}/{self.profile[1]} profile")
        if self.teams[1]:
            parts.append(f"{self.teams[0]}/{self.teams[1]} team membership(s)")
        return ", ".join(parts)


def wait_applied(
    client: RedisClient,
    namespace: str,
    player: str,
    where: Position,
    found: Presence,
    timeout_s: float,
    progress: Callable[[Progress], None],
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait until every place ``found`` names applied the erasure and holds the player no more.

    Board groups (``lb run``), the profile when the player had one (``lb run``),
    and each team game whose membership named the player (``lb teams run``).
    """
    deadline = clock() + timeout_s
    tags = found.tags
    profile = 1 if found.profile and where.profile is not None else 0
    teams = found.teams if where.teams is not None else ()
    while True:
        groups = pending_groups(client, namespace, player, where, tags)
        stale = profile and profile_pending(client, namespace, player, where)
        games = teams_pending(client, namespace, player, where, teams)
        state = Progress(
            (len(tags) - len(groups), len(tags)),
            (profile - int(bool(stale)), profile),
            (len(teams) - len(games), len(teams)),
        )
        progress(state)
        if state.done:
            return
        if clock() >= deadline:
            waiting = [*groups, *(["profile"] if stale else []), *(f"teams of {g}" for g in games)]
            raise QueryError(
                f"the erasure of {player!r} (record {where.topic}[{where.partition}]@"
                f"{where.offset}) was not applied within {timeout_s:g} s by "
                f"{', '.join(waiting[:8])}: is `lb run` running"
                f"{' (and `lb teams run`)' if games else ''}? The records stay in the logs "
                "and take effect when the jobs read them; run `lb forget` again to wait"
            )
        time.sleep(POLL_S)


def remove_outside_log(
    client: RedisClient, namespace: str, player: str, found: Presence, where: Position
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
    if found.profile and where.profile is None:  # no profiles topic left to carry a tombstone
        client.hdel(ProfileKeys(namespace, bucket_of(player)).profiles, player)
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
        profile=found.profile,
        profile_record=where.profile,
        teams=found.teams,
        teams_record=where.teams,
    )
