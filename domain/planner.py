"""Plan the Redis writes of one partition batch: coalesced, exactly once.

The projection's state lives in Redis itself: each board group (one hash tag)
keeps, next to its boards, the last applied offset of every source partition
(``meta:wm``) and the event ids seen within the dedupe horizon. A batch is
applied to a group in one MULTI/EXEC that writes the boards, the seen ids,
the counters *and* the new watermark, so after a crash a replayed record is
recognised by its offset and skipped: every effect happens exactly once.

Planning needs current values. They come from a write-through cache that is
authoritative for this worker's players (a Kafka partition, hence a player, has
exactly one owner, and only the owner writes that player's members), falling
back to one batched read for what the cache lacks. The planner itself does no
I/O: :meth:`BoardPlanner.lookups` says what to read, :meth:`BoardPlanner.plan`
turns the answers into a :class:`WritePlan`, :meth:`BoardPlanner.commit` takes
the plan into the cache once Redis has acknowledged it.

Per (board, player) only the final value of the batch is written, and only
when it differs from the current one: most events in a steady stream cannot
change a board and cost no Redis write at all.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from domain.events import EventKind
from domain.games import GameConfig
from domain.keys import GroupKeys, shard_tag, watermark_field
from domain.operators import Entry, apply, saturates
from domain.records import Accepted, CheckedBatch
from domain.scoring import TieCodec
from domain.windows import Window, window_from_id

#: Counter names kept in ``meta:stats`` (written in the same transaction as the boards).
APPLIED = "applied"
NOOP = "noop"
DUPLICATE = "duplicate"
SATURATED = "saturated"


def shard_of(player_id: str, shards: int) -> int | None:
    """The shard of a player in a game split over ``shards`` (None when unsplit).

    CRC-32 is stable across processes and Python versions (unlike ``hash``).
    """
    if shards <= 1:
        return None
    return zlib.crc32(player_id.encode()) % shards


class GenerationalCache:
    """A bounded map with O(1) generational eviction instead of per-access LRU upkeep.

    New entries go to the young generation; when it is full the old
    generation is dropped and the young one becomes old. A hit in the old
    generation is promoted. Memory stays under ``2 * capacity`` entries.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._young: dict[tuple[str, str], int | None] = {}
        self._old: dict[tuple[str, str], int | None] = {}

    _MISSING: object = object()

    def get(self, key: tuple[str, str]) -> int | object | None:
        """The cached composite, ``None`` for a known absence, or ``_MISSING``."""
        found = self._young.get(key, self._MISSING)
        if found is self._MISSING:
            found = self._old.get(key, self._MISSING)
            if found is not self._MISSING:
                self.put(key, found)  # type: ignore[arg-type]
        return found

    def put(self, key: tuple[str, str], value: int | None) -> None:
        if len(self._young) >= self._capacity and key not in self._young:
            self._old = self._young
            self._young = {}
        self._young[key] = value

    def __len__(self) -> int:
        return len(self._young) + len(self._old)


MISSING = GenerationalCache._MISSING
#: A member whose value was never read (a RETRACT removes it without looking).
_UNKNOWN: object = object()


@dataclass
class Lookups:
    """What must be read from Redis before a batch can be planned."""

    watermarks: list[tuple[str, str]] = field(default_factory=list)
    seen: list[tuple[str, list[str]]] = field(default_factory=list)
    scores: list[tuple[str, list[str]]] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.watermarks or self.seen or self.scores or self.registries)


@dataclass
class LookupResults:
    """Redis's answers, in the order of the :class:`Lookups` lists."""

    watermarks: list[int | None] = field(default_factory=list)
    seen: list[list[int | None]] = field(default_factory=list)
    scores: list[list[float | int | None]] = field(default_factory=list)
    registries: list[set[str]] = field(default_factory=list)


@dataclass
class GroupWrite:
    """One board group's share of a batch: applied atomically (one MULTI/EXEC)."""

    keys: GroupKeys
    zadd: dict[str, dict[str, int]] = field(default_factory=dict)
    zrem: dict[str, list[str]] = field(default_factory=dict)
    expire_at_s: dict[str, int] = field(default_factory=dict)
    new_windows: list[str] = field(default_factory=list)
    seen: dict[str, dict[str, int]] = field(default_factory=dict)
    seen_ttl_s: int = 0
    watermark: tuple[str, int] = ("", -1)
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class WritePlan:
    """Everything one batch writes, grouped by hash tag, plus the cache updates."""

    partition: int
    groups: list[GroupWrite] = field(default_factory=list)
    cache_updates: dict[tuple[str, str], int | None] = field(default_factory=dict)
    watermark_updates: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Windows newly registered per registry key (SADDed by this plan).
    registry_updates: dict[str, set[str]] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        """Counters summed over groups (for logs and metrics)."""
        out: dict[str, int] = {}
        for group in self.groups:
            for name, value in group.stats.items():
                out[name] = out.get(name, 0) + value
        return out


@dataclass
class _Group:
    keys: GroupKeys
    records: list[Accepted]


