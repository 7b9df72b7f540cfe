"""Bytewax output: accepted events -> Redis boards, exactly once per effect.

Delivery guarantee: **exactly-once effects** on top of at-least-once input.
Each board group's share of a batch is applied by one Lua call that first
compares the group's stored watermark for the source partition with the
batch's last offset and does nothing if it was already applied; otherwise it
writes the members, expiries, seen event ids, counters and the new watermark
atomically. A replay after a crash therefore changes nothing twice.

The sink holds no logic of its own: :class:`~domain.planner.BoardPlanner`
decides every member and value; this module only moves them in two batched
round trips (one read for cache misses, one write) per batch.

Outages: a dropped connection, a timeout (``LB_REDIS_TIMEOUT_S``), Redis
loading its AOF after a restart, or a cluster failing over makes the sink wait
and re-send the same round trip with backoff for up to ``LB_REDIS_RETRY_S``,
then fail loudly (:class:`~domain.errors.RetryBudgetExceeded`). Re-sending a
write that Redis had in fact applied before the connection dropped is a
no-op thanks to the watermark guard, so waiting never doubles an effect;
while it waits the worker reads nothing more (backpressure, not loss).

Live pushes: the same Lua call appends what it changed (window, player, old
and new score, new rank) as one entry to the group's capped change stream
(``domain.keys.GroupKeys.changes``), so a subscriber sees exactly the writes
that happened, in order, and never one that was rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from redis.cluster import RedisCluster

from domain.backoff import Backoff
from domain.errors import ServiceError
from domain.keys import CHANGES_MAXLEN
from domain.planner import BoardPlanner, GroupWrite, LookupResults, Lookups, WritePlan
from domain.records import CheckedBatch
from sinks.retry import call_with_retry

#: Errors after which re-sending the same round trip is safe and may succeed: the
#: connection dropped or timed out (BusyLoadingError, Redis loading its AOF, is a
#: ConnectionError), or a cluster is failing over (slots moving, a master down,
#: a demoted master refusing writes, the slot map unreachable).
TRANSIENT: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.AskError,
    redis.exceptions.RedisClusterException,
)

#: Connection errors no wait can fix: wrong credentials, a user without the rights.
PERMANENT: tuple[type[BaseException], ...] = (
    redis.AuthenticationError,
    redis.exceptions.AuthorizationError,
)

#: Fail on the first error (tools and benchmarks that would rather stop than wait).
NO_RETRY = Backoff(budget_s=0)

#: Members per ZADD/ZREM/HSET call inside the script (Lua's unpack limit is ~8000).
CHUNK = 1000

APPLY_GROUP = """
-- KEYS[1] watermark hash, KEYS[2] stats hash, KEYS[3] board registry, KEYS[4..] boards/seen
-- ARGV: field, offset, then counted sections (see sinks/redis_boards.py: _encode)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and tonumber(cur) >= tonumber(ARGV[2]) then return 0 end
local i = 3
local function take() local v = ARGV[i]; i = i + 1; return v end
local function chunked(cmd, key, first, n, width)
  local at = first
  while at < first + n * width do
    local stop = math.min(at + 1000 * width, first + n * width)
    redis.call(cmd, key, unpack(ARGV, at, stop - 1))
    at = stop
  end
end
for _ = 1, tonumber(take()) do            -- zadd: key index, n, (score member)*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('ZADD', k, i, n, 2); i = i + 2 * n
end
for _ = 1, tonumber(take()) do            -- zrem: key index, n, member*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('ZREM', k, i, n, 1); i = i + n
end
for _ = 1, tonumber(take()) do            -- expireat: key index, unix seconds
  local k = KEYS[tonumber(take())]; redis.call('EXPIREAT', k, take())
end
local nw = tonumber(take())               -- registry: n, window id*
if nw > 0 then chunked('SADD', KEYS[3], i, nw, 1); i = i + nw end
for _ = 1, tonumber(take()) do            -- seen: key index, ttl, n, (id ts)*
  local k = KEYS[tonumber(take())]; local ttl = take(); local n = tonumber(take())
  chunked('HSET', k, i, n, 2); i = i + 2 * n
  redis.call('EXPIRE', k, ttl)
end
for _ = 1, tonumber(take()) do            -- stats: name, increment
  local name = take(); local by = tonumber(take())
  if by ~= 0 then redis.call('HINCRBY', KEYS[2], name, by) end
