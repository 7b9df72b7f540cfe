"""A replay folded in memory, then loaded into its staging namespace in bulk.

A replay process (:mod:`jobs.replay_workers`) owns its partitions' players and
writes a staging namespace that was just dropped, so nothing but its own writes
can be there: it needs no Redis reads. :class:`MemoryBoardStore` answers the
planner's reads and applies its group writes on a keyspace held in this process
(:class:`Keyspace`), command for command as ``sinks/boards/apply_group.lua``
applies them in Redis; :func:`load` then writes that keyspace into Redis once,
each board's members in score order in large pipelined ``ZADD`` calls (Redis
inserts neighbours into its skip list for much less than scattered members,
``bench.redis_floor``). What the namespace holds afterwards is what the group
writes would have left in it. On a standalone Redis the compiled
``lb_native.BoardPacker`` sorts a board and packs its calls for about a sixth
of the CPU this module spends doing it with :func:`board_order` and hiredis
(which costs as much as Redis' own insert); on a cluster, or without
``lb_native``, this module does it.

Several processes load into the same namespace, and some keys are shared by
their groups: every load command is a merge that commutes with another
process's load or write, the way the live writes of the same keys do (disjoint
members and fields; the counters by ``HINCRBY``; dedupe bags appended to;
distinct-score counts through ``dense_apply``; expiries only ever raised).

:class:`FoldingStore` is what a replay uses: the in-memory store until the
fold holds more board members than its bound, or meets a write it does not
fold (team boards, a sharded dense game's outbox); then it loads what it has
(the namespace is then exactly as the Lua writes would have left it) and hands
on to the Redis store for the rest of the replay.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import islice
from typing import Any

from redis.cluster import RedisCluster

from adapters.redis import RedisClient, Script
from domain.errors import ServiceError
from domain.keys import entry_metadata_key
from domain.planner import BoardPlanner, GroupWrite, LookupResults, Lookups, WritePlan
from domain.planner.model import DistinctWrite
from schemas.decode_verify import native_module
from sinks.boards import RedisBoardStore
from sinks.boards.dense_union import DENSE_LIB
from sinks.boards.reads import parse_reads, read_commands
from sinks.wire import RawPipeline

#: Board members (all boards together) one replay process folds in memory before
#: it loads them and goes on through Redis. About 170 bytes each with the dedupe
#: ids and counters beside them (docs/BENCHMARKS.md, bench.rebuild): 30M, ~5 GB.
MEMORY_MEMBERS = 30_000_000

#: Members or fields per load command, and load commands per round trip.
LOAD_CHUNK = 5_000
LOAD_PER_TRIP = 10
#: Members per sorted run of a board's load (:func:`board_order`).
LOAD_RUN = 100_000
#: ``lb_native.BoardPacker`` (key, board, members per call) -> packed ``ZADD`` calls in
#: score order; None without ``lb_native``: the load then sorts and packs in Python.
PACKER: Callable[[str, dict[str, Score], int], Iterable[bytes]] | None = getattr(
    native_module(), "BoardPacker", None
)
#: Fields per call of the merge scripts (Lua's ``unpack`` takes ~8000 values).
SCRIPT_CHUNK = 1_000

Score = int | float


class Merge(Enum):
    """How a hash is loaded beside another process's writes of the same key."""

    SET = "set"  # fields of this process's own (players, partitions, event ids)
    APPEND = "append"  # dedupe bags: appended to what the field holds
    INCR = "incr"  # counters
    DENSE = "dense"  # distinct-score counts (their scores set follows from them)


