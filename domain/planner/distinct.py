"""Distinct-score counts of a dense-ranked game's boards, planned with the board change.

A dense rank is 1 + the number of distinct scores better than the player's.
Counting them on read is a scan; so for a game with ``dense_ranks`` every group
write also moves, per board, a hash *score floor -> members holding it* and a
sorted set of the floors present (``domain.keys``). The planner knows each
changed member's value before and after the piece (the same values the
``ZADD``/``ZREM`` lists come from), so it sends, per board, how many members
leave and reach each score floor, and the script adjusts the counts in the same
atomic call (a few batched commands per board, not one per member), under the
same watermark guard: a replayed or refused write moves nothing, so the counts hold exactly
the board's members after every write (``tests/unit/test_distinct.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.planner.model import UNKNOWN, DistinctWrite, GroupWrite

if TYPE_CHECKING:
    from domain.games import GameConfig
    from domain.planner.fold import Fold


def distinct_writes(fold: Fold, game: GameConfig, write: GroupWrite) -> list[DistinctWrite]:
    """The counts a piece moves, per board it changes (boards whose scores all stay: none).

    ``game``: the group's rules (not its first record's: that may be an erasure).
    """
    keys = fold.keys
    out: dict[str, DistinctWrite] = {}
    for player, mine in fold.working.items():
        before = fold.initial[player]
        for window_id, value in mine.items():
            old = before.get(window_id, UNKNOWN)
            if (value == old and window_id in before) or value == UNKNOWN:
                continue
            moves = out.get(window_id)
            if moves is None:
                board = keys.board(window_id)
                moves = out[window_id] = DistinctWrite(
                    board,
                    window_id,
                    keys.dense_counts(window_id),
                    keys.dense_scores(window_id),
                    game.codec(game.window(window_id)).slots,
                    write.expire_at_s.get(board, 0),
                )
            slots = moves.slots
            new = None if value is None else value - value % slots
            if old is None:
                was = None
            elif old == UNKNOWN:
                moves.unknown.append(player)
                was = None
            else:
                was = old - old % slots
            if was == new:
                continue
            floors = moves.floors
            if was is not None:
                text = str(was)
                moved = floors.get(text)
                if moved is None:
                    floors[text] = [0, 1]
                else:
                    moved[1] += 1
            if new is not None:
                text = str(new)
                moved = floors.get(text)
                if moved is None:
                    floors[text] = [1, 0]
                else:
                    moved[0] += 1
    return [moves for moves in out.values() if moves]