end
local nc = tonumber(take())  -- changes: n, stream, maxlen, (board, window, player, old, new)*
if nc > 0 then
  local stream = KEYS[tonumber(take())]; local cap = take(); local out = {}
  for c = 1, nc do
    local board = KEYS[tonumber(take())]
    local change = {w = take(), p = take(), o = take(), n = take()}
    local r = change.n ~= '' and redis.call('ZREVRANK', board, change.p)
    change.r = r and r + 1 or ''
    out[c] = change
  end
  redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', 'c', cjson.encode(out))
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


def _encode(write: GroupWrite) -> tuple[list[str], list[Any]]:
    keys: list[str] = [write.keys.watermarks, write.keys.stats, write.keys.boards]
    index: dict[str, int] = {}

    def key_index(key: str) -> int:
        at = index.get(key)
        if at is None:
            keys.append(key)
            at = index[key] = len(keys)
        return at

    field_name, offset = write.watermark
    args: list[Any] = [field_name, offset, len(write.zadd)]
    for key, members in write.zadd.items():
        args += [key_index(key), len(members)]
        for member, score in members.items():
            args += [score, member]
    args.append(len(write.zrem))
    for key, players in write.zrem.items():
        args += [key_index(key), len(players), *players]
    args.append(len(write.expire_at_s))
    for key, at in write.expire_at_s.items():
        args += [key_index(key), at]
    args += [len(write.new_windows), *write.new_windows]
    args.append(len(write.seen))
    for key, ids in write.seen.items():
        args += [key_index(key), write.seen_ttl_s, len(ids)]
        for event_id, ts in ids.items():
            args += [event_id, ts]
    args.append(len(write.stats))
    for name, by in write.stats.items():
        args += [name, by]
    args.append(len(write.changes))
    if write.changes:
        args += [key_index(write.keys.changes), CHANGES_MAXLEN]
        for change in write.changes:
            args += [key_index(write.keys.board(change.window_id)), change.window_id]
            args += [change.player_id, _text(change.old), _text(change.new)]
    return keys, args


def _text(score: int | None) -> str:
    """A score for the change stream: decimal text (exact past 2**53), '' for absent."""
    return "" if score is None else str(score)


class RedisBoardStore:
    """Batched reads and atomic per-group writes; no decisions of its own.

    Every round trip is retried under ``retry`` (see the module docstring);
    other Redis errors (a script error, out of memory) fail at once.
    """

    def __init__(self, client: Any, retry: Backoff = NO_RETRY) -> None:
        self._client = client
        self._retry = retry
        self._cluster = isinstance(client, RedisCluster)
        self._apply = None if self._cluster else client.register_script(APPLY_GROUP)
        self._stale_slots = False

    def _round_trip(self, what: str, call: Any) -> Any:
        try:
            return call_with_retry(
                call,
                what=what,
                policy=self._retry,
                transient=TRANSIENT,
                permanent=PERMANENT,
                setting="LB_REDIS_RETRY_S",
                after_failure=self._forget_slots,
            )
        except redis.RedisError as exc:
            raise ServiceError(f"{what} failed: {exc}") from exc

    def _forget_slots(self) -> None:
        """After a failure a cluster's slot map may be stale: refresh it before the next try."""
        self._stale_slots = self._cluster

    def _refresh_slots(self) -> None:
        if self._stale_slots:
            self._client.nodes_manager.initialize()
            self._stale_slots = False

    def read(self, lookups: Lookups) -> LookupResults:
        """Answer every lookup in one pipelined round trip."""
        return self.read_many([lookups])[0]

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]:
        """Answer the lookups of several batches in one pipelined round trip."""

        def attempt() -> list[Any]:
            self._refresh_slots()
            pipe = self._client.pipeline(transaction=False)
            for lookups in many:
                for key, name in lookups.watermarks:
                    pipe.hget(key, name)
                for key, ids in lookups.seen:
                    pipe.hmget(key, ids)
                for key, players in lookups.scores:
                    pipe.zmscore(key, players)
                for key in lookups.registries:
                    pipe.smembers(key)
            return list(pipe.execute()) if len(pipe) else []

        answers = self._round_trip("Redis read", attempt)
        out: list[LookupResults] = []
        at = 0
        for lookups in many:
            got = LookupResults()
            for _ in lookups.watermarks:
                value = answers[at]
                got.watermarks.append(None if value is None else int(value))
                at += 1
            for _ in lookups.seen:
                got.seen.append([None if v is None else int(v) for v in answers[at]])
                at += 1
            for _ in lookups.scores:
                got.scores.append(list(answers[at]))
                at += 1
            for _ in lookups.registries:
                got.registries.append(
                    {m.decode() if isinstance(m, bytes) else m for m in answers[at]}
                )
                at += 1
            out.append(got)
        return out

    def apply(self, plan: WritePlan) -> list[int]:
        """Write every group of ``plan``; returns 1 per applied group, 0 per skipped replay."""
        return self.apply_many([plan])

    def apply_many(self, plans: Sequence[WritePlan]) -> list[int]:
        """Write the groups of several plans in one round trip (one per master).

        A retried round trip may answer 0 for a group the lost attempt had
        already applied: the effect is there once, either way.
        """
        groups = [write for plan in plans for write in plan.groups]
        if not groups:
            return []
        encoded = [_encode(write) for write in groups]
        if self._cluster:
            return list(
                self._round_trip("Redis Cluster write", lambda: self._apply_cluster(encoded))
            )

        def attempt() -> list[int]:
            pipe = self._client.pipeline(transaction=False)
            for keys, args in encoded:
                self._apply(keys=keys, args=args, client=pipe)  # type: ignore[misc]
            return [int(x) for x in pipe.execute()]

        return list(self._round_trip("Redis write", attempt))

    def _apply_cluster(self, encoded: Sequence[tuple[list[str], list[Any]]]) -> list[int]:
        """One pipeline per master; a group's keys share a slot, so its master runs it.

        redis-py's cluster pipeline refuses scripts, so groups are routed here.
        Re-sending a group after a topology change (MOVED, failover) is safe:
        the script's watermark guard makes a second application a no-op.
        """
        self._refresh_slots()
        by_node: dict[str, tuple[Any, list[tuple[list[str], list[Any]]]]] = {}
        for keys, args in encoded:
            node = self._client.get_node_from_key(keys[0])
            entry = by_node.get(node.name)
            if entry is None:
                entry = by_node[node.name] = (self._client.get_redis_connection(node), [])
            entry[1].append((keys, args))
        out: list[int] = []
        for conn, calls in by_node.values():
            script = conn.register_script(APPLY_GROUP)
            pipe = conn.pipeline(transaction=False)
            for keys, args in calls:
                script(keys=keys, args=args, client=pipe)
            out += [int(x) for x in pipe.execute()]
        return out


