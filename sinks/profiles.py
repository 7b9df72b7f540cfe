"""Bytewax output: checked profile batches -> the profile buckets in Redis.

Delivery guarantee: **exactly once per record and bucket**, across crashes,
restarts and Redis losing writes, by the same rule as the boards: each of a
partition's batches becomes one atomic Lua call per bucket
(:data:`APPLY_PROFILES`) that applies only the records after the bucket's
stored offset watermark for that partition and writes the new watermark in
the same call. Every batch writes every bucket's watermark (most of them
without a change), so a bucket missing a watermark the others have lost its
writes, and a restart resumes each partition from the lowest ``stored + 1``
(:class:`ResumeProfiles`).

While running, each call also carries the watermark this worker last wrote
there; Redis refuses a call whose stored watermark differs (it lost writes,
or a rebuild replaced the bucket), answers what it holds, and the sink asks the
source to re-read the partition from there (:class:`~domain.rewinds.Rewinds`),
dropping the batches already on their way. Nothing is applied across a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from redis.cluster import RedisCluster

from adapters.redis import RedisClient, Script, as_cluster, node_of, text_of
from domain.backoff import Backoff
from domain.errors import RetryBudgetExceeded, ServiceError, StopRequested
from domain.keys import watermark_field
from domain.profile_batches import ProfileBatch, ProfileChange
from domain.profiles import BUCKETS, ProfileKeys, all_buckets, bucket_of, stored_bytes
from domain.rewinds import Rewinds
from sinks.boards.store import PERMANENT, TRANSIENT, connect
from sinks.retry import abandon, call_with_retry, give_up

log = logging.getLogger(__name__)

#: KEYS[1] a bucket's profiles, KEYS[2] its offsets; ARGV[1] the partition's field,
#: ARGV[2] the watermark the writer believes is stored ('' = not known yet),
#: ARGV[3] the batch's last offset, then (offset, playerId, profile JSON or '') triples.
#: Returns {1, last} applied, {0, stored} already applied, {-1, stored} refused.
APPLY_PROFILES = Script(
    """
local stored = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= stored then return {-1, stored} end
local last = tonumber(ARGV[3])
if stored >= last then return {0, stored} end
for i = 4, #ARGV, 3 do
  if tonumber(ARGV[i]) > stored then
    if ARGV[i + 2] == '' then
      redis.call('HDEL', KEYS[1], ARGV[i + 1])
    else
      redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[i + 2])
    end
  end
end
redis.call('HSET', KEYS[2], ARGV[1], last)
return {1, last}
"""
)

#: One bucket's call: its keys and arguments.
Call = tuple[list[str], list[Any]]


def encode_batch(namespace: str, batch: ProfileBatch, beliefs: Sequence[int | None]) -> list[Call]:
    """One call per bucket for ``batch`` (every bucket: each carries the new watermark)."""
    per_bucket: list[list[ProfileChange]] = [[] for _ in range(BUCKETS)]
    for change in batch.changes:
        per_bucket[bucket_of(change.player_id)].append(change)
    wm_field = watermark_field(batch.topic, batch.partition)
    calls: list[Call] = []
    for keys, changes, belief in zip(all_buckets(namespace), per_bucket, beliefs, strict=True):
        args: list[Any] = [wm_field, "" if belief is None else belief, batch.last_offset]
        for change in changes:
            value = b"" if change.profile is None else stored_bytes(change.profile)
            args += [change.offset, change.player_id, value]
        calls.append(([keys.profiles, keys.offsets], args))
    return calls


class ProfileStore:
    """Runs bucket calls in one round trip (one per master on a cluster), retried."""

    def __init__(
        self, client: RedisClient, retry: Backoff, stopping: Callable[[], bool] = lambda: False
    ) -> None:
        self._client = client
        self._retry = retry
        self._stopping = stopping

    def _round_trip(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call_with_retry(
                call,
                what=what,
                policy=self._retry,
                transient=TRANSIENT,
                permanent=PERMANENT,
                setting="LB_REDIS_RETRY_S",
                stopping=self._stopping,
            )
        except StopRequested as exc:
            abandon(exc)
        except RetryBudgetExceeded as exc:
            give_up(exc)
        except redis.RedisError as exc:
            raise ServiceError(f"{what} failed: {exc}") from exc

    def apply(self, calls: Sequence[Call]) -> list[tuple[int, int]]:
        """``(outcome, watermark)`` per call, in order (see :data:`APPLY_PROFILES`)."""
        replies = self._round_trip("Redis profile write", lambda: self._send(calls))
        return [(int(outcome), int(mark)) for outcome, mark in replies]

    def read_watermarks(self, topic: str, partition: int, namespace: str) -> list[int | None]:
        """Each bucket's stored watermark of one partition (None: absent)."""
        wm_field = watermark_field(topic, partition)

        def attempt() -> list[Any]:
            if isinstance(self._client, RedisCluster):
                return [self._client.hget(k.offsets, wm_field) for k in all_buckets(namespace)]
            pipe = self._client.pipeline(transaction=False)
            for keys in all_buckets(namespace):
                pipe.hget(keys.offsets, wm_field)
            return list(pipe.execute())

        raw = self._round_trip("Redis profile watermarks read", attempt)
        return [None if value is None else int(text_of(value)) for value in raw]

    def _send(self, calls: Sequence[Call]) -> list[Any]:
        if not isinstance(self._client, RedisCluster):
            return _pipelined(self._client, calls)
        cluster = as_cluster(self._client)
        by_node: dict[str, tuple[redis.Redis, list[int]]] = {}
        for index, (keys, _args) in enumerate(calls):
            name, conn = node_of(cluster, keys[0])
            by_node.setdefault(name, (conn, []))[1].append(index)
        out: list[Any] = [None] * len(calls)
        for conn, indexes in by_node.values():
            for index, reply in zip(
                indexes, _pipelined(conn, [calls[i] for i in indexes]), strict=True
            ):
                out[index] = reply
        return out