def _b(value: object) -> bytes:
    """A value as Redis keeps it: the bytes the client would have sent."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()
    raise TypeError(f"not a Redis value: {value!r}")


@dataclass
class Keyspace:
    """The keys a fold wrote: sorted sets, hashes and sets, with Redis' expiry rules."""

    zsets: dict[str, dict[str, Score]] = field(default_factory=dict)
    hashes: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    sets: dict[str, set[str]] = field(default_factory=dict)
    #: Key -> unix milliseconds it expires at.
    expires: dict[str, int] = field(default_factory=dict)
    merges: dict[str, Merge] = field(default_factory=dict)
    #: Dense-rank scores sets: rebuilt from their counts by the load.
    derived: set[str] = field(default_factory=set)
    now_ms: int = 0

    # -- keys ------------------------------------------------------------------

    def alive(self, key: str) -> bool:
        """Whether ``key`` exists (an expired key is deleted first, as Redis does)."""
        at = self.expires.get(key)
        if at is not None and at <= self.now_ms:
            self.delete(key)
            return False
        return key in self.zsets or key in self.hashes or key in self.sets

    def delete(self, key: str) -> None:
        self.zsets.pop(key, None)
        self.hashes.pop(key, None)
        self.sets.pop(key, None)
        self.expires.pop(key, None)

    def expire_at_ms(self, key: str, at_ms: int) -> None:
        """``PEXPIREAT``: a missing key is left alone, a time not ahead deletes the key."""
        if not self.alive(key):
            return
        if at_ms <= self.now_ms:
            self.delete(key)
        else:
            self.expires[key] = at_ms

    def pexpiretime(self, key: str) -> int:
        if not self.alive(key):
            return -2
        return self.expires.get(key, -1)

    def zset(self, key: str) -> dict[str, Score]:
        if key not in self.zsets or not self.alive(key):
            self.zsets[key] = {}
        return self.zsets[key]

    def hash(self, key: str) -> dict[bytes, bytes]:
        if key not in self.hashes or not self.alive(key):
            self.hashes[key] = {}
        return self.hashes[key]

    def hash_or_none(self, key: str) -> dict[bytes, bytes] | None:
        return self.hashes.get(key) if self.alive(key) else None

    def zset_or_none(self, key: str) -> dict[str, Score] | None:
        return self.zsets.get(key) if self.alive(key) else None

    def hdel(self, key: str, names: Iterable[object]) -> None:
        held = self.hash_or_none(key)
        if held is None:
            return
        for name in names:
            held.pop(_b(name), None)
        if not held:
            self.delete(key)

    def zrem(self, key: str, members: Iterable[str]) -> None:
        held = self.zset_or_none(key)
        if held is None:
            return
        for member in members:
            held.pop(member, None)
        if not held:
            self.delete(key)

    def hincrby(self, key: str, name: bytes, by: int) -> int:
        held = self.hash(key)
        value = int(held.get(name, b"0")) + by
        held[name] = str(value).encode()
        return value

    def members(self) -> int:
        """Board members held (the fold's memory bound counts these)."""
        return sum(len(z) for z in self.zsets.values())

    # -- the reads of sinks.boards.reads.read_commands ---------------------------

    def answer(self, command: tuple[Any, ...]) -> Any:
        name, key, *rest = command
        if name == "HGET":
            held = self.hash_or_none(key)
            return None if held is None else held.get(_b(rest[0]))
        if name == "HMGET":  # the dedupe bags of every record: spared a call per field
            held = self.hash_or_none(key) or {}
            get = held.get
            return [get(n.encode() if type(n) is str else _b(n)) for n in rest]
        if name == "ZMSCORE":
            board = self.zset_or_none(key) or {}
            return [None if (s := board.get(m)) is None else float(s) for m in rest]
        if name == "SMEMBERS":
            return set(self.sets.get(key, ())) if self.alive(key) else set()
        raise ValueError(f"a replay does not read with {name}")


class Unfolded(Exception):
    """A write the in-memory fold does not apply (the store hands on to Redis)."""


def foldable(plan: WritePlan) -> bool:
    """Whether every group write of ``plan`` can be applied in memory."""
    if plan.dense_catch_up:
        return False
    return all(w.teams is None and w.dense_outbox is None and not w.changes for w in plan.groups)


class MemoryBoardStore:
    """The board store's reads and group writes, on a :class:`Keyspace`."""

    def __init__(self, keyspace: Keyspace | None = None) -> None:
        self.keyspace = keyspace if keyspace is not None else Keyspace()

    def absent(self, key: str, player: str) -> bool:
        """Whether a read of ``player`` on the board ``key`` would find nothing.

        Exact without the expiry check: a member of an expired board is not
        absent here, and reading it answers None as Redis would.
        """
        board = self.keyspace.zsets.get(key)
        return board is None or player not in board

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]:
        self.keyspace.now_ms = int(time.time() * 1000)
        answers = [self.keyspace.answer(c) for c in read_commands(many, (), ())]
        return parse_reads(many, 0, answers)[0]

    def apply_many(self, plans: Sequence[WritePlan]) -> list[int]:
        if not all(foldable(p) for p in plans):
            raise Unfolded("a team or sharded dense game's write")
        self.keyspace.now_ms = int(time.time() * 1000)
        return [apply_write(self.keyspace, w) for p in plans for w in p.groups]


