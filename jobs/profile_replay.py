"""Profiles replayed from the log: ``lb verify``'s audit and ``lb rebuild``'s replacement.

Both read every record the profiles topic holds now and judge each with the
job's own :class:`~domain.profile_batches.ProfileValidator`.

*Audit* (:func:`audit_profiles`, read-only). A bucket holds the effects of
exactly the records of each partition up to its stored watermark for that
partition (they change in one atomic call), so each bucket is read together
with its watermarks (one transaction: same hash tag) and compared with the
log folded up to those same offsets. A running job does not cause false
differences.

*Rebuild* (:func:`rebuild_profiles`). The log is written into staging buckets
(``<ns>~rebuild``, same hash tags) with the sink's own write, then each bucket
is swapped in by one Lua call (:data:`SWAP_BUCKET`): the staged profiles and
watermarks are renamed over the live ones. A live job whose next write finds a
watermark it did not write re-reads the partition from there
(:mod:`sinks.profiles`), so no record is lost or applied twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.cluster import RedisCluster

from adapters.kafka import read_topic, topic_partitions
from adapters.redis import RedisClient, Script, as_cluster, node_of, text
from domain.backoff import Backoff
from domain.errors import MissingTopic
from domain.keys import watermark_field
from domain.profile_batches import ProfileBatch, ProfileValidator
from domain.profiles import Profile, all_buckets, bucket_of, stored_profile
from domain.records import RecordBatch, SourceRecord
from domain.signing import Keyring
from schemas.profile_codec import ProfileCodec
from sinks.profiles import ProfileStore, encode_batch

#: Records per replayed batch (one bucket call each).
BATCH = 5000

#: KEYS: staged profiles, staged offsets, live profiles, live offsets. Renames the
#: staged keys over the live ones (a missing staged key removes the live one).
SWAP_BUCKET = Script(
    """
for i = 1, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 2])
  else
    redis.call('DEL', KEYS[i + 2])
  end
end
return 1
"""
)


def topic_exists(kafka_config: Mapping[str, Any], topic: str) -> bool:
    """Whether the profiles topic exists (``lb run`` or the first profile creates it)."""
    try:
        topic_partitions(kafka_config, topic, timeout_s=10)
    except MissingTopic:
        return False
    return True


def validator_of(keyring: Keyring) -> ProfileValidator:
    """The job's own checks of profile records."""
    return ProfileValidator(ProfileCodec.from_registry().decode, keyring)


def read_log(kafka_config: Mapping[str, Any], topic: str) -> dict[int, list[SourceRecord]]:
    """Every record the topic holds now, per partition, in offset order."""
    out: dict[int, list[SourceRecord]] = {p: [] for p in topic_partitions(kafka_config, topic)}
    for msg in read_topic(kafka_config, topic):
        out.setdefault(msg.partition() or 0, []).append(
            SourceRecord(msg.offset() or 0, msg.timestamp()[1], msg.key(), msg.value())
        )
    for records in out.values():
        records.sort(key=lambda record: record.offset)
    return out


def checked(
    validator: ProfileValidator, topic: str, log: Mapping[int, Sequence[SourceRecord]]
) -> list[ProfileBatch]:
    """The log as checked batches of at most :data:`BATCH` records."""
    return [
        validator.check_batch(RecordBatch(topic, partition, tuple(records[at : at + BATCH])))
        for partition, records in sorted(log.items())
        for at in range(0, len(records), BATCH)
    ]


@dataclass
class ProfileAudit:
    """What ``lb verify`` reports about profiles."""

    records: int = 0
    players: int = 0
    #: (player, live profile or None, log profile or None)
    differences: list[tuple[str, Profile | None, Profile | None]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences

    def as_dict(self, examples: int) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "records": self.records,
            "players": self.players,
            "differences": len(self.differences),
            "examples": [
                {"playerId": player, "live": live, "log": log}
                for player, live, log in self.differences[:examples]
            ],
        }


def _read_bucket(client: RedisClient, keys: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """A bucket's profiles and watermarks, read in one transaction (one slot)."""
    conn = (
        node_of(as_cluster(client), keys.profiles)[1]
        if isinstance(client, RedisCluster)
        else client
    )
    pipe = conn.pipeline(transaction=True)
    pipe.hgetall(keys.profiles)
    pipe.hgetall(keys.offsets)
    held, marks = pipe.execute()
    return (
        {text(k): v for k, v in held.items()},
        {text(k): int(text(v)) for k, v in marks.items()},
    )


def audit_profiles(
    client: RedisClient,
    kafka_config: Mapping[str, Any],
    topic: str,
    namespace: str,
    validator: ProfileValidator,
) -> ProfileAudit:
    """Every bucket against the log folded up to that bucket's watermarks."""
    log = read_log(kafka_config, topic)
    audit = ProfileAudit(records=sum(len(records) for records in log.values()))
    batches = checked(validator, topic, log)
    for keys in all_buckets(namespace):
        held, marks = _read_bucket(client, keys)
        expected: dict[str, Profile | None] = {}
        for batch in batches:
            through = marks.get(watermark_field(topic, batch.partition), -1)
            for change in batch.changes:
                if change.offset <= through and bucket_of(change.player_id) == keys.bucket:
                    expected[change.player_id] = change.profile
        live = {player: stored_profile(raw) for player, raw in held.items()}
        wanted = {player: doc for player, doc in expected.items() if doc is not None}
        audit.players += len(live)
        for player in sorted(set(live) | set(wanted)):
            if live.get(player) != wanted.get(player):
                audit.differences.append((player, live.get(player), wanted.get(player)))
    return audit


def rebuild_profiles(
    client: RedisClient,
    kafka_config: Mapping[str, Any],
    topic: str,
    namespace: str,
    validator: ProfileValidator,
    retry: Backoff,
) -> int:
    """Replay the whole topic into staging buckets and swap each in; records replayed."""
    staging = f"{namespace}~rebuild"
    store = ProfileStore(client, retry)
    for keys in all_buckets(staging):
        client.delete(keys.profiles)
        client.delete(keys.offsets)
    log = read_log(kafka_config, topic)
    for batch in checked(validator, topic, log):
        if batch.changes or batch.dead:
            store.apply(encode_batch(staging, batch, [None] * len(all_buckets(staging))))
    for staged, live in zip(all_buckets(staging), all_buckets(namespace), strict=True):
        SWAP_BUCKET(client, [staged.profiles, staged.offsets, live.profiles, live.offsets])
    return sum(len(records) for records in log.values())
