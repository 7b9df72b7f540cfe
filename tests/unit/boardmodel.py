"""An in-memory model of the Redis state the board planner works against.

Not a mock of a Redis client: plain dictionaries holding the same data Redis
would hold (sorted sets, hashes, sets), answering the planner's reads the way
``sinks.boards.store.RedisBoardStore.read`` does and applying a
:class:`~domain.planner.WritePlan` with the semantics of the Lua script
``APPLY_GROUP`` in ``sinks/boards/apply_group.lua``:

* per group, if the stored watermark of the partition is ``>=`` the batch's
  offset, nothing happens (the group was applied before a crash); if it is
  anything but the plan's ``expected`` value, nothing happens either and the
  call answers -1 (Redis lost writes);
* otherwise ZADD, then ZREM (a sorted set left empty disappears, with its
  expiry), EXPIREAT (a no-op on a key that does not exist), SADD of the new
  window ids to the registry, HSET (fingerprint bags: appended to) + EXPIRE of
  the seen ids, HSET of the tournament counts (attempts, seats), HINCRBY of
  every non-zero counter, the entry metadata (when a board's metadata hash
  exists, HDEL of every member the write added or removed and of the listed
  clears; then HSET of the listed metadata and EXPIREAT) and finally HSET of
  the watermark.

Expiry never fires here; the EXPIREAT / EXPIRE values are recorded so tests
can assert them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.keys import entry_metadata_key
from domain.planner import BoardPlanner, GroupWrite, LookupResults, Lookups, PlanRound, WritePlan
from domain.planner.rounds import split_round
from domain.records import CheckedBatch


@dataclass(frozen=True)
class ZaddRecord:
    """One member written by an applied ZADD, with the value it replaced."""

    key: str
    member: str
    before: float | None
    after: float


@dataclass
class BoardModel:
    """The Redis data of a namespace, as plain dictionaries."""

    zsets: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Field -> value; dedupe fields are bytes (fingerprints) or str (event ids).
    hashes: dict[str, dict[Any, Any]] = field(default_factory=dict)
    sets: dict[str, set[str]] = field(default_factory=dict)
    #: EXPIREAT unix seconds of keys that have one (dropped when the key disappears).
    expire_at: dict[str, int] = field(default_factory=dict)
    #: Last EXPIRE (relative seconds) set on a key.
    ttl: dict[str, int] = field(default_factory=dict)
    #: Every ZADD member write that was applied, in order.
    zadds: list[ZaddRecord] = field(default_factory=list)
    #: Every ZREM member that was applied: (key, member, was it present).
    zrems: list[tuple[str, str, bool]] = field(default_factory=list)
    #: Groups applied (1) or skipped by the watermark guard (0), in order.
    outcomes: list[int] = field(default_factory=list)
    #: Entry-metadata hashes (``meta:entry:<window>``): player -> metadata.
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Bytes of one dedupe bag entry: when set, :meth:`state` gives each bag's
    #: entries sorted. Their stored order is the order writes appended them,
    #: which differs between interleavings of partitions that share a group and
    #: a bag; a lookup searches the whole bag, so no decision depends on it.
    bag_entry: int = 0

    # -- reads (RedisBoardStore.read) -------------------------------------------------

    def read(self, lookups: Lookups) -> LookupResults:
        out = LookupResults()
        for key, name in lookups.watermarks:  # HGET
            out.watermarks.append(self.hashes.get(key, {}).get(name))
        for key, ids in lookups.seen:  # HMGET
            stored = self.hashes.get(key, {})
            out.seen.append([stored.get(event_id) for event_id in ids])
        for key, players in lookups.scores:  # ZMSCORE (doubles, as redis-py returns them)
            board = self.zsets.get(key, {})
            out.scores.append([board.get(player) for player in players])
        for key in lookups.registries:  # SMEMBERS
            out.registries.append(set(self.sets.get(key, set())))
        for key, names in lookups.counts:  # HMGET
            stored = self.hashes.get(key, {})
            out.counts.append([stored.get(name) for name in names])
        return out

    # -- writes (the APPLY_GROUP script, one call per group) --------------------------

    def apply(self, plan: WritePlan, limit: int | None = None) -> list[int]:
        """Apply the groups of ``plan`` (only the first ``limit``: a crash mid-pipeline)."""
        groups = plan.groups if limit is None else plan.groups[:limit]
        results = [self._apply_group(write) for write in groups]
        self.outcomes.extend(results)
        return results

    def _apply_group(self, write: GroupWrite) -> int:
        keys = write.keys
        field_name, offset = write.watermark
        current = self.hashes.get(keys.watermarks, {}).get(field_name)
        if current is not None and current >= offset:
            return 0
        if (-1 if current is None else current) != write.expected:
            return -2 - (-1 if current is None else current)  # refused: Redis lost writes
        for key, members in write.zadd.items():
            board = self.zsets.setdefault(key, {})
            for member, score in members.items():
                value = float(score)
                self.zadds.append(ZaddRecord(key, member, board.get(member), value))
                board[member] = value
        for key, players in write.zrem.items():
            board = self.zsets.get(key, {})
            for player in players:
                self.zrems.append((key, player, player in board))
                board.pop(player, None)
            if not board:
                self._delete(key)
        for key, at in write.expire_at_s.items():
            if self._exists(key):
                self.expire_at[key] = int(at)
        if write.new_windows:
            self.sets.setdefault(keys.boards, set()).update(write.new_windows)
        for key, ids in write.seen.items():
            held = self.hashes.setdefault(key, {})
            for name, stored in ids.items():
                if write.seen_append:  # fingerprint bags: appended to
                    held[name] = held.get(name, b"") + stored
                else:
                    held[name] = int(stored)
            if self._exists(key):  # EXPIRE of a missing key does nothing
                self.ttl[key] = int(write.seen_ttl_s)
        for key, values in write.counts.items():
            self.hashes.setdefault(key, {}).update({k: int(v) for k, v in values.items()})
        for key, names in write.hdel.items():
            fields = self.hashes.get(key, {})
            for name in names:
                fields.pop(name, None)
        for name, by in write.stats.items():
            if by != 0:
                stats = self.hashes.setdefault(keys.stats, {})
                stats[name] = stats.get(name, 0) + by
        self._apply_metadata(write)
        self.hashes.setdefault(keys.watermarks, {})[field_name] = offset
        return 1

    def _apply_metadata(self, write: GroupWrite) -> None:
        boards = [*write.zadd, *(k for k in write.zrem if k not in write.zadd)]
        boards += [k for k in write.metadata if k not in boards]
        for board in boards:
            entry = write.metadata.get(board)
            key = entry.key if entry is not None else entry_metadata_key(board)
            stored = self.metadata.get(key)
            if stored:
                for member in [*write.zadd.get(board, {}), *write.zrem.get(board, [])]:
                    stored.pop(member, None)
                for member in entry.clear if entry is not None else []:
                    stored.pop(member, None)
                if not stored:
                    self.metadata.pop(key)
                    self.expire_at.pop(key, None)
            if entry is not None and entry.set:
                self.metadata.setdefault(key, {}).update(entry.set)
                if entry.expire_at_s:
                    self.expire_at[key] = entry.expire_at_s

    def _exists(self, key: str) -> bool:
        return bool(self.zsets.get(key)) or bool(self.hashes.get(key)) or bool(self.sets.get(key))

    def _delete(self, key: str) -> None:
        self.zsets.pop(key, None)
        self.expire_at.pop(key, None)
        self.ttl.pop(key, None)

    # -- views for assertions -----------------------------------------------------------

    def boards(self) -> dict[str, dict[str, float]]:
        """Every non-empty sorted set."""
        return {key: dict(board) for key, board in self.zsets.items() if board}

    def hashes_with(self, marker: str) -> dict[str, dict[Any, Any]]:
        """The hashes whose key contains ``marker`` (``:meta:wm``, ``:meta:seen:`` ...)."""
        return {key: dict(h) for key, h in self.hashes.items() if marker in key and h}

    def stats_total(self) -> dict[str, int]:
        """The counters summed over every group."""
        out: dict[str, int] = {}
        for counters in self.hashes_with(":meta:stats").values():
            for name, value in counters.items():
                out[name] = out.get(name, 0) + value
        return out

    def _canonical(self, key: str, fields: dict[Any, Any]) -> dict[Any, Any]:
        """A hash's fields; a dedupe bag's entries sorted when :attr:`bag_entry` is set."""
        if not self.bag_entry or ":meta:seen:" not in key:
            return dict(fields)
        return {
            name: _sorted_entries(value, self.bag_entry) if isinstance(value, bytes) else value
            for name, value in fields.items()
        }

    def state(self) -> dict[str, Any]:
        """Everything the projection stores (not the write logs)."""
        return {
            "boards": self.boards(),
            "hashes": {key: self._canonical(key, h) for key, h in self.hashes.items() if h},
            "sets": {key: set(s) for key, s in self.sets.items() if s},
            "metadata": {key: dict(h) for key, h in self.metadata.items() if h},
            "expire_at": dict(self.expire_at),
            "ttl_keys": set(self.ttl),
        }


def _sorted_entries(value: bytes, width: int) -> bytes:
    return b"".join(sorted(value[at : at + width] for at in range(0, len(value), width)))


def write_batch(
    items: Sequence[CheckedBatch],
    planner: BoardPlanner,
    model: BoardModel,
    crash_after_groups: int | None = None,
) -> None:
    """What ``_BoardPartition.write_batch`` does, against the model instead of Redis.

    Rounds of at most one batch per partition: every lookup of the round, one
    read, remember the registries and plan each batch, one write of every
    group, then commit each plan. With ``crash_after_groups`` the job dies
    once that many groups of this call have been written: the rest of the
    write and every later commit never happen.
    """
    budget = crash_after_groups
    pending = [batch for batch in items if batch.accepted]
    while pending:
        now, later = split_round(pending)
        round_ = PlanRound(planner, now)
        plans = round_.plan(
            [model.read(need) if need else LookupResults() for need in round_.lookups]
        )
        for plan in plans:
            if budget is not None and budget < len(plan.groups):
                model.apply(plan, limit=budget)
                return
            model.apply(plan)
            if budget is not None:
                budget -= len(plan.groups)
        round_.commit()
        pending = later


def project(batches: Iterable[CheckedBatch], planner: BoardPlanner, model: BoardModel) -> None:
    """One batch per ``write_batch`` call: lookups -> read -> plan -> apply -> commit."""
    for batch in batches:
        write_batch([batch], planner, model)
