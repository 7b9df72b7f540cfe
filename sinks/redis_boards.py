"""Bytewax output: accepted events -> Redis boards, exactly once per effect.

Delivery guarantee: **exactly-once effects** on top of at-least-once input.
Each board group's share of a batch is applied by one Lua call that first
compares the group's stored watermark for the source partition with the
batch's last offset and does nothing if it was already applied; otherwise it
writes the members, expiries, seen event ids, tournament attempts and seats,
counters and the new watermark atomically. A replay after a crash therefore changes nothing twice.

The sink holds no logic of its own: :class:`~domain.planner.BoardPlanner`
decides every member and value; this module only moves them, one round trip
per round of batches: the previous round's write answers and this round's
reads come back together, and this round's writes leave without waiting, so
Redis works while the worker validates and plans the next batch.

Outages: a dropped connection, a timeout (``LB_REDIS_TIMEOUT_S``), Redis
loading its AOF after a restart, or a cluster failing over makes the sink wait
and re-send the same round trip with backoff for up to ``LB_REDIS_RETRY_S``,
then fail loudly (:class:`~domain.errors.RetryBudgetExceeded`). Re-sending a
write that Redis had in fact applied before the connection dropped is a
no-op thanks to the watermark guard, so waiting never doubles an effect;
while it waits the worker reads nothing more (backpressure, not loss).

Live pushes: the same Lua call appends what it changed (window, player, old
and new score) as one entry to the group's capped change stream
(``domain.keys.GroupKeys.changes``), so a subscriber sees exactly the writes
that happened, in order, and never one that was rolled back.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from domain.backoff import Backoff
from domain.errors import RetryBudgetExceeded, ServiceError, StopRequested
from domain.healing import (
    MISSING,
    PROGRESS_FIELD,
    Divergence,
    audit,
    progress_fields,
    resume_offset,
)
from domain.keys import CHANGES_MAXLEN, GroupKeys, progress_key, tag_of, watermark_field
from domain.planner import (
    MAX_UPDATES,
    BoardPlanner,
    Change,
    GroupWrite,
    LookupResults,
    Lookups,
    PlanRound,
    WritePlan,
)
from domain.planner.rounds import split_round
from domain.records import CheckedBatch
from domain.rewinds import Rewinds
from sinks import outcomes
from sinks.retry import abandon, call_with_retry, give_up
from sinks.wire import RawPipeline
from telemetry import hooks

log = logging.getLogger(__name__)

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
-- ARGV: field, offset, expected watermark, then counted sections (sinks/redis_boards.py: _encode)
-- Answers {outcome, microseconds Redis spent writing} (see refused_at).
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if cur >= tonumber(ARGV[2]) then return {0, 0} end
-- Not what the plan was based on: Redis lost writes (or another writer moved
-- it). Write nothing and say what is stored: the job re-reads from there.
if cur ~= tonumber(ARGV[3]) then return {-2 - cur, 0} end
local t0 = redis.call('TIME')
local i = 4
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
for _ = 1, tonumber(take()) do            -- counts: key index, n, (field value)*
  local k = KEYS[tonumber(take())]; local n = tonumber(take())
  chunked('HSET', k, i, n, 2); i = i + 2 * n
end
for _ = 1, tonumber(take()) do            -- stats: name, increment
  local name = take(); local by = tonumber(take())
  if by ~= 0 then redis.call('HINCRBY', KEYS[2], name, by) end
end
if tonumber(take()) > 0 then             -- changes: 1, stream, maxlen, JSON list
  local stream = KEYS[tonumber(take())]; local cap = take()
  redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', 'c', take())
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t1 = redis.call('TIME')
return {1, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])}
"""


def refused_at(answer: int) -> int | None:
    """The watermark Redis held when it refused a group's write, else None.

    ``APPLY_GROUP``'s outcome is 1 (applied), 0 (applied before) or
    ``-2 - stored`` (refused; ``stored`` is -1 when the field is missing).
    """
    return None if answer >= 0 else -2 - answer


