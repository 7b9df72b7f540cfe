"""The planner: which reads a batch needs, and the atomic group writes it becomes.

:meth:`BoardPlanner.lookups` says what to read, :meth:`BoardPlanner.plan` turns
the answers into a :class:`~domain.planner.model.WritePlan` (one or more
:class:`~domain.planner.model.GroupWrite` per board group, see
:func:`~domain.planner.fold.pieces`), :meth:`BoardPlanner.commit` takes the plan
into the caches once it is on its way to Redis. The fold itself is
:mod:`domain.planner.fold`; the package docstring says why this is exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from domain.erasure import ERASE_ALL_GAMES, is_erasure
from domain.errors import ConfigError
from domain.keys import GroupKeys, game_of_tag, group_tag, tag_of, watermark_field
from domain.operators import apply_composite, apply_composite_asc
from domain.planner.cache import GenerationalCache
from domain.planner.changes import emit
from domain.planner.dedupe import PLANNED_RATE, SeenLayout
from domain.planner.distinct import distinct_writes
from domain.planner.fold import MAX_UPDATES, Fold, fold, pieces
from domain.planner.model import (
    Board,
    Group,
    GroupWrite,
    LookupResults,
    Lookups,
    Reads,
    WritePlan,
)
from domain.planner.scan import Sources, scan
from domain.planner.tournaments import Tournaments
from domain.records import Accepted, CheckedBatch
from domain.windows import Window, WindowKind

if TYPE_CHECKING:
    from domain.games import GameConfig


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
        dedupe_rate: int = PLANNED_RATE,
        dedupe_layout: SeenLayout | None = None,
        games: Callable[[str], GameConfig | None] | None = None,
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
        ``dedupe_rate``: the events/s of one group the dedupe layout is sized
        for (:class:`~domain.planner.dedupe.SeenLayout`; 0: full event ids),
        or ``dedupe_layout`` the layout itself. Every writer of a namespace
        must use the same layout and horizon. ``games`` is the catalog's lookup:
        a group only an erasure reaches names no game, and its rules (dense-rank
        counts) come from there; None: from the records alone.
        """
        self._namespace = namespace
        #: The bound on one group write's updates (see above); public because a
        #: replay folding in memory lifts it while no reader waits on its writes.
        self.max_updates = max_updates
        self._changes = changes
        self._fresh = fresh
        self._horizon_ms = max(1, dedupe_horizon_ms)
        # Bucket b is consulted by records of buckets b-1 to b+1, so until
        # bucket b+1 ends; the TTL runs from the bucket's last write, so two
        # horizons plus a minute of lag suffice.
        self._seen_ttl_s = 2 * self._horizon_ms // 1000 + 60
        self._layout = dedupe_layout or SeenLayout.sized(self._horizon_ms, dedupe_rate)
        if self._layout.horizon_ms != self._horizon_ms:
            raise ConfigError(
                f"the dedupe layout's horizon ({self._layout.horizon_ms} ms) is not the "
                f"planner's ({self._horizon_ms} ms)"
            )
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
        self._boards: dict[tuple[str, str, str], Board] = {}
        self._keys: dict[str, GroupKeys] = {}
        self._games = games
        #: Which groups an erasure record reaches, ``(tag, partition, offset)``; None:
        #: every group of its partition. A replay that covers only some groups, or
        #: each group up to its own offset (``lb verify``, backfills), narrows it.
        self.erasure_reach: Callable[[str, int, int], bool] | None = None
        #: An exact and cheap answer to "does (board key, player) hold no value in
        #: the store?" (a replay folding in memory); where it says so, the value is
        #: not read. It spares a fresh planner whose cache has evicted a read per
        #: board of every player it meets for the first time. None: read.
        self.absent: Callable[[str, str], bool] | None = None

    # -- phase 1 ---------------------------------------------------------------

    def lookups(self, batch: CheckedBatch) -> Lookups:
        """The reads this batch needs that the caches cannot answer."""
        need = Lookups()
        field_name = watermark_field(batch.topic, batch.partition)
        layout = self._layout
        groups = need.groups = self._groups(batch)
        for group in groups:
            keys = group.keys
            if (keys.watermarks, field_name) not in self._watermarks:
                need.watermarks.append((keys.watermarks, field_name))
            found = scan(group.records, group.tokens, self._sources(keys, field_name))
            # A copy within the horizon sits in the record's bucket or a
            # neighbour: one read per dedupe key for the batch's ids (a batch
            # of a replayed history touches thousands of buckets).
            reads, at = layout.reads(keys, found.buckets)
            need.seen += reads
            need.seen_at += at
            if found.retracts and keys.boards not in self._registries:
                need.registries.append(keys.boards)
            need.scores.extend(found.missing.items())
            need.counts.extend(found.counts.items())
        return need

    def _sources(self, keys: GroupKeys, field_name: str) -> Sources:
        """What :func:`~domain.planner.scan.scan` asks of this planner for one group."""

        def board_of(rec: Accepted, window: Window) -> Board:
            return self._board(keys, rec, window)

        def counts_of(
            rec: Accepted,
            window: Window,
            asked: set[tuple[str, str]],
            counts: dict[str, list[str]],
        ) -> None:
            self._count_lookups(keys, rec, window, field_name, asked, counts)

        return Sources(
            keys.tag,
            self._horizon_ms,
            self._layout.tokenizer,
            self._entries,
            self._fresh,
            self.absent,
            board_of,
            counts_of,
        )

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
        seen_read = self._layout.found(lookups.seen_at, results.seen)
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
        reads = Reads(wm_read, seen_read, scores_read, registries_read, counts_read)
        groups = lookups.groups if lookups.groups is not None else self._groups(batch)
        for group in groups:
            plan.groups += self._plan_group(group, batch, field_name, reads, plan)
        return plan

    def _plan_group(
        self,
        group: Group,
        batch: CheckedBatch,
        field_name: str,
        reads: Reads,
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
            # Everything here was applied before a restart: nothing to write, but
            # a sharded dense shard's queued count changes may not be followed yet.
            plan.watermark_updates[wm_key] = watermark
            game = self._game(group)
            if game.dense_ranks and game.shards > 1:
                plan.dense_catch_up.append((keys.dense_outbox, field_name))
            return []
        # A RETRACT needs the complete registry (lookups() asked for it when it
        # was not cached); otherwise only this worker's own registrations matter.
        complete = self._registries.get(keys.boards)
        if complete is None and keys.boards in reads.registries:
            complete = reads.registries[keys.boards]
        state = Fold(
            keys,
            set(complete or ()) | self._registered.get(keys.boards, set()),
            Tournaments(
                group, batch, field_name, reads.counts, self._attempts, self._seats, self.cells
            ),
            self._horizon_ms,
            self._entries,
            self._board,
            reads.seen,
            reads.scores,
            self._layout,
            group.tokens,
        )
        writes: list[GroupWrite] = []
        registered: set[str] = set()
        game = self._game(group)
        dense = game.dense_ranks
        for piece in pieces(fresh, self.max_updates, len(state.registry)):
            if writes:
                state.next_piece()
            write = GroupWrite(keys=keys, seen_ttl_s=self._seen_ttl_s, expected=watermark)
            fold(state, piece, write)
            emit(state, write, plan, self._changes, game)
            if dense:
                write.distinct = distinct_writes(state, game, write)
                if game.shards > 1:
                    write.dense_outbox = keys.dense_outbox
            watermark = piece[-1].offset
            write.watermark = (field_name, watermark)
            registered.update(write.new_windows)
            writes.append(write)
        plan.watermark_updates[wm_key] = watermark
        plan.registry_updates[keys.boards] = registered
        return writes

    # -- phase 3 ---------------------------------------------------------------

    def commit(self, plan: WritePlan) -> None:
        """Redis acknowledged ``plan``: the caches may now rely on it."""
        self._entries.put_all(plan.cache_updates)
        self._attempts.put_all(plan.attempt_updates)
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

    def _groups(self, batch: CheckedBatch) -> list[Group]:
        groups: dict[str, Group] = {}
        erasures = False
        for rec in batch.accepted:
            if rec.event.game_id == ERASE_ALL_GAMES:
                erasures = True
                continue
            # Inline, not _group_of: this runs once per record.
            tag = group_tag(rec)
            group = groups.get(tag)
            if group is None:
                group = self._group_of(groups, tag)
            group.records.append(rec)
        if erasures:
            return self._erasure_groups(batch, groups)
        return list(groups.values())

    def _game(self, group: Group) -> GameConfig:
        """The rules of the group's game: a record's that names it, else the catalog's.

        An erasure names no game (it carries neutral rules), so neither the
        first record nor an erasure-only group can say whether the game keeps
        dense-rank counts; a group's own events or the catalog can.
        """
        for rec in group.records:
            if not is_erasure(rec):
                return rec.game
        found = None if self._games is None else self._games(game_of_tag(group.keys.tag))
        return found if found is not None else group.records[0].game

    def _group_of(self, groups: dict[str, Group], tag: str) -> Group:
        group = groups.get(tag)
        if group is None:
            keys = self._keys.get(tag)
            if keys is None:
                keys = self._keys[tag] = GroupKeys(self._namespace, tag)
            group = groups[tag] = Group(keys, [])
        return group

    def _erasure_groups(self, batch: CheckedBatch, batch_groups: dict[str, Group]) -> list[Group]:
        """The batch's groups when it holds erasures: each one joins every group of its partition.

        Those are the groups the partition ever wrote (this worker's watermark
        beliefs for it, which a restart seeds from the progress hash) and the
        groups of this batch: a player's events are all in their partition, so
        no other group holds the player. Each group keeps log order.
        """
        field_name = watermark_field(batch.topic, batch.partition)
        tags = set(batch_groups)
        tags.update(tag_of(key) for key, name in self._watermarks if name == field_name)
        groups: dict[str, Group] = {}
        for tag in sorted(tags):
            self._group_of(groups, tag)
        reach = self.erasure_reach
        for rec in batch.accepted:
            if is_erasure(rec):
                for tag, group in groups.items():
                    if reach is None or reach(tag, batch.partition, rec.offset):
                        group.records.append(rec)
            else:
                groups[group_tag(rec)].records.append(rec)
        return [group for group in groups.values() if group.records]

    def _board(self, keys: GroupKeys, rec: Accepted, window: Window) -> Board:
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
            board = self._boards[spec_key] = Board(
                key=keys.board(window.id),
                window_id=window.id,
                origin_ms=codec.origin_ms,
                unit_ms=unit or 0,
                slots=codec.slots,
                expire_at_s=None if expire_ms is None else -(-expire_ms // 1000),
                ascending=codec.ascending,
                apply=apply_composite_asc if codec.ascending else apply_composite,
                stop=rec.game.stops_after(window.kind),
                tournament=tournament,
                attempts_key="" if tournament is None else keys.attempts(tournament.name),
                entries_key="" if tournament is None else keys.entries(tournament.name),
                codec=codec,
            )
        return board