def apply_write(ks: Keyspace, write: GroupWrite) -> int:
    """One group write, as ``apply_group.lua`` applies it (epoch 0, no change stream)."""
    field_name, offset = write.watermark
    wm = ks.hash_or_none(write.keys.watermarks)
    stored = None if wm is None else wm.get(field_name.encode())
    cur = -1 if stored is None else int(stored)
    if cur >= offset:
        return 0
    if cur != write.expected:
        return -2 - cur
    for move in write.distinct:
        _distinct(ks, move)
    for key, members in write.zadd.items():
        if members:
            ks.zset(key).update(members)
    for key, players in write.zrem.items():
        ks.zrem(key, players)
    for key, at in write.expire_at_s.items():
        ks.expire_at_ms(key, at * 1000)
    if write.new_windows:
        if write.keys.boards not in ks.sets or not ks.alive(write.keys.boards):
            ks.sets[write.keys.boards] = set()
        ks.sets[write.keys.boards].update(write.new_windows)
    _seen(ks, write)
    for key, values in write.counts.items():
        if values:
            ks.hash(key).update((_b(n), _b(v)) for n, v in values.items())
    stats = write.keys.stats
    for name, by in write.stats.items():
        if by != 0:
            ks.hincrby(stats, _b(name), by)
            ks.merges[stats] = Merge.INCR
    _metadata(ks, write)
    for key, names in write.hdel.items():
        ks.hdel(key, names)
    ks.hash(write.keys.watermarks)[field_name.encode()] = str(offset).encode()
    return 1


def _seen(ks: Keyspace, write: GroupWrite) -> None:
    merge = Merge.APPEND if write.seen_append else Merge.SET
    for key, ids in write.seen.items():
        held = ks.hash(key)
        if write.seen_append:
            get = held.get
            for name, value in ids.items():
                raw = name.encode() if type(name) is str else _b(name)
                held[raw] = get(raw, b"") + (value if type(value) is bytes else _b(value))
        else:
            held.update((_b(n), _b(v)) for n, v in ids.items())
        ks.merges[key] = merge
        # EXPIRE key ttl: from this write on.
        ks.expire_at_ms(key, ks.now_ms + write.seen_ttl_s * 1000)


def _metadata(ks: Keyspace, write: GroupWrite) -> None:
    boards = dict.fromkeys(write.zadd)
    boards.update(dict.fromkeys(write.zrem))
    boards.update(dict.fromkeys(write.metadata))
    for board in boards:
        entry = write.metadata.get(board)
        key = entry_metadata_key(board) if entry is None else entry.key
        if ks.hash_or_none(key) is not None:
            ks.hdel(key, write.zadd.get(board, ()))
            ks.hdel(key, write.zrem.get(board, ()))
            if entry is not None:
                ks.hdel(key, entry.clear)
        if entry is not None and entry.set:
            ks.hash(key).update((_b(p), _b(m)) for p, m in entry.set.items())
            if entry.expire_at_s > 0:
                ks.expire_at_ms(key, entry.expire_at_s * 1000)


def _distinct(ks: Keyspace, move: DistinctWrite) -> None:
    """One board's distinct-score counts, as the script's dense section moves them."""
    board, counts, scores = move.board, move.counts, move.scores
    present = ks.alive(board)
    if not present:
        ks.delete(counts)
        ks.delete(scores)
    floors: list[str] = []
    delta: list[int] = []
    for floor, (came, gone) in move.floors.items():
        floors.append(floor)
        delta.append(came - gone if present else came)
    total = sum(delta)
    if move.unknown and present:
        index = {f: k for k, f in enumerate(floors)}
        held = ks.zsets[board]
        for member in move.unknown:
            value = held.get(member)
            if value is None:
                continue
            v = float(value)
            floor = str(int(v - math.fmod(v, move.slots)))
            k = index.get(floor)
            if k is None:
                k = index[floor] = len(floors)
                floors.append(floor)
                delta.append(0)
            delta[k] -= 1
            total -= 1
    dense_apply(ks, counts, scores, floors, delta, total)
    ks.merges[counts] = Merge.DENSE
    ks.derived.add(scores)
    exp = move.expire_at_s
    if exp == 0:
        exp = ks.pexpiretime(board) // 1000
    if exp > 0:
        ks.expire_at_ms(counts, exp * 1000)
        ks.expire_at_ms(scores, exp * 1000)