def _outcomes(replies: list[Any]) -> list[int]:
    """Each group write's outcome; the time Redis spent on the applied ones goes to telemetry.

    Raises the first error reply (after every reply was read).
    """
    outcomes: list[int] = []
    micros: list[int] = []
    for reply in _raise_first_error(replies):
        outcome, spent = reply
        outcomes.append(int(outcome))
        if outcome == 1:
            micros.append(int(spent))
    hooks.group_writes(micros)
    return outcomes


#: A (member, score) pair's score: the sort key of ``_encode(sort_members=True)``.
_SCORE = itemgetter(1)


def _encode(write: GroupWrite, sort_members: bool = False) -> tuple[list[str], list[Any]]:
    """The script's keys and arguments for one group write (layout: ``APPLY_GROUP``).

    ``sort_members`` sends each board's members in ascending score: Redis then
    inserts neighbours one after another into its skip list, which costs it
    less than scattered inserts when the board is large (``bench.redis_floor``,
    10M members per board: a sixth to a third less Redis CPU in ``ZADD``,
    docs/BENCHMARKS.md). The set written is the same either way: one value per
    member, order-free.
    """
    keys: list[str] = [write.keys.watermarks, write.keys.stats, write.keys.boards]
    index: dict[str, int] = {}

    def key_index(key: str) -> int:
        at = index.get(key)
        if at is None:
            keys.append(key)
            at = index[key] = len(keys)
        return at

    field_name, offset = write.watermark
    args: list[Any] = [field_name, offset, write.expected, len(write.zadd)]
    for key, members in write.zadd.items():
        args += [key_index(key), len(members)]
        pairs = sorted(members.items(), key=_SCORE) if sort_members else members.items()
        for member, score in pairs:
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
    args.append(len(write.counts))
    for key, values in write.counts.items():
        args += [key_index(key), len(values)]
        for name, count in values.items():
            args += [name, count]
    args.append(len(write.stats))
    for name, by in write.stats.items():
        args += [name, by]
    if write.changes:
        args += [1, key_index(write.keys.changes), CHANGES_MAXLEN]
        args.append("[" + ",".join(map(_change_json, write.changes)) + "]")
    else:
        args.append(0)
    return keys, args


_PLAIN = re.compile(r"[A-Za-z0-9._:@-]*")


def _json_text(text: str) -> str:
    """``text`` as a JSON string; ids are nearly always plain, so skip the encoder then."""
    return f'"{text}"' if _PLAIN.fullmatch(text) else json.dumps(text)


def _change_json(change: Change) -> str:
    """A change as the stream's JSON object (``{"w":..,"p":..,"o":..,"n":..}``).

    Built here, not in the script: Redis runs one thread for everyone, and a
    Lua table per change, its cjson encoding and a rank lookup per change cost
    it more than the change's own ``ZADD`` (measured with ``INFO
    commandstats`` on the new-players workload). Readers that need ranks ask
    the board (the push server does, once per page).
    """
    window = _WINDOW_JSON.get(change.window_id)
    if window is None:
        if len(_WINDOW_JSON) > 10_000:
            _WINDOW_JSON.clear()
        window = _WINDOW_JSON[change.window_id] = '{"w":' + _json_text(change.window_id)
    return (
        f'{window},"p":{_json_text(change.player_id)},'
        f'"o":"{_text(change.old)}","n":"{_text(change.new)}"}}'
    )


#: ``{"w":<window id>`` per window id: a handful of windows carry every change.
_WINDOW_JSON: dict[str, str] = {}


