"""What one group's records need read before they can be folded: the planner's first pass.

Per record: its dedupe token (kept for the fold) under its record-time bucket,
and, for each board it may score on, the player's value when the planner's
cache cannot answer it; a tournament board also asks for the player's attempts
and the partition's seats. An erasure needs no read but the group's registry.

:func:`scan` is the reference. The loop also exists compiled,
``lb_native.ScanKernel`` (``native/src/scan.rs``): it fills the same dicts in
the same order and calls the same callables for boards and tournaments;
:func:`scan` uses it whenever it is built (tests/unit/test_native_planner.py
compares the two through the whole planner).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from domain.compiled import built
from domain.erasure import ERASE_ALL_GAMES
from domain.events import EventKind, ScoreEvent
from domain.planner.cache import GenerationalCache
from domain.planner.dedupe import Token
from domain.planner.model import Board
from domain.records import Accepted
from domain.windows import Window, WindowKind

#: The board of a record's window in this group.
BoardOf = Callable[[Accepted, Window], Board]
#: Adds a tournament board's count reads (``asked``, ``counts``) for a record.
CountsOf = Callable[[Accepted, Window, set[tuple[str, str]], dict[str, list[str]]], None]


@dataclass(slots=True)
class Scan:
    """One group's reads, in the order they were met."""

    #: The records' tokens per record-time bucket (``SeenLayout.reads`` asks for them).
    buckets: dict[int, list[Token]] = field(default_factory=dict)
    #: Per board key, the players whose value must be read.
    missing: dict[str, list[str]] = field(default_factory=dict)
    #: Per count key (attempts, seats), the fields to read.
    counts: dict[str, list[str]] = field(default_factory=dict)
    #: Every (key, member or field) asked once already.
    asked: set[tuple[str, str]] = field(default_factory=set)
    #: A RETRACT or an erasure is among the records (it needs the complete registry).
    retracts: bool = False


@dataclass(frozen=True, slots=True)
class Sources:
    """What the scan asks of the planner: its rules for tokens, values and boards."""

    tag: str
    horizon_ms: int
    token_of: Callable[[str], Token]
    entries: GenerationalCache[dict[str, int | None]]
    #: A fresh planner's cache misses mean "no value" until it evicts.
    fresh: bool
    absent: Callable[[str, str], bool] | None
    board_of: BoardOf
    counts_of: CountsOf


class CompiledScan(Protocol):
    """``lb_native.ScanKernel``: :func:`_records` compiled (the same reads, in the same order)."""

    def scan(
        self,
        out: Scan,
        records: list[Accepted],
        tokens: dict[str, Token],
        sources: Sources,
    ) -> None: ...


def _kernel() -> CompiledScan | None:
    kernel = built(
        "ScanKernel",
        EventKind.RETRACT,
        ERASE_ALL_GAMES,
        WindowKind.TOURNAMENT,
        list(ScoreEvent._fields),
        list(Accepted._fields),
    )
    return cast("CompiledScan | None", kernel)


#: The compiled scan (None: this module's Python, the reference it is tested against).
KERNEL = _kernel()


def scan(records: list[Accepted], tokens: dict[str, Token], sources: Sources) -> Scan:
    """The reads ``records`` (one group's, in log order) need; their tokens into ``tokens``."""
    out = Scan()
    if KERNEL is not None:
        KERNEL.scan(out, records, tokens, sources)
    else:
        _records(out, records, tokens, sources)
    return out


def _records(out: Scan, records: list[Accepted], tokens: dict[str, Token], src: Sources) -> None:
    horizon, token_of, entries, absent = src.horizon_ms, src.token_of, src.entries, src.absent
    buckets, missing, asked = out.buckets, out.missing, out.asked
    last_bucket: int | None = None
    ids: list[Token] = []
    for rec in records:
        event = rec.event
        if event.kind is EventKind.RETRACT and event.game_id == ERASE_ALL_GAMES:
            out.retracts = True  # an erasure: the registry, no dedupe id
            continue
        bucket = rec.record_ts_ms // horizon
        if bucket != last_bucket:
            last_bucket = bucket
            ids = buckets.setdefault(bucket, [])
        token = tokens[event.event_id] = token_of(event.event_id)
        ids.append(token)
        if event.kind is EventKind.RETRACT:
            out.retracts = True
            continue
        player = event.player_id
        known = entries.get((src.tag, player))
        # Fresh: judged after the get, which may itself have evicted someone.
        ask = not src.fresh or entries.evicted
        for window in rec.windows:
            if window.kind is WindowKind.TOURNAMENT:
                src.counts_of(rec, window, asked, out.counts)
            if ask and (known is None or window.id not in known):
                board = src.board_of(rec, window)
                if (absent is None or not absent(board.key, player)) and (
                    board.key,
                    player,
                ) not in asked:
                    asked.add((board.key, player))
                    missing.setdefault(board.key, []).append(player)
