"""The key layout's board classification, which rebuilds and cut-overs rely on.

A rebuild moves exactly the keys :func:`jobs.namespace_swap.is_projection_key`
accepts; a board kind missing from it is silently left out of every rebuilt
group (the hourly boards of #16 were, until the prefixes came from the kinds).
"""

from __future__ import annotations

import pytest

from domain.keys import BOARD_PREFIXES, GroupKeys, is_board_suffix
from domain.windows import WindowKind
from jobs.namespace_swap import is_projection_key

BOARD_IDS = (
    "alltime",
    "daily:2026-05-04",
    "weekly:2026-W18",
    "hourly:2026-11-01T01-0700",
    "monthly:2026-11",
    "season:s3",
)
NOT_BOARDS = ("meta:wm", "meta:stats", "changes", "friends:p1", "friendsboard:p1", "topk:alltime")


def test_every_window_kind_has_a_board_prefix() -> None:
    assert len(BOARD_PREFIXES) == len(WindowKind)
    for kind in WindowKind:
        assert any(prefix.startswith(kind.value) for prefix in BOARD_PREFIXES), kind


@pytest.mark.parametrize("window_id", BOARD_IDS)
def test_boards_of_every_kind_are_boards_and_projection_keys(window_id: str) -> None:
    key = GroupKeys("lb", "g/1").board(window_id)
    assert is_board_suffix(window_id)
    assert is_projection_key(key)


@pytest.mark.parametrize("suffix", NOT_BOARDS)
def test_other_keys_are_not_boards(suffix: str) -> None:
    assert not is_board_suffix(suffix)
    assert is_projection_key(f"lb:{{g}}:{suffix}") == suffix.startswith("meta:")


def test_fill_mode_moves_every_window_but_a_tournament() -> None:
    from jobs.cutover import _fillable

    assert all(_fillable(window_id) for window_id in BOARD_IDS)
    assert not _fillable("tournament:cup")  # its seats and attempts are not in a range
    assert not any(_fillable(suffix) for suffix in NOT_BOARDS)