class _BoardPartition(StatelessSinkPartition[CheckedBatch]):
    def __init__(self, store: RedisBoardStore, planner: BoardPlanner) -> None:
        self._store = store
        self._planner = planner

    def write_batch(self, items: Sequence[CheckedBatch]) -> None:
        """Project every batch, acknowledged by Redis before this returns.

        Returning only after the writes are acknowledged is what keeps Bytewax
        from snapshotting source offsets past unwritten records. Batches of
        different partitions touch disjoint players and watermark fields, so a
        round of at most one batch per partition shares one read and one write
        round trip; a second batch of a partition waits for the next round
        because it must see the first one's values.
        """
        pending = [batch for batch in items if batch.accepted]
        while pending:
            round_: list[CheckedBatch] = []
            later: list[CheckedBatch] = []
            partitions: set[int] = set()
            for batch in pending:
                (later if batch.partition in partitions else round_).append(batch)
                partitions.add(batch.partition)
            lookups = [self._planner.lookups(batch) for batch in round_]
            results = self._store.read_many(lookups)
            plans = []
            for batch, need, got in zip(round_, lookups, results, strict=True):
                self._planner.remember_registries(need, got)
                plans.append(self._planner.plan(batch, got, need))
            self._store.apply_many(plans)
            for plan in plans:
                self._planner.commit(plan)
            pending = later


class RedisBoardSink(DynamicSink[CheckedBatch]):
    """Each worker projects the partitions it reads (no exchange: one owner per player)."""

    def __init__(
        self,
        client_factory: Any,
        namespace: str,
        dedupe_horizon_ms: int,
        cache_capacity: int,
        retry: Backoff,
    ) -> None:
        self._client_factory = client_factory
        self._namespace = namespace
        self._horizon_ms = dedupe_horizon_ms
        self._capacity = cache_capacity
        self._retry = retry

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _BoardPartition:
        """Connect (waiting under the retry budget if Redis is not up yet) and ping."""

        def connect() -> Any:
            client = self._client_factory()  # a cluster client connects here already
            client.ping()
            return client

        try:
            client = call_with_retry(
                connect,
                what="Redis connect",
                policy=self._retry,
                transient=TRANSIENT,
                permanent=PERMANENT,
                setting="LB_REDIS_RETRY_S",
            )
        except redis.RedisError as exc:
            raise ServiceError(f"cannot reach Redis: {exc}") from exc
        planner = BoardPlanner(self._namespace, self._horizon_ms, self._capacity)
        return _BoardPartition(RedisBoardStore(client, self._retry), planner)