def _pipelined(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    script = APPLY_PROFILES.registered(client)
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        script(keys=keys, args=args, client=pipe)
    return list(pipe.execute())


class ProfilePartition(StatelessSinkPartition[ProfileBatch]):
    """One worker's writer: its partitions' beliefs and generations."""

    def __init__(self, store: ProfileStore, namespace: str, rewinds: Rewinds) -> None:
        self._store = store
        self._namespace = namespace
        self._rewinds = rewinds
        #: (topic, partition) -> the watermark this worker last saw per bucket.
        self._beliefs: dict[tuple[str, int], list[int | None]] = {}
        #: (topic, partition) -> the generation batches must carry (older: dropped).
        self._generation: dict[tuple[str, int], int] = {}

    def write_batch(self, items: Sequence[ProfileBatch]) -> None:
        for batch in items:
            if batch.changes or batch.dead:
                self._write(batch)

    def _write(self, batch: ProfileBatch) -> None:
        key = (batch.topic, batch.partition)
        if batch.generation < self._generation.get(key, 0):
            return  # read before a rewind: the re-read brings these records again
        beliefs = self._beliefs.setdefault(key, [None] * BUCKETS)
        replies = self._store.apply(encode_batch(self._namespace, batch, beliefs))
        rewind: int | None = None
        for bucket, (outcome, mark) in enumerate(replies):
            beliefs[bucket] = mark
            if outcome < 0 and mark < batch.last_offset:
                rewind = mark + 1 if rewind is None else min(rewind, mark + 1)
        if rewind is not None:
            log.warning(
                "%s[%d]: Redis holds fewer profile records than this worker wrote: "
                "re-reading from offset %d",
                batch.topic,
                batch.partition,
                rewind,
            )
            self._generation[key] = self._rewinds.request(batch.topic, batch.partition, rewind)


class RedisProfileSink(DynamicSink[ProfileBatch]):
    """Each worker projects the profile partitions it reads (keyed by player: one owner)."""

    def __init__(
        self,
        client_factory: Callable[[], RedisClient],
        namespace: str,
        retry: Backoff,
        rewinds: Rewinds,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self._client_factory = client_factory
        self._namespace = namespace
        self._retry = retry
        self._rewinds = rewinds
        self._stopping = stopping

    def build(self, step_id: str, worker_index: int, worker_count: int) -> ProfilePartition:
        """Connect (waiting under the retry budget) and ping."""
        client = connect(self._client_factory, self._retry, self._stopping)
        store = ProfileStore(client, self._retry, self._stopping)
        return ProfilePartition(store, self._namespace, self._rewinds)


class ResumeProfiles:
    """Where a profiles partition starts: its snapshot, or earlier if Redis lost writes.

    Without a snapshot it starts from the beginning (the dead letters are
    Bytewax's to know), as the score topic does.
    """

    def __init__(
        self, client_factory: Callable[[], RedisClient], namespace: str, retry: Backoff
    ) -> None:
        self._client_factory = client_factory
        self._namespace = namespace
        self._retry = retry

    def __call__(self, topic: str, partition: int, snapshot: int | None) -> int | None:
        if snapshot is None:
            return None
        client = connect(self._client_factory, self._retry)
        try:
            stored = ProfileStore(client, self._retry).read_watermarks(
                topic, partition, self._namespace
            )
        finally:
            client.close()
        return resume_offset(snapshot, stored)


def resume_offset(snapshot: int, stored: Sequence[int | None]) -> int:
    """The lowest of the snapshot and every bucket's ``stored + 1`` (absent: 0).

    When no bucket holds a watermark the partition was never written: the snapshot
    holds (an empty partition, or one whose batches were all ticks).
    """
    if all(mark is None for mark in stored):
        return 0 if snapshot > 0 else snapshot
    return min([snapshot, *((-1 if mark is None else mark) + 1 for mark in stored)])


__all__ = [
    "APPLY_PROFILES",
    "ProfileKeys",
    "ProfileStore",
    "RedisProfileSink",
    "ResumeProfiles",
    "encode_batch",
    "resume_offset",
]
