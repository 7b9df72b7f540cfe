"""What a piece changed: the members to write, the values to cache, the live changes.

The walk over the players' values before and after the piece (:func:`members`
and :func:`group_changes`) also exists compiled, ``lb_native.diff_members``
(``native/src/members.rs``): one walk where this module makes two, the same
dicts and lists in the same order, used whenever ``lb_native`` is built
(tests/unit/test_native_members.py compares the two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, cast

from domain.compiled import compiled
from domain.games import GameConfig
from domain.keys import game_of_tag
from domain.planner.model import (
    UNKNOWN,
    Board,
    Change,
    EntryMetadata,
    GroupWrite,
    TeamSync,
    WritePlan,
)
from domain.scoring import TieCodec
from domain.teams import TeamKeys

if TYPE_CHECKING:
    from domain.planner.fold import Fold


class CompiledDiff(Protocol):
    """``lb_native.diff_members``: :func:`members` and :func:`group_changes` in one walk."""

    def __call__(
        self,
        initial: dict[str, dict[str, int | None]],
        working: dict[str, dict[str, int | None]],
        prefix: str,
        tag: str,
        zadd: dict[str, dict[str, int]],
        zrem: dict[str, list[str]],
        cache: dict[tuple[str, str], dict[str, int | None]],
        retracted: bool,
        changes: list[Change] | None,
        change_type: type[Change],
        codec_of: Callable[[str], tuple[int, bool, int]],
        setters: dict[tuple[str, str], str | None] | None,
    ) -> bool: ...


#: The compiled walk (None: this module's Python, the reference).
COMPILED = cast("CompiledDiff | None", compiled("diff_members"))


def emit(fold: Fold, write: GroupWrite, plan: WritePlan, changes: bool, game: GameConfig) -> None:
    """The piece's changed members into ``write``; the players' values into the plan.

    Per (board, player) only the piece's final value is written, and only when
    it differs from the value before the piece. ``game`` is the group's game
    (its catalog rules when only an erasure reaches the group: an erasure
    names no game, yet a team game's team boards must lose what it removes).
    """
    fold.tally.emit(write, plan)
    keys = fold.keys
    want = changes or game.teams is not None
    found: list[Change] = []
    if COMPILED is not None:
        boards = fold.boards

        def codec_of(window_id: str) -> tuple[int, bool, int]:
            codec = _codec(game, boards, window_id)
            return codec.slots, codec.ascending, codec.ceiling

        reverted = COMPILED(
            fold.initial,
            fold.working,
            keys.prefix,
            keys.tag,
            write.zadd,
            write.zrem,
            plan.cache_updates,
            fold.retracted,
            found if want else None,
            Change,
            codec_of,
            fold.setters or None,
        )
    else:
        reverted = members(fold, write, plan)
        if want:
            found = group_changes(game, fold.initial, fold.working, fold.boards)
    if changes:
        write.changes = found
    if game.teams is not None and found:
        write.teams = team_sync(keys.namespace, game_of_tag(keys.tag), game, found)
    if fold.setters and (fold.annotated or reverted):
        # Otherwise every change is written by an event without metadata:
        # the script drops the old metadata of the members it rewrites.
        emit_metadata(fold, write)


def members(fold: Fold, write: GroupWrite, plan: WritePlan) -> bool:
    """The piece's changed members into ``write``, its players' values into the plan's cache.

    Answers whether a value the piece changed and changed back has a setter
    (its metadata may change although the value did not).
    """
    keys = fold.keys
    tag = keys.tag
    initial, working = fold.initial, fold.working
    #: Per window: its board's key for removals, its members in ``write.zadd`` for the rest.
    board_keys: dict[str, str] = {}
    adds: dict[str, dict[str, int]] = {}
    cache_updates = plan.cache_updates
    retracted = fold.retracted
    setters = fold.setters
    reverted = False  # a value changed and changed back: its metadata may change
    for player, mine in working.items():
        before = initial[player]
        for window_id, value in mine.items():
            if value == before.get(window_id, UNKNOWN) and window_id in before:
                if setters and not reverted:
                    reverted = (window_id, player) in setters
                continue
            if value is None:
                target = board_keys.get(window_id)
                if target is None:
                    target = board_keys[window_id] = keys.board(window_id)
                write.zrem.setdefault(target, []).append(player)
                continue
            members = adds.get(window_id)
            if members is None:
                members = adds[window_id] = write.zadd.setdefault(keys.board(window_id), {})
            members[player] = value
        # Only a RETRACT leaves values it never read (UNKNOWN); without one
        # the working dict, this piece's own, is the cache's new entry as is.
        cache_updates[(tag, player)] = (
            {w: v for w, v in mine.items() if v != UNKNOWN} if retracted else mine
        )
    return reverted


def emit_metadata(fold: Fold, write: GroupWrite) -> None:
    """The piece's entry metadata: the last change of each (board, player) decides.

    The rule: an entry's metadata is that of the event that set its current
    value, replaced only when the value changes. Where the write adds the
    member, an event with metadata sets it and one without leaves it to the
    script (which removes the old one); a value the piece changed and then
    changed back is not written, so its metadata is set or cleared here. A
    member the piece removed again has none (the script clears it too).
    """
    initial, working, keys = fold.initial, fold.working, fold.keys
    annotated: dict[tuple[str, str], str] = {}
    for (window_id, player), meta in fold.setters.items():
        value = working[player].get(window_id)
        if value is None:
            continue
        before = initial[player]
        written = not (value == before.get(window_id, UNKNOWN) and window_id in before)
        if meta is None and written:
            continue
        board = keys.board(window_id)
        entry = write.metadata.get(board)
        if entry is None:
            expire = fold.boards[window_id].expire_at_s
            entry = write.metadata[board] = EntryMetadata(
                keys.entry_metadata(window_id), expire or 0
            )
        if meta is None:
            entry.clear.append(player)
        else:
            entry.set[player] = meta
            annotated[(window_id, player)] = meta
    if annotated and write.changes:
        write.changes = [
            c._replace(meta=annotated.get((c.window_id, c.player_id))) for c in write.changes
        ]


def team_sync(namespace: str, game_id: str, game: GameConfig, found: list[Change]) -> TeamSync:
    """The team share of a write of a team game: its changes and their boards' slots."""
    assert game.teams is not None
    slots = {w: game.codec(game.window(w)).slots for w in {c.window_id for c in found}}
    return TeamSync(TeamKeys(namespace, game_id), game.teams, found, slots, game.dense_ranks)


def group_changes(
    game: GameConfig,
    initial: dict[str, dict[str, int | None]],
    working: dict[str, dict[str, int | None]],
    boards: Mapping[str, Board] | None = None,
) -> list[Change]:
    """The members whose value a group write changes, with decoded scores.

    Kept apart from the fold so live pushes add no work to its hot loop: it
    walks the same before/after values the zadd/zrem lists come from, once.
    ``boards`` (the fold's, by window id) carry their codecs; a window without
    one (a RETRACT's, from the registry) has its id parsed by the game.
    """
    codecs: dict[str, tuple[TieCodec, int]] = {}
    out: list[Change] = []
    for player, mine in working.items():
        before = initial[player]
        for window_id, value in mine.items():
            old = before.get(window_id, UNKNOWN)
            if value == old and window_id in before:
                continue
            if value is None and (old is None or old == UNKNOWN):
                out.append(Change(window_id, player, None, None))
                continue
            known = codecs.get(window_id)
            if known is None:
                codec = _codec(game, boards, window_id)
                known = codecs[window_id] = (codec, codec.slots)
            codec, size = known
            out.append(
                Change(
                    window_id,
                    player,
                    None if old is None or old == UNKNOWN else codec.stored(old // size),
                    None if value is None else codec.stored(value // size),
                )
            )
    return out


def _codec(game: GameConfig, boards: Mapping[str, Board] | None, window_id: str) -> TieCodec:
    """A window's codec: its board's (the fold's), else the game's for the window id."""
    board = boards.get(window_id) if boards else None
    codec = board.codec if board is not None else None
    return codec if codec is not None else game.codec(game.window(window_id))
