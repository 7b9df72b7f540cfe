"""The per-event fold: a piece of one group's records over its players' values.

The hot loop of the job. :func:`fold` walks the records once: dedupe by event
id, the player's values (first sight in the piece: carried from an earlier
piece, the cache or the batch's read), then :func:`score` for each board the
record scores on. Everything a record needs is in locals or one attribute
away; what happens rarely (a new dedupe bucket, a player's first record, a
window's first touch, a RETRACT) is a method of :class:`Fold`.

The loop (:func:`_records` and :func:`score`) also exists compiled,
``lb_native.FoldKernel`` (``native/src/fold.rs``), over the same ``Fold`` state
and calling the same methods for what happens rarely: :func:`fold` uses it
whenever it is built, and this module's Python is the reference it is tested
against, plan for plan (tests/unit/test_native_planner.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from domain.compiled import built
from domain.erasure import ERASE_ALL_GAMES, tournaments_in
from domain.events import EventKind, ScoreEvent
from domain.games import Operator
from domain.keys import GroupKeys
from domain.operators import apply_composite, apply_composite_asc, saturates_composite
from domain.planner.cache import GenerationalCache
from domain.planner.dedupe import SeenLayout, Token, seen_within, sources
from domain.planner.model import (
    APPLIED,
    DUPLICATE,
    NOOP,
    SATURATED,
    UNKNOWN,
    Board,
    GroupWrite,
)
from domain.planner.tournaments import Tournaments
from domain.records import Accepted
from domain.windows import Window

#: Default bound on the Redis updates (board members and event ids) one atomic
#: group write makes (``LB_WRITE_MAX_UPDATES``): the longest a reader of the same
#: Redis waits behind the job (docs/DESIGN.md, "Bounded group writes").
MAX_UPDATES = 100

#: :func:`score`'s answer: the record changed state, an ``INCR`` total was capped.
CHANGED, CAPPED = 1, 2

_RETRACT = EventKind.RETRACT


def pieces(records: list[Accepted], bound: int, retract_cost: int) -> list[list[Accepted]]:
    """Runs of consecutive records whose Redis updates stay within ``bound`` each.

    Why: one group write is one Lua call, and Redis serves nobody else while it
    runs; game backends read the same Redis, so the updates one call may make
    bound the longest stall a reader sees. What a piece writes is one member
    per (board, player) it changed and one event id per record, so a record
    costs one update for its id, plus one per board it scores on when its
    player has no earlier record in the piece (later ones coalesce into the
    same members; a later record on a board the earlier ones missed, another
    day's, is not counted). A RETRACT costs one per registered board. A record
    is never split, so a piece holds at least one; ``bound <= 0`` keeps the
    group whole.
    """
    if bound <= 0:
        return [records]
    out: list[list[Accepted]] = []
    start = used = 0
    players: set[str] = set()
    for at, rec in enumerate(records):
        player = rec.event.player_id
        boards = retract_cost if rec.event.kind is _RETRACT else len(rec.windows)
        cost = 1 if player in players and rec.event.kind is not _RETRACT else 1 + boards
        if used and used + cost > bound:
            out.append(records[start:at])
            start, used, players = at, 0, set()
            cost = 1 + boards
        players.add(player)
        used += cost
    out.append(records[start:] if start else records)
    return out


@dataclass(slots=True)
class Fold:
    """One group's state across the pieces of one batch."""

    keys: GroupKeys
    #: The windows the group's registry holds, as far as this worker knows.
    registry: set[str]
    tally: Tournaments
    horizon_ms: int
    #: The planner's cache of players' values (read only here).
    entries: GenerationalCache[dict[str, int | None]]
    #: The board a record's window names (the planner keeps them).
    board_of: Callable[[GroupKeys, Accepted, Window], Board]
    #: The batch's reads: dedupe tokens per record-time bucket, values per (board, player).
    seen_read: dict[int, dict[Token, int]]
    scores_read: dict[tuple[str, str], int | None]
    #: How event ids become dedupe tokens and Redis fields, and the group's tokens.
    layout: SeenLayout
    tokens: dict[str, Token]
    boards: dict[str, Board] = field(default_factory=dict)
    #: Per player: the values before the current piece and as the piece goes.
    initial: dict[str, dict[str, int | None]] = field(default_factory=dict)
    working: dict[str, dict[str, int | None]] = field(default_factory=dict)
    #: Per player: the values after the earlier pieces (ahead of the cache).
    carried: dict[str, dict[str, int | None]] = field(default_factory=dict)
    #: Windows the current piece registered (once per window and piece).
    touched: set[str] = field(default_factory=set)
    #: The current piece's applied tokens per record-time bucket (its dedupe writes).
    written: dict[int, dict[Token, int]] = field(default_factory=dict)
    retracted: bool = False
    #: Per (window id, player) the piece changed: the metadata of the event
    #: that changed it last (None: an event without metadata).
    setters: dict[tuple[str, str], str | None] = field(default_factory=dict)
    #: Whether a record of the current piece carried metadata (without one, and
    #: with no value changed back, the piece's metadata needs no writes).
    annotated: bool = False

    def start(self, player: str) -> dict[str, int | None]:
        """A player's first record in the piece: their values as the piece starts."""
        cached = self.carried.get(player) if self.carried else None
        if cached is None:
            cached = self.entries.get((self.keys.tag, player))
        before = dict(cached) if cached is not None else {}
        self.initial[player] = before
        mine = self.working[player] = dict(before)
        return mine

    def board(self, rec: Accepted, window: Window) -> Board:
        """The board of ``window`` (kept for the rest of the batch)."""
        board = self.boards[window.id] = self.board_of(self.keys, rec, window)
        return board

    def touch(self, board: Board, write: GroupWrite) -> None:
        """A window's first record in the piece: register it and set its expiry.

        With every write that touches the window, not only the first: a Redis
        that lost writes may have lost the registration while this worker still
        remembers it.
        """
        self.touched.add(board.window_id)
        self.registry.add(board.window_id)
        write.new_windows.append(board.window_id)
        if board.expire_at_s is not None:
            write.expire_at_s[board.key] = board.expire_at_s

    def retract(self, player: str, mine: dict[str, int | None]) -> None:
        """A RETRACT: the player leaves every registered board of the group.

        Counted as applied whether or not the player was on a board: knowing
        would cost a read, and counts must not depend on the cache. A board
        whose value was never read keeps ``UNKNOWN`` as its value before, so
        the removal is written without knowing what it removes.
        """
        self.retracted = True
        before = self.initial[player]
        for window_id in sorted(self.registry):
            if window_id not in mine:
                key = (self.keys.board(window_id), player)
                before[window_id] = self.scores_read.get(key, UNKNOWN)
            mine[window_id] = None

    def erase(self, player: str, mine: dict[str, int | None]) -> None:
        """An erasure (``domain.erasure``): the player leaves every board and tournament here.

        Like a RETRACT, but also off boards this worker has cached and the
        registry may not list yet, and with the tournament attempts forgotten
        (the player enters again from nothing). A value it removes is announced
        as unknown (``old`` None): an erasure-only group has no game to decode
        it with, and nobody needs the erased score.
        """
        self.retracted = True
        before = self.initial[player]
        for window_id in sorted(self.registry | mine.keys()):
            if mine.get(window_id, UNKNOWN) is not None:
                before[window_id] = UNKNOWN
                mine[window_id] = None
        self.tally.erase(player, tournaments_in(self.registry))

    def next_piece(self) -> None:
        """Start a piece where the last one ended: its values and event ids are now the past."""
        if self.retracted:
            for player, mine in self.working.items():
                self.carried[player] = {w: v for w, v in mine.items() if v != UNKNOWN}
        else:
            self.carried.update(self.working)
        self.initial, self.working = {}, {}
        self.touched = set()
        self.setters = {}
        self.annotated = False
        for bucket, ids in self.written.items():
            self.seen_read.setdefault(bucket, {}).update(ids)
        self.written = {}
        self.tally.next_piece()


class CompiledFold(Protocol):
    """``lb_native.FoldKernel``: :func:`_records` compiled (the same changes to the same state)."""

    def fold(
        self, state: Fold, piece: list[Accepted], write: GroupWrite
    ) -> tuple[int, int, int, int]: ...


def _kernel() -> CompiledFold | None:
    """The compiled fold, built with the constants the rules compare against (None: not built)."""
    kernel = built(
        "FoldKernel",
        _RETRACT,
        ERASE_ALL_GAMES,
        (Operator.BEST, Operator.INCR, Operator.SET),
        (apply_composite, apply_composite_asc),
        saturates_composite,
        list(ScoreEvent._fields),
        list(Accepted._fields),
    )
    return cast("CompiledFold | None", kernel)


#: The compiled fold (None: this module's Python, the reference it is tested against).
KERNEL = _kernel()


def fold(state: Fold, piece: list[Accepted], write: GroupWrite) -> None:
    """Fold ``piece`` into ``state``'s working values; the event ids and counters into ``write``."""
    run = KERNEL.fold if KERNEL is not None else _records
    applied, noop, duplicates, saturated = run(state, piece, write)
    write.seen = state.layout.writes(state.keys, state.written)
    write.seen_append = state.layout.appends
    write.stats = {APPLIED: applied, NOOP: noop, DUPLICATE: duplicates, SATURATED: saturated}


def _records(state: Fold, piece: list[Accepted], write: GroupWrite) -> tuple[int, int, int, int]:
    """The records of ``piece``, one by one: ``(applied, noop, duplicates, saturated)``."""
    horizon = state.horizon_ms
    working, initial = state.working, state.initial
    tokens, token_of = state.tokens, state.layout.tokenizer
    applied = noop = duplicates = saturated = 0
    last_bucket: int | None = None
    ids: dict[Token, int] = {}
    known: tuple[dict[Token, int], ...] = ()
    for rec in piece:
        event = rec.event
        if event.kind is _RETRACT and event.game_id == ERASE_ALL_GAMES:
            # Neither deduplicated nor counted: one record spread over every group
            # of its partition, which groups depends on batching (a replay's may differ).
            player = event.player_id
            mine = working.get(player)
            state.erase(player, state.start(player) if mine is None else mine)
            continue
        record_ts = rec.record_ts_ms
        bucket = record_ts // horizon
        if bucket != last_bucket:
            last_bucket = bucket
            ids, known = sources(bucket, state.written, state.seen_read)
        token = tokens.get(event.event_id)
        if token is None:
            token = token_of(event.event_id)
        if seen_within(known, token, record_ts, horizon):
            duplicates += 1
            continue
        ids[token] = record_ts
        player = event.player_id
        mine = working.get(player)
        if mine is None:
            mine = state.start(player)
        if event.kind is _RETRACT:
            state.retract(player, mine)
            applied += 1
            continue
        outcome = score(state, rec, player, initial[player], mine, write)
        if outcome & CHANGED:
            applied += 1
        else:
            noop += 1
        saturated += outcome >> 1
    return applied, noop, duplicates, saturated


def score(
    state: Fold,
    rec: Accepted,
    player: str,
    before: dict[str, int | None],
    mine: dict[str, int | None],
    write: GroupWrite,
) -> int:
    """A SCORE record on each board it scores on; :data:`CHANGED` and/or :data:`CAPPED`."""
    game = rec.game
    op = game.operator
    incr = op is Operator.INCR
    best = op is Operator.BEST
    cap = game.max_score
    value = rec.event.score
    ts = rec.event.ts_ms
    meta = rec.event.metadata
    if meta is not None:
        state.annotated = True
    boards, touched, setters = state.boards, state.touched, state.setters
    out = 0
    for window in rec.windows:
        # One game per group, so a window id names one board here.
        board = boards.get(window.id) or state.board(rec, window)
        if board.tournament is not None:
            if not state.tally.attempt(board, player):
                continue  # refused (counted): this board only, not the others
            out |= CHANGED  # an attempt counted: the record changed state
        window_id = board.window_id
        if window_id not in touched:
            state.touch(board, write)
        if window_id in mine:
            current = mine[window_id]
        else:
            current = before[window_id] = mine[window_id] = state.scores_read.get(
                (board.key, player)
            )
        slot = (ts - board.origin_ms) // board.unit_ms if board.unit_ms else 0
        if incr and saturates_composite(current, value, board.slots, cap, board.ascending):
            out |= CAPPED
        new = board.apply(op, current, value, slot, board.slots, cap)
        if new == current:
            if best and board.stop:
                # Windows come narrowest first and every wider board
                # contains this one, so its best is never below: done.
                break
            continue
        mine[window_id] = new
        setters[(window_id, player)] = meta
        out |= CHANGED
    return out