def _raise_first_error(replies: list[Any]) -> list[Any]:
    """The replies, or the first error reply raised (after every reply was read)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _text(score: int | None) -> str:
    """A score for the change stream: decimal text (exact past 2**53), '' for absent."""
    return "" if score is None else str(score)


#: Members or fields per read command: a read of a big batch is several short
#: commands, so a reader of the same Redis waits behind none of them for long.
READ_CHUNK = 1000


def _spans(items: Sequence[str]) -> list[Sequence[str]]:
    """``items`` in runs of at most :data:`READ_CHUNK` (one read command each)."""
    if len(items) <= READ_CHUNK:
        return [items]
    return [items[at : at + READ_CHUNK] for at in range(0, len(items), READ_CHUNK)]


def _read_commands(
    many: Sequence[Lookups],
    progress: Sequence[tuple[str, dict[str, int]]],
    audit: Sequence[tuple[str, str]],
) -> list[tuple[Any, ...]]:
    """A round trip's commands: progress writes, the lookups, the audited watermarks.

    :func:`_parse_reads` takes their replies in the same order and chunking.
    """
    out: list[tuple[Any, ...]] = []
    for key, fields in progress:
        out.append(("HSET", key, *(x for pair in fields.items() for x in pair)))
    for lookups in many:
        out += [("HGET", key, name) for key, name in lookups.watermarks]
        out += [("HMGET", key, *s) for key, ids in lookups.seen for s in _spans(ids)]
        out += [("ZMSCORE", key, *s) for key, ps in lookups.scores for s in _spans(ps)]
        out += [("SMEMBERS", key) for key in lookups.registries]
        out += [("HMGET", key, *s) for key, names in lookups.counts for s in _spans(names)]
    out += [("HGET", key, name) for key, name in audit]
    return out


def _parse_reads(
    many: Sequence[Lookups], skip: int, answers: list[Any]
) -> tuple[list[LookupResults], list[int | None]]:
    """The replies of :func:`_read_commands` (after ``skip`` progress writes), decoded."""
    at = skip

    def joined(items: Sequence[str]) -> list[Any]:
        nonlocal at
        out: list[Any] = []
        for _ in _spans(items):
            out += answers[at]
            at += 1
        return out

    results: list[LookupResults] = []
    for lookups in many:
        got = LookupResults()
        for value in answers[at : at + len(lookups.watermarks)]:
            got.watermarks.append(None if value is None else int(value))
        at += len(lookups.watermarks)
        for _, ids in lookups.seen:
            got.seen.append([None if v is None else int(v) for v in joined(ids)])
        for _, players in lookups.scores:
            # Doubles arrive as text (RESP2); composites stay below 2**53, exact.
            got.scores.append([None if v is None else float(v) for v in joined(players)])
        for _ in lookups.registries:
            got.registries.append({m.decode() if isinstance(m, bytes) else m for m in answers[at]})
            at += 1
        for _, names in lookups.counts:
            got.counts.append([None if v is None else int(v) for v in joined(names)])
        results.append(got)
    return results, [None if value is None else int(value) for value in answers[at:]]


class RedisBoardStore:
    """Batched reads and atomic per-group writes; no decisions of its own.

    Every round trip is retried under ``retry`` (see the module docstring);
    other Redis errors (a script error, out of memory) fail at once.
    """

    def __init__(
        self,
        client: Any,
        retry: Backoff = NO_RETRY,
        stopping: Callable[[], bool] = lambda: False,
        *,
        sort_members: bool = False,
    ) -> None:
        """``sort_members``: send each board's members in score order (replays; see ``_encode``)."""
        self._client = client
        self._retry = retry
        self._sort = sort_members
        self._stopping = stopping
        self._cluster = isinstance(client, RedisCluster)
        # Standalone: commands packed by hiredis on one connection (sinks.wire);
        # a cluster goes through redis-py's cluster client, which routes them.
        self._wire = None if self._cluster else RawPipeline(client)
        #: Encoded group writes sent without waiting (see send_writes).
        self._inflight: list[tuple[list[str], list[Any]]] | None = None
        self._inflight_sent = False
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
                stopping=self._stopping,
            )
        except StopRequested as exc:
            abandon(exc)
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

    def read_watermarks(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        """The stored watermark of each ``(meta:wm key, field)``, in one round trip."""
        _, stored = self.read_many_and_audit([], audit=pairs)
        return stored

    def read_progress(self, key: str) -> dict[str, int]:
        """A partition's progress hash (see :mod:`domain.healing`); empty when missing."""

        def attempt() -> dict[Any, Any]:
            self._refresh_slots()
            return dict(self._client.hgetall(key))

        raw = self._round_trip("Redis read", attempt)
        return {
            (name.decode() if isinstance(name, bytes) else name): int(value)
            for name, value in raw.items()
        }

    def write_progress(self, progress: Sequence[tuple[str, dict[str, int]]]) -> None:
        """Write progress hashes now (on close; otherwise they ride on the next read)."""
        if progress:
            self.read_many_and_audit([], progress=progress)

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]:
        """Answer the lookups of several batches in one pipelined round trip."""
        return self.read_many_and_audit(many)[0]

    def read_many_and_audit(
        self,
        many: Sequence[Lookups],
        progress: Sequence[tuple[str, dict[str, int]]] = (),
        audit: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[LookupResults], list[int | None]]:
        """One round trip: write ``progress`` hashes, answer ``many``, read ``audit`` watermarks.

        Only with no writes in flight (:meth:`drain` them first): their answers
        would be lost here. The board sink itself uses :meth:`exchange`.
        """
        if self._inflight is not None:
            raise RuntimeError("writes are in flight: exchange() or drain() them first")
        results, stored, _ = self.exchange(many, progress, audit)
        return results, stored

    def send_writes(self, plans: Sequence[WritePlan]) -> list[int] | None:
        """Start writing the groups of ``plans``; None when the answers come later.

        On a standalone Redis the writes leave now and the answers come with the
        next :meth:`exchange` (or :meth:`drain`): the worker validates and plans
        its next batch while Redis applies them, and one connection keeps them
        ahead of the next round's reads, so those reads see them. A send that
        fails is sent again by that exchange. A cluster writes at once and the
        answers are returned (as from :meth:`apply_many`).
        """
        if self._wire is None:
            return self.apply_many(plans)
        if self._inflight is not None:
            raise RuntimeError("writes are already in flight: exchange() or drain() them first")
        groups = [write for plan in plans for write in plan.groups]
        if not groups:
            return []
        self._inflight = [_encode(write, self._sort) for write in groups]
        self._inflight_sent = False
        try:
            self._wire.send(self._wire.evals(APPLY_GROUP, self._inflight))
            self._inflight_sent = True
        except TRANSIENT as exc:
            log.info("Redis write not sent (%s); sending it with the next round trip", exc)
        return None

    def drain(self) -> list[int] | None:
        """The answers of the writes in flight (None when there are none)."""
        if self._inflight is None:
            return None
        return self.exchange([])[2]

    def exchange(
        self,
        many: Sequence[Lookups],
        progress: Sequence[tuple[str, dict[str, int]]] = (),
        audit: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[LookupResults], list[int | None], list[int] | None]:
        """One round trip: settle the writes in flight, then as :meth:`read_many_and_audit`.

        Returns the lookups' results, the audited watermarks and the answers of
        the writes that were in flight (None when there were none). Redis runs
        the writes first, so the reads see them; the progress hashes describe
        writes acknowledged in earlier rounds, so sending them ahead of this
        round's reads keeps them behind the writes they describe.
        """
        queued = _read_commands(many, progress, audit)

        inflight = self._inflight
        wire = self._wire
        written: list[int] | None = None

        def attempt() -> list[Any]:
            nonlocal written
            if wire is None:
                self._refresh_slots()
                pipe = self._client.pipeline(transaction=False)
                for command in queued:
                    pipe.execute_command(*command)
                return list(pipe.execute()) if len(pipe) else []
            if inflight is None:
                return _raise_first_error(wire.run(queued))
            if not self._inflight_sent:  # a failed send or attempt: send the writes again
                wire.send(wire.evals(APPLY_GROUP, inflight))
            self._inflight_sent = False  # until this attempt has every answer
            replies = wire.run(queued)
            answers, reads = replies[: len(inflight)], replies[len(inflight) :]
            if any(isinstance(reply, NoScriptError) for reply in answers):
                # Redis restarted or flushed its scripts: load it, send everything again.
                wire.forget(APPLY_GROUP)
                wire.send(wire.evals(APPLY_GROUP, inflight))
                replies = wire.run(queued)
                answers, reads = replies[: len(inflight)], replies[len(inflight) :]
            written = _outcomes(answers)
            return _raise_first_error(reads)

        answers = self._round_trip("Redis read", attempt)
        self._inflight = None
        out, stored = _parse_reads(many, len(progress), answers)
        return out, stored, written

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
        if self._inflight is not None:
            raise RuntimeError("writes are in flight: exchange() or drain() them first")
        encoded = [_encode(write, self._sort) for write in groups]
        if self._cluster:
            return list(
                self._round_trip("Redis Cluster write", lambda: self._apply_cluster(encoded))
            )

        wire = self._wire
        assert wire is not None

        def attempt() -> list[int]:
            return _outcomes(wire.eval_many(APPLY_GROUP, encoded))

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
            out += _outcomes(pipe.execute(raise_on_error=False))
        return out