def dense_apply(
    ks: Keyspace, counts: str, scores: str, floors: list[str], delta: list[int], total: int
) -> None:
    """``dense_lib.lua``'s ``dense_apply`` on the keyspace."""
    held = ks.hash_or_none(counts) or {}
    put: list[tuple[bytes, bytes]] = []
    gone: list[str] = []
    enter: list[str] = []
    leave: list[str] = []
    for floor, d in zip(floors, delta, strict=True):
        had = int(held.get(floor.encode(), b"0"))
        now = had + d
        if now == had:
            continue
        if now > 0:
            put.append((floor.encode(), str(now).encode()))
            if had <= 0:
                enter.append(floor)
        elif had != 0:
            gone.append(floor)
            if had > 0:
                leave.append(floor)
    if put:
        ks.hash(counts).update(put)
    if gone:
        ks.hdel(counts, gone)
    if enter:
        ks.zset(scores).update((f, int(f)) for f in enter)
    if leave:
        ks.zrem(scores, leave)
    if total != 0 and ks.hincrby(counts, b"#", total) == 0:
        ks.hdel(counts, [b"#"])


# -- the load ---------------------------------------------------------------------

#: Appends each value to what its field holds (dedupe bags), as the group write does.
APPEND_FIELDS = Script(
    """
-- KEYS[1] a hash; ARGV (field, value)*
local fields = {}
for j = 1, #ARGV, 2 do fields[#fields + 1] = ARGV[j] end
local held = redis.call('HMGET', KEYS[1], unpack(fields))
local out = {}
for j = 1, #fields do
  out[2 * j - 1] = fields[j]
  out[2 * j] = (held[j] or '') .. ARGV[2 * j]
end
redis.call('HSET', KEYS[1], unpack(out))
return #fields
"""
)

#: Adds one process's distinct-score counts to what the board's counts hold.
MERGE_COUNTS = Script(
    DENSE_LIB
    + """
-- KEYS[1] counts hash, KEYS[2] scores set; ARGV: per, total, then (floor, holders)*
local floors, delta = {}, {}
for j = 3, #ARGV, 2 do floors[#floors + 1] = ARGV[j]; delta[#delta + 1] = tonumber(ARGV[j + 1]) end
dense_apply(KEYS[1], KEYS[2], floors, delta, tonumber(ARGV[2]), tonumber(ARGV[1]))
return #floors
"""
)


class _Trips:
    """Load commands, :data:`LOAD_PER_TRIP` to a round trip, several trips in flight.

    On a standalone Redis packed by hiredis (:class:`sinks.wire.RawPipeline`),
    the replies of a trip read while Redis applies the next ones; on a cluster
    through redis-py's pipeline, which routes each command to its node.
    """

    IN_FLIGHT = 8

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._raw = None if isinstance(client, RedisCluster) else RawPipeline(client)
        #: What packs a board's ``ZADD`` calls, when the connection takes packed ones.
        self.packer = None if self._raw is None else PACKER
        self._queue: list[tuple[Any, ...] | bytes] = []
        self._unread = 0

    def add(self, *command: Any) -> None:
        self._push(command)

    def add_packed(self, command: bytes) -> None:
        """A command packed already (only when :attr:`packer` is set)."""
        self._push(command)

    def _push(self, command: tuple[Any, ...] | bytes) -> None:
        self._queue.append(command)
        if len(self._queue) >= LOAD_PER_TRIP:
            self._send()

    def script(self, script: Script, calls: list[tuple[list[str], list[Any]]]) -> None:
        """Every call of ``script`` (after what is queued)."""
        self.flush()
        if self._raw is not None:
            _checked(self._raw.eval_many(script, calls))
        else:
            for keys, args in calls:
                script(self._client, keys, args)

    def _send(self) -> None:
        queue, self._queue = self._queue, []
        if self._raw is None:
            pipe = self._client.pipeline(transaction=False)
            for command in queue:
                assert isinstance(command, tuple), "packed commands need a RawPipeline"
                pipe.execute_command(*command)
            _checked(pipe.execute(raise_on_error=False))
            return
        self._raw.send(queue)
        self._unread += 1
        if self._unread >= self.IN_FLIGHT:
            _checked(self._raw.run([]))
            self._unread = 0

    def flush(self) -> None:
        if self._queue:
            self._send()
        if self._raw is not None and self._unread:
            _checked(self._raw.run([]))
            self._unread = 0


