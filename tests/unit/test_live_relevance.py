"""The live pushes' relevance rules and throttle, for both board orders, without services.

Each case is written for a highest-wins board and mirrored for a lowest-wins
one (``order = "asc"``, scores negated): the rules must say the same thing
about the same board position, whichever way the board counts.
"""

from __future__ import annotations

import pytest

from api.live.messages import StreamChange
from api.live.relevance import alters_page, at_or_ahead, may_move, touches_top
from api.live.throttle import MAX_DUE, Throttle


def _mirror(score: int | None) -> int | None:
    """The same board position on a lowest-wins board (1000 - score)."""
    return None if score is None else 1000 - score


def _change(player: str, old: int | None, new: int | None, ascending: bool) -> StreamChange:
    if ascending:
        old, new = _mirror(old), _mirror(new)
    return StreamChange("alltime", player, old, new)


def _mark(score: int | None, ascending: bool) -> int | None:
    return _mirror(score) if ascending else score


ORDERS = pytest.mark.parametrize("ascending", [False, True], ids=["desc", "asc"])


@ORDERS
def test_at_or_ahead_follows_the_order(ascending: bool) -> None:
    high, low = _mark(50, ascending), _mark(10, ascending)
    assert high is not None and low is not None
    assert at_or_ahead(high, low, ascending) and not at_or_ahead(low, high, ascending)
    assert at_or_ahead(high, high, ascending)  # ties count


#: (player, old, new) as on a highest-wins board; the player "me" has 20.
MOVES = [
    (("me", 20, 25), True),  # my own change
    (("newcomer", None, 30), True),  # enters ahead of me
    (("newcomer", None, 20), True),  # enters level with me (ties may reorder)
    (("newcomer", None, 10), False),  # enters behind me
    (("rival", 30, 40), True),  # moves ahead of me
    (("rival", 30, 10), True),  # falls from ahead to behind me
    (("rival", 10, 30), True),  # passes me
    (("rival", 10, 15), False),  # stays behind me
    (("rival", 30, None), True),  # a removal
]


@ORDERS
@pytest.mark.parametrize(("change", "moves"), MOVES)
def test_may_move_a_player_on_either_order(
    ascending: bool, change: tuple[str, int | None, int | None], moves: bool
) -> None:
    player, old, new = change
    mine = _mark(20, ascending)
    assert may_move(_change(player, old, new, ascending), "me", mine, ascending) is moves


@ORDERS
def test_a_player_without_a_score_hears_of_every_change(ascending: bool) -> None:
    assert may_move(_change("anyone", None, 1, ascending), "me", None, ascending)


#: A top page showing a and b, whose last score is 40.
TOUCHES = [
    (("a", 50, 51), True),  # a player shown
    (("z", None, 40), True),  # ties the last score
    (("z", None, 39), False),  # below the page
    (("z", 45, 30), False),  # was above the last score but not shown: a tie it lost
    (("z", 30, None), False),  # a removal of a player not shown
]


@ORDERS
@pytest.mark.parametrize(("change", "touches"), TOUCHES)
def test_touches_top_on_either_order(
    ascending: bool, change: tuple[str, int | None, int | None], touches: bool
) -> None:
    player, old, new = change
    floor = _mark(40, ascending)
    candidate = _change(player, old, new, ascending)
    assert touches_top(candidate, {"a", "b"}, floor, ascending) is touches


@ORDERS
def test_a_page_with_room_is_touched_by_anything(ascending: bool) -> None:
    assert touches_top(_change("z", None, 1, ascending), set(), None, ascending)


#: A cached page showing a and b, whose last score is 40 (something follows it).
ALTERS = [
    (("a", 50, 60), True),
    (("z", None, 40), True),
    (("z", None, 39), False),
    (("z", 39, 38), False),
    (("z", 45, 30), True),  # was at or above the last score
    (("z", 10, None), True),  # any removal
]


@ORDERS
@pytest.mark.parametrize(("change", "alters"), ALTERS)
def test_alters_page_on_either_order(
    ascending: bool, change: tuple[str, int | None, int | None], alters: bool
) -> None:
    player, old, new = change
    floor = _mark(40, ascending)
    assert alters_page(_change(player, old, new, ascending), {"a", "b"}, floor, ascending) is alters


def test_the_throttle_lets_one_push_through_per_interval_and_keeps_what_is_due() -> None:
    throttle = Throttle(0.25)
    throttle.pushed(10.0)  # the first message
    assert throttle.wait(10.0) is None  # nothing due: sleep until woken
    throttle.add(None)
    assert throttle.wait(10.1) is None
    change = StreamChange("alltime", "p", None, 1)
    throttle.add([change])
    assert throttle.wait(10.1) == pytest.approx(0.15) and not throttle.ready(10.1)
    throttle.add([change] * MAX_DUE)
    assert len(throttle.due) == MAX_DUE  # the newest kept
    assert throttle.ready(10.25) and throttle.wait(10.3) == 0.0
    throttle.pushed(10.3)
    assert (throttle.due, throttle.pending, throttle.wait(10.3)) == ([], False, None)