class BoardPlanner:
    """Plans batches for the partitions one worker owns; holds the write-through caches."""

    def __init__(
        self,
        namespace: str,
        dedupe_horizon_ms: int,
        cache_capacity: int = 2_000_000,
    ) -> None:
        self._namespace = namespace
        self._horizon_ms = max(1, dedupe_horizon_ms)
        self._entries = GenerationalCache(cache_capacity)
        self._watermarks: dict[tuple[str, str], int] = {}
        # Complete registries (read from Redis, then kept up to date) ...
        self._registries: dict[str, set[str]] = {}
        # ... and the windows this worker registered itself, read or not.
        self._registered: dict[str, set[str]] = {}
        self._codecs: dict[tuple[str, str], TieCodec] = {}
        self._keys: dict[str, GroupKeys] = {}

    # -- phase 1 ---------------------------------------------------------------

    def lookups(self, batch: CheckedBatch) -> Lookups:
        """The reads this batch needs that the caches cannot answer."""
        need = Lookups()
        field_name = watermark_field(batch.topic, batch.partition)
        for group in self._groups(batch):
            keys = group.keys
            if (keys.watermarks, field_name) not in self._watermarks:
                need.watermarks.append((keys.watermarks, field_name))
            buckets: dict[int, list[str]] = {}
            for rec in group.records:
                bucket = rec.record_ts_ms // self._horizon_ms
                for b in (bucket, bucket - 1):
                    buckets.setdefault(b, []).append(rec.event.event_id)
            need.seen.extend((keys.seen(b), ids) for b, ids in sorted(buckets.items()))
            missing: dict[str, list[str]] = {}
            retracts = False
            for rec in group.records:
                if rec.event.kind is EventKind.RETRACT:
                    retracts = True
                    continue
                player = rec.event.player_id
                for window in rec.windows:
                    key = keys.board(window.id)
                    if self._entries.get((key, player)) is MISSING:
                        missing.setdefault(key, []).append(player)
            if retracts and keys.boards not in self._registries:
                need.registries.append(keys.boards)
            need.scores.extend((key, sorted(set(players))) for key, players in missing.items())
        return need

    # -- phase 2 ---------------------------------------------------------------

    def plan(self, batch: CheckedBatch, results: LookupResults, lookups: Lookups) -> WritePlan:
        """Fold the batch over the current values; emit only changed members."""
        field_name = watermark_field(batch.topic, batch.partition)
        wm_read = {
            key: (-1 if value is None else value)
            for (key, _), value in zip(lookups.watermarks, results.watermarks, strict=True)
        }
        seen_read: dict[str, dict[str, int]] = {}
        for (key, ids), values in zip(lookups.seen, results.seen, strict=True):
            got = seen_read.setdefault(key, {})
            for event_id, ts in zip(ids, values, strict=True):
                if ts is not None:
                    got[event_id] = ts
        scores_read: dict[tuple[str, str], int | None] = {}
        for (key, players), answers in zip(lookups.scores, results.scores, strict=True):
            for player, answer in zip(players, answers, strict=True):
                scores_read[(key, player)] = None if answer is None else int(answer)
        registries_read = dict(zip(lookups.registries, results.registries, strict=True))

        plan = WritePlan(partition=batch.partition)
        for group in self._groups(batch):
            write = self._plan_group(
                group, field_name, wm_read, seen_read, scores_read, registries_read, plan
            )
            if write is not None:
                plan.groups.append(write)
        return plan

    def _plan_group(
        self,
        group: _Group,
        field_name: str,
        wm_read: dict[str, int],
        seen_read: dict[str, dict[str, int]],
        scores_read: dict[tuple[str, str], int | None],
        registries_read: dict[str, set[str]],
        plan: WritePlan,
    ) -> GroupWrite | None:
        keys = group.keys
        wm_key = (keys.watermarks, field_name)
        watermark = self._watermarks.get(wm_key)
        if watermark is None:
            watermark = wm_read.get(keys.watermarks, -1)
        fresh = [rec for rec in group.records if rec.offset > watermark]
        if not fresh:
            # Everything here was applied before a restart: nothing to do.
            plan.watermark_updates[wm_key] = watermark
            return None

        # A RETRACT needs the complete registry (lookups() asked for it when it
        # was not cached); otherwise only this worker's own registrations matter.
        complete = self._registries.get(keys.boards)
        if complete is None and keys.boards in registries_read:
            complete = registries_read[keys.boards]
        registry = set(complete or ()) | self._registered.get(keys.boards, set())
        write = GroupWrite(keys=keys, seen_ttl_s=3 * self._horizon_ms // 1000 + 1)
        write.stats = {APPLIED: 0, NOOP: 0, DUPLICATE: 0, SATURATED: 0}
        initial: dict[tuple[str, str], int | None] = {}
        working: dict[tuple[str, str], int | None] = {}
        batch_seen: dict[str, int] = {}

        def current(key: str, player: str) -> int | None:
            slot = (key, player)
            if slot in working:
                return working[slot]
            value = self._entries.get(slot)
            if value is MISSING:
                value = scores_read.get(slot)
            initial[slot] = value  # type: ignore[assignment]
            working[slot] = value  # type: ignore[assignment]
            return value  # type: ignore[return-value]

        def remove(key: str, player: str) -> bool:
            """Drop a member; a value nobody read is removed blindly (ZREM is idempotent)."""
            slot = (key, player)
            if slot not in working:
                value = self._entries.get(slot)
                if value is MISSING:
                    value = scores_read.get(slot, _UNKNOWN)
                initial[slot] = value  # type: ignore[assignment]
                working[slot] = value  # type: ignore[assignment]
            was = working[slot]
            working[slot] = None
            return was is not None

        for rec in fresh:
            event = rec.event
            if self._is_duplicate(keys, rec, seen_read, batch_seen):
                write.stats[DUPLICATE] += 1
                continue
            batch_seen[event.event_id] = rec.record_ts_ms
            bucket_key = keys.seen(rec.record_ts_ms // self._horizon_ms)
            write.seen.setdefault(bucket_key, {})[event.event_id] = rec.record_ts_ms
            changed = False
            player = event.player_id
            if event.kind is EventKind.RETRACT:
                for window_id in sorted(registry):
                    changed = remove(keys.board(window_id), player) or changed
            else:
                for window in rec.windows:
                    key = keys.board(window.id)
                    if window.id not in registry:
                        registry.add(window.id)
                        write.new_windows.append(window.id)
                    codec = self._codec(event.game_id, rec.game, window)
                    slot = codec.slot(event.ts_ms)
                    value = current(key, player)
                    entry = None if value is None else Entry(*codec.split(value))
                    op, cap = rec.game.operator, rec.game.max_score
                    if saturates(op, entry, event.score, cap):
                        write.stats[SATURATED] += 1
                    new = apply(op, entry, event.score, slot, cap)
                    if new != entry:
                        working[(key, player)] = codec.compose(new.score, new.slot)
                        changed = True
                    expire_ms = rec.game.expire_at_ms(window)
                    if expire_ms is not None:
                        write.expire_at_s[key] = -(-expire_ms // 1000)
            write.stats[APPLIED if changed else NOOP] += 1

        for member, value in working.items():
            if value == initial[member]:
                continue
            key, player = member
            if value is None:
                write.zrem.setdefault(key, []).append(player)
            else:
                write.zadd.setdefault(key, {})[player] = value
            plan.cache_updates[member] = value
        for member, value in initial.items():
            if member not in plan.cache_updates and value is not _UNKNOWN:
                plan.cache_updates[member] = value  # remember what was read
        last = fresh[-1].offset
        write.watermark = (field_name, last)
        plan.watermark_updates[wm_key] = last
        plan.registry_updates[keys.boards] = set(write.new_windows)
        return write

    def _is_duplicate(
        self,
        keys: GroupKeys,
        rec: Accepted,
        seen_read: dict[str, dict[str, int]],
        batch_seen: dict[str, int],
    ) -> bool:
        event_id = rec.event.event_id
        earlier = batch_seen.get(event_id)
        if earlier is not None and abs(rec.record_ts_ms - earlier) <= self._horizon_ms:
            return True
        bucket = rec.record_ts_ms // self._horizon_ms
        for b in (bucket, bucket - 1):
            stored = seen_read.get(keys.seen(b), {}).get(event_id)
            if stored is not None and abs(rec.record_ts_ms - stored) <= self._horizon_ms:
                return True
        return False

    # -- phase 3 ---------------------------------------------------------------

    def commit(self, plan: WritePlan) -> None:
        """Redis acknowledged ``plan``: the caches may now rely on it."""
        for slot, value in plan.cache_updates.items():
            self._entries.put(slot, value)
        self._watermarks.update(plan.watermark_updates)
        for key, added in plan.registry_updates.items():
            self._registered.setdefault(key, set()).update(added)
            if key in self._registries:
                self._registries[key] |= added

    def remember_registries(self, lookups: Lookups, results: LookupResults) -> None:
        """Keep registries read for a batch even if it turned out to need no write."""
        for key, value in zip(lookups.registries, results.registries, strict=True):
            if key not in self._registries:
                self._registries[key] = set(value) | self._registered.get(key, set())

    # -- helpers ---------------------------------------------------------------

    def _groups(self, batch: CheckedBatch) -> Iterable[_Group]:
        groups: dict[str, _Group] = {}
        for rec in batch.accepted:
            tag = shard_tag(rec.event.game_id, shard_of(rec.event.player_id, rec.game.shards))
            group = groups.get(tag)
            if group is None:
                keys = self._keys.get(tag)
                if keys is None:
                    keys = self._keys[tag] = GroupKeys(self._namespace, tag)
                group = groups[tag] = _Group(keys, [])
            group.records.append(rec)
        return groups.values()

    def _codec(self, game_id: str, game: GameConfig, window: Window) -> TieCodec:
        key = (game_id, window.id)
        codec = self._codecs.get(key)
        if codec is None:
            if len(self._codecs) > 10_000:
                self._codecs.clear()
            codec = self._codecs[key] = game.codec(window)
        return codec


def window_of_board(window_id: str) -> Window:
    """The window a registry entry names (for readers and the rebuild swap)."""
    return window_from_id(window_id)
