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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from domain.errors import ConfigError
from domain.events import EventKind
from domain.games import GameConfig, Operator, Tournament
from domain.keys import GroupKeys, shard_tag, watermark_field
from domain.operators import apply_composite, apply_composite_asc
from domain.records import Accepted, CheckedBatch
from domain.scoring import TieCodec
from domain.windows import Window, WindowKind

#: Counter names kept in ``meta:stats`` (written in the same transaction as the boards).
APPLIED = "applied"
NOOP = "noop"
DUPLICATE = "duplicate"
SATURATED = "saturated"
#: Tournament refusals (counted besides the outcome above, never dead-lettered): the
#: player's partition has no seat left, or the player has used every attempt.
TOURNAMENT_FULL = "tournament_full"
ATTEMPTS_USED_UP = "attempts_used_up"
#: Every counter of ``meta:stats``; the first three partition the accepted records.
COUNTERS = (APPLIED, NOOP, DUPLICATE, SATURATED, TOURNAMENT_FULL, ATTEMPTS_USED_UP)

#: Default bound on the Redis updates (board members and event ids) one atomic
#: group write makes (``LB_WRITE_MAX_UPDATES``): the longest a reader of the same
#: Redis waits behind the job (docs/BENCHMARKS.md, "Reads while the job writes").
MAX_UPDATES = 1000


def shard_of(player_id: str, shards: int) -> int | None:
    """The shard of a player in a game split over ``shards`` (None when unsplit).

    CRC-32 is stable across processes and Python versions (unlike ``hash``).
    """
    if shards <= 1:
        return None
    return zlib.crc32(player_id.encode()) % shards


def group_tag(rec: Accepted) -> str:
    """The board group (hash tag) an accepted event writes: its game, or its game's shard."""
    shards = rec.game.shards
    game_id = rec.event.game_id
    if shards <= 1:
        return game_id
    return shard_tag(game_id, shard_of(rec.event.player_id, shards))


_V = TypeVar("_V")


class GenerationalCache(Generic[_V]):
    """A bounded map with O(1) generational eviction instead of per-access LRU upkeep.

    New entries go to the young generation; when it is full the old
    generation is dropped and the young one becomes old. A hit in the old
    generation is promoted. Memory stays under ``2 * capacity`` entries.
    Values are a player's known board values (``{window id: composite or
    None}``) or tournament attempts (``{tournament: attempts}``).
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._young: dict[tuple[str, str], _V] = {}
        self._old: dict[tuple[str, str], _V] = {}
        #: Whether an entry was ever dropped (a miss may then be a forgotten value).
        self.evicted = False

    def get(self, key: tuple[str, str]) -> _V | None:
        found = self._young.get(key)
        if found is None:
            found = self._old.pop(key, None)
            if found is not None:
                self.put(key, found)
        return found

    def put(self, key: tuple[str, str], value: _V) -> None:
        if len(self._young) >= self._capacity and key not in self._young:
            self.evicted = self.evicted or bool(self._old)
            self._old = self._young
            self._young = {}
        self._young[key] = value

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    @property
    def capacity(self) -> int:
        return self._capacity


@dataclass(frozen=True, slots=True)
class _Board:
    """What the hot loop needs of one board, computed once per window."""

    key: str
    window_id: str
    origin_ms: int
    unit_ms: int  # 0: no time tie-break (every event in slot 0)
    slots: int
    expire_at_s: int | None
    #: Lowest score wins: values are ``max_score - score`` (domain.scoring).
    ascending: bool = False
    #: An unchanged ``best`` here leaves every wider board of the record unchanged.
    stop: bool = True
    #: A tournament's board: its caps, and the keys of its attempts and seats.
    tournament: Tournament | None = None
    attempts_key: str = ""
    entries_key: str = ""


#: A member whose value was never read (a RETRACT removes it without looking).
_UNKNOWN = -1


@dataclass
class Lookups:
    """What must be read from Redis before a batch can be planned."""

    watermarks: list[tuple[str, str]] = field(default_factory=list)
    seen: list[tuple[str, list[str]]] = field(default_factory=list)
    scores: list[tuple[str, list[str]]] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)
    #: Tournament counts (``HMGET``): players' attempts, partitions' seats taken.
    counts: list[tuple[str, list[str]]] = field(default_factory=list)
    #: The batch's records by board group, as :meth:`BoardPlanner.lookups` grouped
    #: them: :meth:`BoardPlanner.plan` of the same batch takes them instead of
    #: grouping again. Not a read.
    groups: list[_Group] | None = field(default=None, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.watermarks or self.seen or self.scores or self.registries or self.counts)


@dataclass
class LookupResults:
    """Redis's answers, in the order of the :class:`Lookups` lists."""

    watermarks: list[int | None] = field(default_factory=list)
    seen: list[list[int | None]] = field(default_factory=list)
    scores: list[list[float | int | None]] = field(default_factory=list)
    registries: list[set[str]] = field(default_factory=list)
    counts: list[list[int | None]] = field(default_factory=list)