class _BoardPartition(StatelessSinkPartition[CheckedBatch]):
    def __init__(
        self,
        store: RedisBoardStore,
        planner: BoardPlanner,
        namespace: str,
        rewinds: Rewinds,
        check_every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._planner = planner
        self._namespace = namespace
        self._rewinds = rewinds
        self._check_every_s = check_every_s
        self._clock = clock
        self._next_check = clock() + check_every_s
        #: Per (topic, partition): the generation batches must carry (see Rewinds).
        self._generation: dict[tuple[str, int], int] = {}
        #: Watermark field -> (topic, partition), for the partitions seen.
        self._partition_of: dict[str, tuple[str, int]] = {}
        #: Per (topic, partition): the last offset whose batch was acknowledged,
        #: and the partitions whose progress hash is behind.
        self._acked: dict[tuple[str, int], int] = {}
        self._dirty: set[tuple[str, int]] = set()
        #: The batches whose writes were sent and not answered yet, with their plans.
        self._inflight: list[tuple[CheckedBatch, WritePlan]] = []

    def write_batch(self, items: Sequence[CheckedBatch]) -> None:
        """Project every batch (see :meth:`_write`); an outage past its budget ends the job."""
        try:
            self._write(items)
        except RetryBudgetExceeded as exc:
            give_up(exc)

    def _write(self, items: Sequence[CheckedBatch]) -> None:
        """Project every batch; the last round's writes are still in flight on return.

        Batches of different partitions touch disjoint players and watermark
        fields, so a round of at most one batch per partition shares one round
        trip: it takes the answers to the previous round's writes and reads what
        this round needs, then this round's writes leave without waiting
        (:meth:`RedisBoardStore.send_writes`), so Redis applies them while the
        worker validates and plans what comes next. A second batch of a
        partition waits for the next round because it must see the first one's
        values (the cache has them at once; Redis before any later read).

        Bytewax may therefore snapshot a source offset past writes not yet
        acknowledged. That is safe because a restart never trusts the snapshot
        alone: it resumes from ``@ + 1`` of the progress hash at the latest
        (:func:`domain.healing.resume_offset`), and ``@`` only ever covers
        acknowledged batches; re-applying what did land is a no-op.

        When Redis refuses a write (its watermark is not what the plan was
        based on) or the periodic audit finds a watermark below what this
        worker wrote, Redis lost acknowledged writes: the worker forgets what
        it cached, asks the source to re-read each damaged partition from the
        first lost offset, and drops that partition's batches until the
        re-read ones arrive (:mod:`domain.healing`).
        """
        if any((batch.topic, batch.partition) not in self._acked for batch in items):
            # Seeding reads on its own round trip: settle what is in flight first.
            self._settle(self._store.drain())
            for batch in items:
                if (batch.topic, batch.partition) not in self._acked:
                    self._seed(batch)
        pending = [batch for batch in items if self._current(batch)]
        while pending:
            now, later = split_round(pending)
            for batch in now:
                where = (batch.topic, batch.partition)
                self._partition_of[watermark_field(*where)] = where
            audit_pairs = self._audit_due()
            round_ = PlanRound(self._planner, now)
            results, stored, settled = self._store.exchange(
                round_.lookups, self._take_progress(), audit_pairs
            )
            if self._settle(settled):
                pending = [batch for batch in pending if self._current(batch)]
                continue  # the reads may predate the healing: plan the round again
            if audit_pairs:
                beliefs = self._planner.beliefs()
                found = audit(
                    {pair: beliefs[pair] for pair in audit_pairs},
                    dict(zip(audit_pairs, stored, strict=True)),
                )
                if found:
                    self._heal(found, {})
                    pending = [batch for batch in pending if self._current(batch)]
                    continue  # plan the round again from what Redis now holds
            plans = round_.plan(results)
            # The next round's plans build on these values before Redis has
            # answered: it applies them before anything sent later, and a refusal
            # heals, which forgets every cached value.
            round_.commit()
            self._inflight = list(zip(now, plans, strict=True))
            if self._settle(self._store.send_writes(plans)):
                pending = [batch for batch in later if self._current(batch)]
                continue
            pending = later

    def _settle(self, answers: list[int] | None) -> bool:
        """Take the answers to the writes sent last; True when the round must be planned again.

        That is when Redis refused some (healed) or already had some (superseded).

        An applied batch is acknowledged (its offset may enter the progress
        hash); a refused one means Redis lost writes (see :meth:`_write`).
        ``None`` means nothing was in flight or the answers are still to come.
        """
        if answers is None:
            return False
        inflight, self._inflight = self._inflight, []
        replies = iter(answers)
        refused: dict[tuple[str, str], int] = {}
        restart: dict[str, int] = {}
        superseded = False
        for batch, plan in inflight:
            lost = False
            for write in plan.groups:
                answer = next(replies)
                if refused_at(answer) is not None:
                    lost = True
                    # The first refused piece of a group says what its plan expected.
                    refused.setdefault((write.keys.watermarks, write.watermark[0]), write.expected)
                superseded = superseded or answer == 0
            if lost:
                restart[watermark_field(batch.topic, batch.partition)] = batch.first_offset
            else:
                self._acknowledge(batch, plan)
                outcomes.add_applied(batch, plan)
        if refused:
            self._heal_refused(refused, restart)
            return True
        if superseded:
            # Redis already had a batch: a retried write, or a backfill cut the
            # group over (sinks/cutover.py). Its values may not be this plan's:
            # forget the cache and plan the round again from what Redis holds.
            self._planner.forget({})
            return True
        return False

    def close(self) -> None:
        """Settle the writes in flight and leave the progress hashes current for the next start."""
        self._settle(self._store.drain())
        self._store.write_progress(self._take_progress())

    # -- healing -------------------------------------------------------------------

    def _seed(self, batch: CheckedBatch) -> None:
        """First sight of a partition: check what the previous run left in Redis.

        The progress hash names every group the previous run had written and
        the watermark it had acknowledged there; what Redis holds now becomes
        this run's belief, so the audit covers those groups before this run
        writes to them. Redis may have lost writes since the reader chose where
        to start (:class:`ResumeFromRedis`): the same rule
        (:func:`~domain.healing.resume_offset`) is applied again at the
        partition's current position, and a lower answer rewinds the reader.
        """
        where = (batch.topic, batch.partition)
        wm_field = watermark_field(*where)
        self._partition_of[wm_field] = where
        position = batch.first_offset if batch.first_offset >= 0 else batch.last_offset + 1
        progress, stored = read_resume_state(self._store, self._namespace, *where)
        self._planner.assume(
            {
                (GroupKeys(self._namespace, tag).watermarks, wm_field): MISSING
                if value is None
                else value
                for tag, value in stored.items()
            }
        )
        start = resume_offset(position, progress, stored)
        assert start is not None
        self._acked[where] = start - 1
        if start < position:
            found = Divergence(rewind_to={wm_field: start})
            self._heal(found, {}, f"its progress in Redis ends before offset {position}")

    def _current(self, batch: CheckedBatch) -> bool:
        """False for a batch read before its partition's latest rewind (dropped)."""
        return batch.generation >= self._generation.get((batch.topic, batch.partition), 0)

    def _audit_due(self) -> list[tuple[str, str]]:
        now = self._clock()
        if now < self._next_check:
            return []
        self._next_check = now + self._check_every_s
        return list(self._planner.beliefs())

    def _heal_refused(self, refused: dict[tuple[str, str], int], restart: dict[str, int]) -> None:
        """A write was refused: audit every belief (and the refused pairs) against Redis."""
        believed = self._planner.beliefs()
        for pair, expected in refused.items():
            believed.setdefault(pair, expected)
        pairs = list(believed)
        stored = self._store.read_watermarks(pairs)
        self._heal(audit(believed, dict(zip(pairs, stored, strict=True))), restart)

    def _heal(
        self, found: Divergence, restart: dict[str, int], why: str = "a write was refused"
    ) -> None:
        """Forget the caches and rewind every damaged partition (see write_batch)."""
        self._planner.forget(found.corrected)
        rewind = dict(found.rewind_to)
        for wm_field, offset in restart.items():
            rewind[wm_field] = min(rewind.get(wm_field, offset), offset)
        for _, wm_field in found.corrected:
            where = self._partition_of.get(wm_field)
            if where is not None:
                self._dirty.add(where)
        for wm_field, offset in sorted(rewind.items()):
            where = self._partition_of.get(wm_field)
            if where is None:  # a partition this worker no longer reads
                continue
            topic, partition = where
            # Never past what this worker has not applied yet (a re-read already
            # under way, batches in flight): they are dropped with the generation.
            offset = min(offset, self._acked.get(where, offset - 1) + 1)
            self._generation[where] = self._rewinds.request(topic, partition, offset)
            self._acked[where] = min(self._acked.get(where, offset - 1), offset - 1)
            self._dirty.add(where)
            log.warning(
                "Redis lost writes of %s[%d] (%s): re-reading it from offset %d",
                topic,
                partition,
                ", ".join(
                    f"{tag_of(k)} has {v}" for (k, f), v in found.corrected.items() if f == wm_field
                )
                or why,
                offset,
            )

    # -- progress ------------------------------------------------------------------

    def _acknowledge(self, batch: CheckedBatch, plan: WritePlan) -> None:
        where = (batch.topic, batch.partition)
        self._acked[where] = max(self._acked.get(where, -1), batch.last_offset)
        self._dirty.add(where)

    def _take_progress(self) -> list[tuple[str, dict[str, int]]]:
        """The progress hashes to write: ``@`` and *every* group's believed watermark.

        Every group, not only those written since the last time: Redis may
        have lost the hash's older fields along with a group's writes before
        anyone noticed, and ``@`` must never stand in a hash that no longer
        names a group it depends on.
        """
        if not self._dirty:
            return []
        fields = {where: watermark_field(*where) for where in self._dirty}
        copies: dict[str, dict[str, int]] = {name: {} for name in fields.values()}
        for (wm_key, wm_field), value in self._planner.beliefs().items():
            if wm_field in copies:
                copies[wm_field][tag_of(wm_key)] = value
        out = [
            (
                progress_key(self._namespace, *where),
                progress_fields(self._acked.get(where, -1), copies[name]),
            )
            for where, name in fields.items()
        ]
        self._dirty = set()
        return out


class RedisBoardSink(DynamicSink[CheckedBatch]):
    """Each worker projects the partitions it reads (no exchange: one owner per player)."""

    def __init__(
        self,
        client_factory: Any,
        namespace: str,
        dedupe_horizon_ms: int,
        cache_capacity: int,
        retry: Backoff,
        rewinds: Rewinds | None = None,
        heal_check_s: float = 5.0,
        stopping: Callable[[], bool] = lambda: False,
        partitions: Mapping[str, int] | None = None,
        max_updates: int = MAX_UPDATES,
    ) -> None:
        """The sink factory; ``partitions`` are the source topics' partition counts.

        Read once at start: a tournament's ``max_entries`` is split into
        per-partition seats (``domain.games.Tournament.seats``). ``max_updates``
        bounds one atomic group write (:func:`domain.planner.pieces`).
        """
        self._max_updates = max_updates
        self._client_factory = client_factory
        self._stopping = stopping
        self._namespace = namespace
        self._horizon_ms = dedupe_horizon_ms
        self._capacity = cache_capacity
        self._retry = retry
        self._rewinds = rewinds or Rewinds()
        self._heal_check_s = heal_check_s
        self._partitions = dict(partitions or {})

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _BoardPartition:
        """Connect (waiting under the retry budget if Redis is not up yet) and ping."""
        client = connect(self._client_factory, self._retry, self._stopping)
        planner = BoardPlanner(
            self._namespace,
            self._horizon_ms,
            self._capacity,
            partitions=self._partitions,
            max_updates=self._max_updates,
        )
        store = RedisBoardStore(client, self._retry, self._stopping)
        hooks.instrument_board_sink(store, planner)  # stage timings, cache size (issue 13)
        return _BoardPartition(
            store,
            planner,
            self._namespace,
            self._rewinds,
            self._heal_check_s,
        )


def connect(
    client_factory: Callable[[], Any],
    retry: Backoff,
    stopping: Callable[[], bool] = lambda: False,
) -> Any:
    """A pinged client, waiting under the retry budget while Redis is not up yet.

    A stop request while it waits ends the process at once (:func:`sinks.retry.abandon`).
    """

    def attempt() -> Any:
        client = client_factory()  # a cluster client connects here already
        client.ping()
        return client

    try:
        return call_with_retry(
            attempt,
            what="Redis connect",
            policy=retry,
            transient=TRANSIENT,
            permanent=PERMANENT,
            setting="LB_REDIS_RETRY_S",
            stopping=stopping,
        )
    except StopRequested as exc:
        abandon(exc)
    except RetryBudgetExceeded as exc:
        give_up(exc)
    except redis.RedisError as exc:
        raise ServiceError(f"cannot reach Redis: {exc}") from exc


def read_resume_state(
    store: Any, namespace: str, topic: str, partition: int
) -> tuple[dict[str, int], dict[str, int | None]]:
    """A partition's progress hash and the watermark each group it names holds now.

    What :func:`domain.healing.resume_offset` decides from, at a reader's start
    and again at the sink's first sight of the partition.
    """
    progress = store.read_progress(progress_key(namespace, topic, partition))
    tags = [tag for tag in progress if tag != PROGRESS_FIELD]
    wm_field = watermark_field(topic, partition)
    stored = store.read_watermarks(
        [(GroupKeys(namespace, tag).watermarks, wm_field) for tag in tags]
    )
    return progress, dict(zip(tags, stored, strict=True))


class ResumeFromRedis:
    """Where a partition reader starts after a restart.

    Bytewax's snapshot, or earlier when Redis no longer holds what was written
    before it (:func:`domain.healing.resume_offset`).
    """

    def __init__(self, client_factory: Callable[[], Any], namespace: str, retry: Backoff) -> None:
        self._client_factory = client_factory
        self._namespace = namespace
        self._retry = retry

    def __call__(self, topic: str, partition: int, snapshot: int | None) -> int | None:
        if snapshot is None:
            return None
        client = connect(self._client_factory, self._retry)
        try:
            store = RedisBoardStore(client, self._retry)
            progress, stored = read_resume_state(store, self._namespace, topic, partition)
        finally:
            client.close()
        start = resume_offset(snapshot, progress, stored)
        if start != snapshot:
            log.warning(
                "Redis holds less of %s[%d] than the recovery snapshot (offset %d): "
                "re-reading from offset %s",
                topic,
                partition,
                snapshot,
                start,
            )
        return start