def board_order(members: dict[str, Score], run: int = LOAD_RUN) -> Iterator[list[str]]:
    """A board's members in score order, in consecutive runs of about ``run`` members.

    Each run is sorted only when the one before has been sent, so Redis
    inserts the earlier runs while this process sorts the next: sorting a
    whole 5M-member board first kept Redis idle for seconds per board. The
    runs' bounds are scores of an evenly spaced sample of the members. Equal
    scores come in any order: Redis orders them by member itself, wherever
    ``ZADD`` meets them; what the order sent decides is how fast it inserts
    (neighbours after neighbours). Sorting by the score alone costs about a
    third of sorting ``(score, member)`` pairs.
    """
    get = members.__getitem__
    runs = len(members) // max(1, run)
    if runs < 2:
        if members:
            yield sorted(members, key=get)
        return
    sample = sorted(islice(members.values(), 0, None, max(1, len(members) // (runs * 16))))
    bounds = sorted({sample[len(sample) * k // runs] for k in range(1, runs)})
    buckets: list[list[str]] = [[] for _ in range(len(bounds) + 1)]
    for member, score in members.items():
        buckets[bisect_right(bounds, score)].append(member)
    for bucket in buckets:
        if bucket:
            bucket.sort(key=get)
            yield bucket


def _checked(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise ServiceError(f"loading the folded replay into Redis failed: {reply}")


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for at in range(0, len(items), size):
        yield items[at : at + size]


#: ``(entries sent, entries to load)`` as a load goes out: board members and hash fields.
LoadProgress = Callable[[int, int], None]


def load(client: RedisClient, ks: Keyspace, progress: LoadProgress | None = None) -> int:
    """Write the keyspace into Redis (see the module docstring); returns members and fields.

    Boards go in the order of their names, the same in every replay process,
    so the processes insert into the same board at about the same time, each in
    score order: Redis walks one skip list, near where it just inserted, rather
    than two at once (which cost it more ``ZADD`` time when tried).
    ``progress`` hears of the entries sent (board members and hash fields),
    after each hash and every :data:`LOAD_CHUNK` members of a board.
    """
    ks.now_ms = int(time.time() * 1000)
    trips = _Trips(client)
    # (alive() deletes a due key: every walk here is over a copy of the names.)
    boards = [k for k in sorted(ks.zsets) if k not in ks.derived and ks.alive(k)]
    hashes = [k for k in list(ks.hashes) if ks.alive(k)]
    total = sum(len(ks.zsets[k]) for k in boards) + sum(len(ks.hashes[k]) for k in hashes)
    sent = 0

    def went(entries: int) -> None:
        nonlocal sent
        sent += entries
        if progress is not None:
            progress(sent, total)

    went(0)
    for key in list(ks.sets):
        if ks.alive(key):
            trips.add("SADD", key, *ks.sets[key])
    for key in hashes:  # the dedupe ids, counters and metadata, then the boards
        went(_load_hash(trips, key, ks))
    for key in boards:
        for chunk in _load_board(trips, key, ks):
            went(chunk)
    trips.flush()
    for key, at_ms in list(ks.expires.items()):
        if ks.alive(key):
            # Only ever raised: another process's later write of a shared key wins.
            trips.add("PEXPIREAT", key, at_ms, "NX")
            trips.add("PEXPIREAT", key, at_ms, "GT")
    trips.flush()
    return sent


def _load_board(trips: _Trips, key: str, ks: Keyspace) -> Iterator[int]:
    """One board's members in score order, :data:`LOAD_CHUNK` to a ``ZADD``; yields each count."""
    board = ks.zsets[key]
    if trips.packer is not None:
        try:
            packer = trips.packer(key, board, LOAD_CHUNK)
        except (TypeError, ValueError, OverflowError) as exc:  # as Redis would refuse it
            raise ServiceError(
                f"loading the folded replay into Redis failed: {key}: {exc}"
            ) from exc
        left = len(board)
        for packed in packer:
            trips.add_packed(packed)
            yield min(LOAD_CHUNK, left)
            left -= LOAD_CHUNK
        return
    for ordered in board_order(board):
        for chunk in _chunks(ordered, LOAD_CHUNK):
            args: list[Score | str] = [0] * (2 * len(chunk))
            args[0::2] = list(map(board.__getitem__, chunk))
            args[1::2] = chunk
            trips.add("ZADD", key, *args)
            yield len(chunk)


def _load_hash(trips: _Trips, key: str, ks: Keyspace) -> int:
    held = ks.hashes[key]
    merge = ks.merges.get(key, Merge.SET)
    items = list(held.items())
    if merge is Merge.SET:
        for chunk in _chunks(items, LOAD_CHUNK):
            trips.add("HSET", key, *(x for pair in chunk for x in pair))
    elif merge is Merge.INCR:
        for name, value in items:
            trips.add("HINCRBY", key, name, int(value))
    elif merge is Merge.APPEND:
        chunks = _chunks(items, SCRIPT_CHUNK)
        trips.script(APPEND_FIELDS, [([key], [x for p in c for x in p]) for c in chunks])
    else:
        scores = key.replace(":meta:dense:n:", ":meta:dense:s:", 1)
        total = int(held.get(b"#", b"0"))
        counted = [(n, int(v)) for n, v in items if n != b"#"]
        calls: list[tuple[list[str], list[Any]]] = []
        for at, chunk in enumerate(_chunks(counted, SCRIPT_CHUNK) if counted else [[]]):
            args: list[Any] = [SCRIPT_CHUNK, total if at == 0 else 0]
            calls.append(([key, scores], args + [x for pair in chunk for x in pair]))
        trips.script(MERGE_COUNTS, calls)
    return len(items)


class FoldingStore:
    """In memory while it can, then through Redis (see the module docstring)."""

    def __init__(
        self,
        client: RedisClient,
        redis_store: RedisBoardStore,
        bound: int,
        planner: BoardPlanner | None = None,
        loading: LoadProgress | None = None,
    ) -> None:
        """A fold bounded by ``bound`` board members; ``planner`` is the replay's.

        ``loading`` hears how the load of the fold's boards goes (:func:`load`).

        While the fold lasts, the planner is told which values the fold does not
        hold (not read), and its group writes are not split in pieces: the pieces
        bound how long a reader of Redis waits behind one write, and nobody reads
        the fold (fewer, larger writes cost less per record).
        """
        self._client = client
        self._redis = redis_store
        self._bound = bound
        self._memory: MemoryBoardStore | None = MemoryBoardStore()
        self._planner = planner
        self._loading = loading
        self._max_updates = 0 if planner is None else planner.max_updates
        if planner is not None:
            planner.absent = self._memory.absent
            planner.max_updates = 0
        #: Why the fold handed on to Redis (None: it did not).
        self.handed_on: str | None = None

    @property
    def folding(self) -> bool:
        return self._memory is not None

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]:
        if self._memory is not None:
            return self._memory.read_many(many)
        return self._redis.read_many(many)

    def apply_many(self, plans: Sequence[WritePlan]) -> list[int]:
        memory = self._memory
        if memory is not None:
            if not all(foldable(p) for p in plans):
                self.hand_on("a team game or a sharded dense game")
            else:
                answers = memory.apply_many(plans)
                if memory.keyspace.members() > self._bound:
                    self.hand_on(f"more than {self._bound:,} board members in memory")
                return answers
        return self._redis.apply_many(plans)

    def hand_on(self, why: str) -> None:
        """Load what the fold holds and write through Redis from now on."""
        if self._memory is not None:
            self.finish()
            self.handed_on = why

    def finish(self) -> None:
        """Load what the fold holds (the end of the replay's ranges); Redis is read from now on."""
        if self._memory is not None:
            load(self._client, self._memory.keyspace, self._loading)
            self._memory = None
            if self._planner is not None:
                self._planner.absent = None
                self._planner.max_updates = self._max_updates