class Change(NamedTuple):
    """One member's change on one board, as the live pushes announce it.

    Scores are decoded (not composites); ``None`` means "not on the board"
    (``old`` is also ``None`` when a RETRACT removed a value it never read).
    A NamedTuple: a batch of new players makes one per board per player.
    """

    window_id: str
    player_id: str
    old: int | None
    new: int | None


@dataclass
class GroupWrite:
    """One board group's share of a batch: applied atomically (one MULTI/EXEC)."""

    keys: GroupKeys
    zadd: dict[str, dict[str, int]] = field(default_factory=dict)
    zrem: dict[str, list[str]] = field(default_factory=dict)
    expire_at_s: dict[str, int] = field(default_factory=dict)
    #: Window ids the batch wrote in this group (SADDed to the registry every time).
    new_windows: list[str] = field(default_factory=list)
    seen: dict[str, dict[str, int]] = field(default_factory=dict)
    seen_ttl_s: int = 0
    watermark: tuple[str, int] = ("", -1)
    #: The stored watermark this plan was based on (-1: none). Redis refuses
    #: the write when it holds anything else below ``watermark``: it lost
    #: writes (or someone else wrote), and the plan's values are stale.
    expected: int = -1
    stats: dict[str, int] = field(default_factory=dict)
    #: What changed, appended to the group's change stream in the same atomic write.
    changes: list[Change] = field(default_factory=list)
    #: Tournament counts set to absolute values (``HSET key field value``): a
    #: player's attempts, a partition's seats taken.
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class WritePlan:
    """Everything one batch writes, grouped by hash tag, plus the cache updates."""

    partition: int
    groups: list[GroupWrite] = field(default_factory=list)
    cache_updates: dict[tuple[str, str], dict[str, int | None]] = field(default_factory=dict)
    watermark_updates: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Windows newly registered per registry key (SADDed by this plan).
    registry_updates: dict[str, set[str]] = field(default_factory=dict)
    #: Per (tag, player): the tournament attempts known after this plan.
    attempt_updates: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: Per (entries key, partition field): the seats taken after this plan.
    seat_updates: dict[tuple[str, str], int] = field(default_factory=dict)

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
        partitions: Mapping[str, int] | None = None,
        *,
        changes: bool = True,
        fresh: bool = False,
        max_updates: int = MAX_UPDATES,
    ) -> None:
        """A planner for ``namespace``.

        ``partitions`` gives each source topic's partition count, which splits
        a tournament's ``max_entries`` into per-partition seats; it is only
        needed when a game has such a tournament (see :meth:`know_partitions`).
        ``changes=False``: no change-stream entries (a replay nobody subscribes
        to). ``fresh=True`` promises that the namespace held none of this
        planner's players' board values when it started and that only this
        planner writes them (a replay into a namespace it just dropped, its
        partitions its own): until the cache first evicts, a player it has not
        seen has no board value anywhere, so none is read from Redis.
        ``max_updates`` bounds the Redis updates of one atomic group write
        (:func:`pieces`; 0: one write per group and batch, however large).
        """
        self._namespace = namespace
        self._max_updates = max_updates
        self._changes = changes
        self._fresh = fresh
        self._horizon_ms = max(1, dedupe_horizon_ms)
        # Bucket b is consulted by records of buckets b-1 to b+1, so until
        # bucket b+1 ends; the TTL runs from the bucket's last write, so two
        # horizons plus a minute of lag suffice.
        self._seen_ttl_s = 2 * self._horizon_ms // 1000 + 60
        self._entries: GenerationalCache[dict[str, int | None]] = GenerationalCache(cache_capacity)
        #: Per (tag, player): {tournament: attempts counted} (read on a miss).
        self._attempts: GenerationalCache[dict[str, int]] = GenerationalCache(cache_capacity)
        #: Per (entries key, partition field): seats that partition took (read on a miss).
        self._seats: dict[tuple[str, str], int] = {}
        self._partitions: dict[str, int] = dict(partitions or {})
        self._watermarks: dict[tuple[str, str], int] = {}
        # Complete registries (read from Redis, then kept up to date) ...
        self._registries: dict[str, set[str]] = {}
        # ... and the windows this worker registered itself, read or not.
        self._registered: dict[str, set[str]] = {}
        self._boards: dict[tuple[str, str, str], _Board] = {}
        self._keys: dict[str, GroupKeys] = {}

    # -- phase 1 ---------------------------------------------------------------

    def lookups(self, batch: CheckedBatch) -> Lookups:
        """The reads this batch needs that the caches cannot answer."""
        need = Lookups()
        field_name = watermark_field(batch.topic, batch.partition)
        horizon = self._horizon_ms
        fresh = self._fresh
        groups = need.groups = self._groups(batch)
        for group in groups:
            keys = group.keys
            tag = keys.tag
            if (keys.watermarks, field_name) not in self._watermarks:
                need.watermarks.append((keys.watermarks, field_name))
            buckets: dict[int, list[str]] = {}
            missing: dict[str, list[str]] = {}
            counts: dict[str, list[str]] = {}
            retracts = False
            asked: set[tuple[str, str]] = set()
            last_bucket: int | None = None
            ids: list[str] = []
            for rec in group.records:
                event = rec.event
                bucket = rec.record_ts_ms // horizon
                if bucket != last_bucket:
                    last_bucket = bucket
                    ids = buckets.setdefault(bucket, [])
                ids.append(event.event_id)
                if event.kind is EventKind.RETRACT:
                    retracts = True
                    continue
                player = event.player_id
                known = self._entries.get((tag, player))
                # Fresh: judged after the get, which may itself have evicted someone.
                ask = not fresh or self._entries.evicted
                for window in rec.windows:
                    if window.kind is WindowKind.TOURNAMENT:
                        self._count_lookups(keys, rec, window, field_name, asked, counts)
                    if ask and (known is None or window.id not in known):
                        board = self._board(keys, rec, window)
                        if (board.key, player) not in asked:
                            asked.add((board.key, player))
                            missing.setdefault(board.key, []).append(player)
            # A copy within the horizon, earlier or later, sits in the record's
            # bucket or one of its two neighbours: each bucket hash is asked once,
            # for the ids of its own and both neighbouring buckets (a batch of a
            # replayed history touches thousands of buckets).
            asked_seen: dict[int, list[str]] = {}
            for bucket, ids in buckets.items():
                for near in (bucket - 1, bucket, bucket + 1):
                    got = asked_seen.get(near)
                    if got is None:
                        asked_seen[near] = list(ids)
                    else:
                        got.extend(ids)
            need.seen.extend((keys.seen(near), asked_seen[near]) for near in sorted(asked_seen))
            if retracts and keys.boards not in self._registries:
                need.registries.append(keys.boards)
            need.scores.extend(missing.items())
            need.counts.extend(counts.items())
        return need

    def _count_lookups(
        self,
        keys: GroupKeys,
        rec: Accepted,
        window: Window,
        field_name: str,
        asked: set[tuple[str, str]],
        counts: dict[str, list[str]],
    ) -> None:
        """Ask for a tournament's attempts of the player, and its partition's seats, if unknown."""
        board = self._board(keys, rec, window)
        tournament = board.tournament
        assert tournament is not None
        player = rec.event.player_id
        known = self._attempts.get((keys.tag, player))
        if (known is None or tournament.name not in known) and (
            board.attempts_key,
            player,
        ) not in asked:
            asked.add((board.attempts_key, player))
            counts.setdefault(board.attempts_key, []).append(player)
        if (
            tournament.max_entries is not None
            and (board.entries_key, field_name) not in self._seats
            and (board.entries_key, field_name) not in asked
        ):
            asked.add((board.entries_key, field_name))
            counts.setdefault(board.entries_key, []).append(field_name)

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
        counts_read: dict[tuple[str, str], int] = {}
        for (key, names), counts in zip(lookups.counts, results.counts, strict=True):
            for name, count in zip(names, counts, strict=True):
                counts_read[(key, name)] = 0 if count is None else int(count)

        plan = WritePlan(partition=batch.partition)
        reads = _Reads(wm_read, seen_read, scores_read, registries_read, counts_read)
        groups = lookups.groups if lookups.groups is not None else self._groups(batch)
        for group in groups:
            plan.groups += self._plan_group(group, batch, field_name, reads, plan)
        return plan

    def _plan_group(
        self,
        group: _Group,
        batch: CheckedBatch,
        field_name: str,
        reads: _Reads,
        plan: WritePlan,
    ) -> list[GroupWrite]:
        """The group's share of the batch as one atomic write per piece (see :func:`pieces`).

        Each piece covers a run of the group's records and carries the offset
        of its last record as the group's watermark, the previous piece's as
        the one it expects: a crash between two pieces leaves Redis at the
        first piece's end, and the re-read batch skips just that prefix.
        """
        keys = group.keys
        wm_key = (keys.watermarks, field_name)
        watermark = self._watermarks.get(wm_key)
        if watermark is None:
            watermark = reads.watermarks.get(keys.watermarks, -1)
        fresh = [rec for rec in group.records if rec.offset > watermark]
        if not fresh:
            # Everything here was applied before a restart: nothing to do.
            plan.watermark_updates[wm_key] = watermark
            return []
        # A RETRACT needs the complete registry (lookups() asked for it when it
        # was not cached); otherwise only this worker's own registrations matter.
        complete = self._registries.get(keys.boards)
        if complete is None and keys.boards in reads.registries:
            complete = reads.registries[keys.boards]
        fold = _Fold(
            keys,
            set(complete or ()) | self._registered.get(keys.boards, set()),
            _Tournaments(
                group, batch, field_name, reads.counts, self._attempts, self._seats, self.cells
            ),
        )
        writes: list[GroupWrite] = []
        registered: set[str] = set()
        for piece in pieces(fresh, self._max_updates, len(fold.registry)):
            if writes:
                fold.next_piece(writes[-1], reads.seen)
            write = GroupWrite(keys=keys, seen_ttl_s=self._seen_ttl_s, expected=watermark)
            self._fold(fold, piece, reads, write)
            self._emit(fold, group, write, plan)
            watermark = piece[-1].offset
            write.watermark = (field_name, watermark)
            registered.update(write.new_windows)
            writes.append(write)
        plan.watermark_updates[wm_key] = watermark
        plan.registry_updates[keys.boards] = registered
        return writes

    def _fold(self, fold: _Fold, piece: list[Accepted], reads: _Reads, write: GroupWrite) -> None:
        """Fold a piece's records over the players' values (one frame: the hot loop)."""
        seen_read, scores_read = reads.seen, reads.scores
        keys = fold.keys
        tag = keys.tag
        registry = fold.registry
        carried = fold.carried
        tally = fold.tally
        touched: set[str] = set()
        applied = noop = duplicates = saturated = 0
        initial = fold.initial
        working = fold.working
        horizon = self._horizon_ms
        entries = self._entries
        last_bucket: int | None = None
        sources: tuple[dict[str, int], ...] = ()
        ids: dict[str, int] = {}
        boards = fold.boards

        for rec in piece:
            event = rec.event
            event_id = event.event_id
            record_ts = rec.record_ts_ms
            bucket = record_ts // horizon
            if bucket != last_bucket:
                # The same rule whether the earlier copy is in Redis or earlier in
                # this batch: its bucket or a neighbour, within the horizon.
                last_bucket = bucket
                bucket_key = keys.seen(bucket)
                ids = write.seen.setdefault(bucket_key, {})
                near = (keys.seen(bucket - 1), keys.seen(bucket + 1))
                # Only the dicts that hold something: a neighbour's write dict that is
                # empty now can only fill with a record of that bucket, and returning
                # to this one rebuilds the sources. ``ids`` itself fills as we go.
                sources = (
                    ids,
                    *(
                        got
                        for got in (
                            seen_read.get(bucket_key),
                            *(write.seen.get(key) for key in near),
                            *(seen_read.get(key) for key in near),
                        )
                        if got
                    ),
                )
            if _seen_within(sources, event_id, record_ts, horizon):
                duplicates += 1
                continue
            ids[event_id] = record_ts
            player = event.player_id
            # The player's values before the piece and as the piece goes.
            mine = working.get(player)
            if mine is None:
                cached = carried.get(player) if carried else None
                if cached is None:
                    cached = entries.get((tag, player))
                before = dict(cached) if cached is not None else {}
                initial[player] = before
                mine = working[player] = dict(before)
            else:
                before = initial[player]
            changed = False
            if event.kind is EventKind.RETRACT:
                # Counted as applied whether or not the player was on a board:
                # knowing would cost a read, and counts must not depend on the cache.
                changed = True
                fold.retracted = True
                _retract(keys, registry, scores_read, player, before, mine)
            else:
                game = rec.game
                op = game.operator
                best = op is Operator.BEST
                cap = game.max_score
                score = event.score
                ts = event.ts_ms
                capped = False
                for window in rec.windows:
                    # One game per group, so a window id names one board here.
                    board = boards.get(window.id)
                    if board is None:
                        board = boards[window.id] = self._board(keys, rec, window)
                    if board.tournament is not None:
                        if not tally.attempt(board, player):
                            continue  # refused (counted): this board only, not the others
                        changed = True  # an attempt counted: the record changed state
                    window_id = board.window_id
                    if window_id not in touched:
                        # Registered with every write that touches the window, not
                        # only the first: a Redis that lost writes may have lost
                        # the registration while this worker still remembers it.
                        touched.add(window_id)
                        registry.add(window_id)
                        write.new_windows.append(window_id)
                        if board.expire_at_s is not None:
                            write.expire_at_s[board.key] = board.expire_at_s
                    if window_id in mine:
                        current = mine[window_id]
                    else:
                        current = scores_read.get((board.key, player))
                        before[window_id] = current
                        mine[window_id] = current
                    slot = (ts - board.origin_ms) // board.unit_ms if board.unit_ms else 0
                    if board.ascending:
                        if (
                            op is Operator.INCR
                            and current is not None
                            and cap - current // board.slots + score > cap
                        ):
                            capped = True
                        new = apply_composite_asc(op, current, score, slot, board.slots, cap)
                    else:
                        if (
                            op is Operator.INCR
                            and current is not None
                            and current // board.slots + score > cap
                        ):
                            capped = True
                        new = apply_composite(op, current, score, slot, board.slots, cap)
                    if new == current:
                        if best and board.stop:
                            # Windows come narrowest first and every wider board
                            # contains this one, so its best is never below: done.
                            break
                        continue
                    mine[window_id] = new
                    changed = True
                if capped:
                    saturated += 1
            if changed:
                applied += 1
            else:
                noop += 1

        write.stats = {APPLIED: applied, NOOP: noop, DUPLICATE: duplicates, SATURATED: saturated}

    def _emit(self, fold: _Fold, group: _Group, write: GroupWrite, plan: WritePlan) -> None:
        """The piece's changed members into ``write``; the players' values into the plan."""
        fold.tally.emit(write, plan)
        keys = fold.keys
        tag = keys.tag
        initial, working = fold.initial, fold.working
        board_keys: dict[str, str] = {}
        cache_updates = plan.cache_updates
        retracted = fold.retracted
        for player, mine in working.items():
            before = initial[player]
            for window_id, value in mine.items():
                if value == before.get(window_id, _UNKNOWN) and window_id in before:
                    continue
                target = board_keys.get(window_id)
                if target is None:
                    target = board_keys[window_id] = keys.board(window_id)
                if value is None:
                    write.zrem.setdefault(target, []).append(player)
                else:
                    write.zadd.setdefault(target, {})[player] = value
            # Only a RETRACT leaves values it never read (_UNKNOWN); without one
            # the working dict, this batch's own, is the cache's new entry as is.
            cache_updates[(tag, player)] = (
                {w: v for w, v in mine.items() if v != _UNKNOWN} if retracted else mine
            )
        if self._changes:
            write.changes = group_changes(group.records[0].game, initial, working)

    # -- phase 3 ---------------------------------------------------------------

    def commit(self, plan: WritePlan) -> None:
        """Redis acknowledged ``plan``: the caches may now rely on it."""
        for member, values in plan.cache_updates.items():
            self._entries.put(member, values)
        for member, attempts in plan.attempt_updates.items():
            self._attempts.put(member, attempts)
        self._seats.update(plan.seat_updates)
        self._watermarks.update(plan.watermark_updates)
        for registry_key, added in plan.registry_updates.items():
            self._registered.setdefault(registry_key, set()).update(added)
            if registry_key in self._registries:
                self._registries[registry_key] |= added

    def beliefs(self) -> dict[tuple[str, str], int]:
        """The watermark this worker believes Redis holds, per (``meta:wm`` key, field).

        Only the owner of a partition writes its field, so Redis holding
        anything lower means Redis lost acknowledged writes.
        """
        return dict(self._watermarks)

    def assume(self, beliefs: dict[tuple[str, str], int]) -> None:
        """Start from these watermarks where nothing is believed yet (a restart).

        They come from Redis itself, checked against the progress hash the
        previous run left, so the audit covers groups this run has not written.
        """
        for pair, value in beliefs.items():
            self._watermarks.setdefault(pair, value)

    def forget(self, corrected: dict[tuple[str, str], int]) -> None:
        """Redis lost writes (or changed under us): trust nothing cached but the corrections.

        Board values and registries are dropped (they are read again on
        demand); the watermark beliefs become what Redis now holds for the
        ``corrected`` pairs, so the next plan of those groups starts from there.
        """
        self._entries = GenerationalCache(self._entries.capacity)
        self._fresh = False  # Redis changed under us: what it holds is no longer ours alone
        self._attempts = GenerationalCache(self._attempts.capacity)
        self._seats.clear()
        self._registries.clear()
        self._registered.clear()
        self._watermarks.update(corrected)

    def remember_registries(self, lookups: Lookups, results: LookupResults) -> None:
        """Keep registries read for a batch even if it turned out to need no write."""
        for key, value in zip(lookups.registries, results.registries, strict=True):
            if key not in self._registries:
                self._registries[key] = set(value) | self._registered.get(key, set())

    def know_partitions(self, topic: str, count: int) -> None:
        """``topic`` has ``count`` partitions (splits tournaments' ``max_entries``)."""
        self._partitions[topic] = count

    def cells(self, topic: str, shards: int) -> int:
        """How many seat cells a tournament of a game split over ``shards`` has on ``topic``.

        :class:`ConfigError` when the topic's partition count was never given:
        guessing it would split the seats differently from the live job.
        """
        count = self._partitions.get(topic)
        if count is None:
            raise ConfigError(
                f"the partition count of topic {topic!r} is unknown: a tournament with "
                f"max_entries splits its seats by it (BoardPlanner(partitions=...))"
            )
        return count * max(1, shards)

    # -- helpers ---------------------------------------------------------------

    def _groups(self, batch: CheckedBatch) -> list[_Group]:
        groups: dict[str, _Group] = {}
        for rec in batch.accepted:
            tag = group_tag(rec)
            group = groups.get(tag)
            if group is None:
                keys = self._keys.get(tag)
                if keys is None:
                    keys = self._keys[tag] = GroupKeys(self._namespace, tag)
                group = groups[tag] = _Group(keys, [])
            group.records.append(rec)
        return list(groups.values())

    def _board(self, keys: GroupKeys, rec: Accepted, window: Window) -> _Board:
        spec_key = (keys.tag, rec.event.game_id, window.id)
        board = self._boards.get(spec_key)
        if board is None:
            if len(self._boards) > 100_000:
                self._boards.clear()
            codec = rec.game.codec(window)
            unit = codec.resolution.unit_ms
            expire_ms = rec.game.expire_at_ms(window)
            tournament = (
                rec.game.tournament(window.id.removeprefix("tournament:"))
                if window.kind is WindowKind.TOURNAMENT
                else None
            )
            board = self._boards[spec_key] = _Board(
                key=keys.board(window.id),
                window_id=window.id,
                origin_ms=codec.origin_ms,
                unit_ms=unit or 0,
                slots=codec.slots,
                expire_at_s=None if expire_ms is None else -(-expire_ms // 1000),
                ascending=codec.ascending,
                stop=rec.game.stops_after(window.kind),
                tournament=tournament,
                attempts_key="" if tournament is None else keys.attempts(tournament.name),
                entries_key="" if tournament is None else keys.entries(tournament.name),
            )
        return board


def pieces(records: list[Accepted], bound: int, retract_cost: int) -> list[list[Accepted]]:
    """Runs of consecutive records whose Redis updates stay within ``bound`` each.

    Why: one group write is one Lua call, and Redis serves nobody else while it
    runs; game backends read the same Redis, so the updates one call may make
    bound the longest stall a reader sees. A record costs one update per
    window it scores on plus one for its event id (a RETRACT: one per
    registered window). A record is never split, so a piece holds at least
    one; ``bound <= 0`` keeps the group whole.
    """
    if bound <= 0:
        return [records]
    out: list[list[Accepted]] = []
    start = used = 0
    retract = EventKind.RETRACT
    for at, rec in enumerate(records):
        cost = 1 + (retract_cost if rec.event.kind is retract else len(rec.windows))
        if used and used + cost > bound:
            out.append(records[start:at])
            start, used = at, 0
        used += cost
    out.append(records[start:] if start else records)
    return out


def _retract(
    keys: GroupKeys,
    registry: set[str],
    scores_read: dict[tuple[str, str], int | None],
    player: str,
    before: dict[str, int | None],
    mine: dict[str, int | None],
) -> None:
    """A RETRACT: the player leaves every registered board of the group.

    A board whose value was never read keeps ``_UNKNOWN`` as its value before,
    so the removal is written without knowing what it removes.
    """
    for window_id in sorted(registry):
        if window_id not in mine:
            before[window_id] = scores_read.get((keys.board(window_id), player), _UNKNOWN)
        mine[window_id] = None


@dataclass(slots=True)
class _Fold:
    """One group's state across the pieces of one batch."""

    keys: GroupKeys
    #: The windows the group's registry holds, as far as this worker knows.
    registry: set[str]
    tally: _Tournaments
    boards: dict[str, _Board] = field(default_factory=dict)
    #: Per player: the values before the current piece and as the piece goes.
    initial: dict[str, dict[str, int | None]] = field(default_factory=dict)
    working: dict[str, dict[str, int | None]] = field(default_factory=dict)
    #: Per player: the values after the earlier pieces (ahead of the cache).
    carried: dict[str, dict[str, int | None]] = field(default_factory=dict)
    retracted: bool = False

    def next_piece(self, done: GroupWrite, seen_read: dict[str, dict[str, int]]) -> None:
        """Start a piece where ``done`` ended: its values and event ids are now the past."""
        if self.retracted:
            for player, mine in self.working.items():
                self.carried[player] = {w: v for w, v in mine.items() if v != _UNKNOWN}
        else:
            self.carried.update(self.working)
        self.initial, self.working = {}, {}
        for key, ids in done.seen.items():
            seen_read.setdefault(key, {}).update(ids)
        self.tally.next_piece()


@dataclass(frozen=True, slots=True)
class _Reads:
    """A batch's lookup answers, by key."""

    watermarks: dict[str, int]
    seen: dict[str, dict[str, int]]
    scores: dict[tuple[str, str], int | None]
    registries: dict[str, set[str]]
    counts: dict[tuple[str, str], int]


class _Tournaments:
    """One group write's tournament bookkeeping: who may enter, whose attempt counts.

    Rules (docs/GAMES.md, "Tournaments"): a player's first counted attempt
    takes one of its partition's seats in this group (``Tournament.seats``);
    with none left the attempt is refused as ``tournament_full``. A player
    who used ``max_attempts`` is refused as ``attempts_used_up``. A refusal
    only keeps the event off that tournament's board. Counts start from the
    planner's caches or the batch's read and end in :meth:`emit`, written with
    the boards and the watermark.
    """

    def __init__(
        self,
        group: _Group,
        batch: CheckedBatch,
        field_name: str,
        read: dict[tuple[str, str], int],
        attempts: GenerationalCache[dict[str, int]],
        seats: dict[tuple[str, str], int],
        cells: Callable[[str, int], int],
    ) -> None:
        """The caches are the planner's (read only here: :meth:`emit` hands updates to the plan)."""
        self._attempts = attempts
        self._seats_known = seats
        self._cells = cells
        self._group = group
        self._tag = group.keys.tag
        self._topic = batch.topic
        self._partition = batch.partition
        self._field = field_name
        self._read = read
        self._cell: tuple[int, int] | None = None  # (cell, cells), when first needed
        # Per player: attempts per tournament before the batch and as it goes.
        self._initial: dict[str, dict[str, int]] = {}
        self._working: dict[str, dict[str, int]] = {}
        # Per entries key: seats this partition took, before and as the batch goes.
        self._seats_before: dict[str, int] = {}
        self._seats: dict[str, int] = {}
        self.full = 0
        self.used_up = 0

    def _attempts_of(self, player: str, board: _Board, name: str) -> dict[str, int]:
        mine = self._working.get(player)
        if mine is None:
            cached = self._attempts.get((self._tag, player))
            before = dict(cached) if cached is not None else {}
            self._initial[player] = before
            mine = self._working[player] = dict(before)
        if name not in mine:
            count = self._read.get((board.attempts_key, player), 0)
            self._initial[player][name] = count
            mine[name] = count
        return mine

    def _taken(self, board: _Board) -> int:
        key = board.entries_key
        taken = self._seats.get(key)
        if taken is None:
            known = self._seats_known.get((key, self._field))
            taken = known if known is not None else self._read.get((key, self._field), 0)
            self._seats_before[key] = self._seats[key] = taken
        return taken

    def _locate(self) -> tuple[int, int]:
        """The seat cell of the group and the batch's partition: ``partition * shards + shard``."""
        first = self._group.records[0]
        shards = max(1, first.game.shards)
        shard = shard_of(first.event.player_id, shards) or 0
        self._cell = (self._partition * shards + shard, self._cells(self._topic, shards))
        return self._cell

    def attempt(self, board: _Board, player: str) -> bool:
        """Count one attempt of ``player`` on a tournament board; False when refused."""
        tournament = board.tournament
        assert tournament is not None
        name = tournament.name
        mine = self._attempts_of(player, board, name)
        used = mine[name]
        if used == 0:
            if tournament.max_entries is not None:
                cell, cells = self._cell or self._locate()
                taken = self._taken(board)
                seats = tournament.seats(cell, cells)
                if seats is not None and taken >= seats:
                    self.full += 1
                    return False
                self._seats[board.entries_key] = taken + 1
        elif tournament.max_attempts is not None and used >= tournament.max_attempts:
            self.used_up += 1
            return False
        mine[name] = used + 1
        return True

    def next_piece(self) -> None:
        """The counts so far become the next piece's counts before."""
        self._initial = {player: dict(mine) for player, mine in self._working.items()}
        self._seats_before = dict(self._seats)
        self.full = self.used_up = 0

    def emit(self, write: GroupWrite, plan: WritePlan) -> None:
        """Changed counts into the write, every known count into the plan's cache updates."""
        if not self._working:
            return
        if self.full:
            write.stats[TOURNAMENT_FULL] = self.full
        if self.used_up:
            write.stats[ATTEMPTS_USED_UP] = self.used_up
        keys = self._group.keys
        for player, mine in self._working.items():
            before = self._initial[player]
            for name, count in mine.items():
                if count != before.get(name):
                    write.counts.setdefault(keys.attempts(name), {})[player] = count
            plan.attempt_updates[(self._tag, player)] = mine
        for key, taken in self._seats.items():
            if taken != self._seats_before.get(key):
                write.counts.setdefault(key, {})[self._field] = taken
            plan.seat_updates[(key, self._field)] = taken


def group_changes(
    game: GameConfig,
    initial: dict[str, dict[str, int | None]],
    working: dict[str, dict[str, int | None]],
) -> list[Change]:
    """The members whose value a group write changes, with decoded scores.

    Kept apart from the fold so live pushes add no work to its hot loop: it
    walks the same before/after values the zadd/zrem lists come from, once.
    """
    codecs: dict[str, tuple[TieCodec, int]] = {}
    out: list[Change] = []
    for player, mine in working.items():
        before = initial[player]
        for window_id, value in mine.items():
            old = before.get(window_id, _UNKNOWN)
            if value == old and window_id in before:
                continue
            known = codecs.get(window_id)
            if known is None:
                codec = game.codec(game.window(window_id))
                known = codecs[window_id] = (codec, codec.slots)
            codec, size = known
            out.append(
                Change(
                    window_id,
                    player,
                    None if old is None or old == _UNKNOWN else codec.stored(old // size),
                    None if value is None else codec.stored(value // size),
                )
            )
    return out


def _seen_within(
    sources: tuple[dict[str, int], ...], event_id: str, record_ts: int, horizon_ms: int
) -> bool:
    """Whether ``sources`` record an applied copy of ``event_id`` within the horizon.

    Symmetric: a copy counts whether its record time is up to ``horizon_ms``
    before *or after* this record's, because two gateway hosts with skewed
    clocks (or a retry through another host) stamp the later copy earlier as
    often as later. Every such copy sits in the record's own bucket or one of
    its two neighbours, so the rule is the same whether the applied copy is in
    Redis or earlier in this batch, and a replay decides identically.
    """
    for seen in sources:
        stored = seen.get(event_id)
        if stored is not None and -horizon_ms <= record_ts - stored <= horizon_ms:
            return True
    return False
