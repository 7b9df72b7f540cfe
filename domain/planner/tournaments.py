"""Tournament caps inside the fold: who may enter, whose attempt counts."""

from __future__ import annotations

from collections.abc import Callable

from domain.keys import shard_of
from domain.planner.cache import GenerationalCache
from domain.planner.model import (
    ATTEMPTS_USED_UP,
    TOURNAMENT_FULL,
    Board,
    Group,
    GroupWrite,
    WritePlan,
)
from domain.records import CheckedBatch


class Tournaments:
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
        group: Group,
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
        # Per player erased in the current piece: the tournaments whose attempts it forgets.
        self._erased: dict[str, set[str]] = {}

    def _attempts_of(self, player: str, board: Board, name: str) -> dict[str, int]:
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

    def _taken(self, board: Board) -> int:
        key = board.entries_key
        taken = self._seats.get(key)
        if taken is None:
            known = self._seats_known.get((key, self._field))
            taken = known if known is not None else self._read.get((key, self._field), 0)
            self._seats_before[key] = self._seats[key] = taken
        return taken

    def _locate(self) -> tuple[int, int]:
        """The seat cell of the group and the batch's partition: ``partition * shards + shard``."""
        # An attempt comes from a game's own record (an erasure names no game).
        first = next(rec for rec in self._group.records if rec.windows)
        shards = max(1, first.game.shards)
        shard = shard_of(first.event.player_id, shards) or 0
        self._cell = (self._partition * shards + shard, self._cells(self._topic, shards))
        return self._cell

    def attempt(self, board: Board, player: str) -> bool:
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

    def erase(self, player: str, names: list[str]) -> None:
        """An erasure: ``player``'s attempts in these tournaments are forgotten (fields deleted).

        Its seat stays taken (a count per partition, nothing of the player's);
        a later attempt enters the player again.
        """
        if player not in self._working:
            cached = self._attempts.get((self._tag, player))
            self._initial[player] = dict(cached) if cached is not None else {}
        self._working[player] = dict.fromkeys(names, 0)
        self._erased.setdefault(player, set()).update(names)

    def next_piece(self) -> None:
        """The counts so far become the next piece's counts before."""
        self._erased = {}
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
            erased = self._erased.get(player, ())
            for name, count in mine.items():
                if count == 0 and name in erased:
                    write.hdel.setdefault(keys.attempts(name), []).append(player)
                elif count != before.get(name):
                    write.counts.setdefault(keys.attempts(name), {})[player] = count
            plan.attempt_updates[(self._tag, player)] = mine
        for key, taken in self._seats.items():
            if taken != self._seats_before.get(key):
                write.counts.setdefault(key, {})[self._field] = taken
            plan.seat_updates[(key, self._field)] = taken
