"""Which changes a subscriber must hear about: pure rules, the board's order in one place.

A board is highest-wins (``order = "desc"``, the default) or lowest-wins
(``order = "asc"``). Every rule below asks the same question, "is this score
at or ahead of that one?", through :func:`at_or_ahead`, so the order is
decided here and nowhere else. The rules err on the side of telling: a
change they keep may turn out to move nothing (the push then reads the
board and, for a rank, sends nothing when the answer is unchanged); a
change they drop can never alter what the subscriber was last sent.
"""

from __future__ import annotations

from collections.abc import Collection

from api.live.messages import StreamChange


def at_or_ahead(score: float, other: float, ascending: bool) -> bool:
    """Whether ``score`` ranks level with or ahead of ``other`` (ties included)."""
    return score <= other if ascending else score >= other


def reaches(change: StreamChange, mark: float, ascending: bool) -> bool:
    """Whether the change's old or new score is level with or ahead of ``mark``."""
    old, new = change.old, change.new
    return (new is not None and at_or_ahead(new, mark, ascending)) or (
        old is not None and at_or_ahead(old, mark, ascending)
    )


def touches_top(
    change: StreamChange, shown: Collection[str], floor: int | None, ascending: bool
) -> bool:
    """Whether a change may alter a top-N page last sent with ``shown`` players.

    It does when it moves a player shown, or its new score reaches the page's
    last score ``floor`` (ties included), or the page had room (``floor`` None).
    """
    if floor is None or change.player in shown:
        return True
    return change.new is not None and at_or_ahead(change.new, floor, ascending)


def alters_page(
    change: StreamChange, players: Collection[str], floor: int | None, ascending: bool
) -> bool:
    """Whether a change may make a cached page differ from a fresh read of it.

    Stricter than :func:`touches_top` (a cached page must be exact, also for
    ``nextCursor``): besides a player on the page and a new score reaching
    ``floor``, an old score at or ahead of it, any removal, and any change at
    all when nothing follows the page (``floor`` None) count.
    """
    if floor is None or change.new is None or change.player in players:
        return True
    return reaches(change, floor, ascending)


def may_move(change: StreamChange, player: str, mine: int | None, ascending: bool) -> bool:
    """Whether a change could move ``player``, whose score was ``mine`` (None: no score).

    The player's own change does, and so does a change of anyone whose old or
    new score is level with or ahead of theirs: entering, leaving or passing
    the part of the board ahead of them. A removal always counts.
    """
    if change.player == player or mine is None or change.new is None:
        return True
    return reaches(change, mine, ascending)
