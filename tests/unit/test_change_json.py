"""The change stream's JSON is built in Python; the script only appends it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from domain.planner import Change
from sinks.boards.encoding import change_json as _change_json

ids = st.text(min_size=1, max_size=40)
scores = st.none() | st.integers(min_value=0, max_value=2**63 - 1)


@given(ids, ids, scores, scores)
def test_any_ids_and_scores_give_the_object_the_push_server_parses(
    window: str, player: str, old: int | None, new: int | None
) -> None:
    text = _change_json(Change(window, player, old, new))
    assert json.loads(text) == {
        "w": window,
        "p": player,
        "o": "" if old is None else str(old),
        "n": "" if new is None else str(new),
    }
