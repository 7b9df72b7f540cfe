"""The compiled change-stream JSON (``lb_native.changes_json``) against the Python reference.

``sinks.boards.encoding.change_json`` says what one entry is; a write's entry
is their JSON array. The compiled builder must give the same text for any ids,
metadata and scores (escapes, non-ASCII, astral characters, big ints), and
leave to Python (None) what only Python can spell: a lone surrogate, a score
that is not an int.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.planner import Change
from sinks.boards import encoding
from sinks.boards.encoding import change_json, changes_json

ids = st.text(st.characters(exclude_categories=("Cs",)), max_size=30) | st.sampled_from(
    ('a"b', "a\\b", "\x00\x1f\x7f", "\n\r\t\b\f", "Zoë 🏎", "\u2028", "plain-id:1.2@x_y")
)
scores = st.none() | st.integers(-(2**70), 2**70)
changes = st.builds(Change, ids, ids, scores, scores, st.none() | ids)


def reference(items: list[Change]) -> str:
    return "[" + ",".join(map(change_json, items)) + "]"


def test_the_compiled_builder_is_used() -> None:
    built = encoding._COMPILED_CHANGES is not None
    assert built, "lb_native is not built: run scripts/bootstrap.sh"


@settings(max_examples=500)
@given(st.lists(changes, max_size=20))
def test_the_text_is_the_references(items: list[Change]) -> None:
    assert encoding._COMPILED_CHANGES is not None
    assert encoding._COMPILED_CHANGES(items) == reference(items)
    assert changes_json(items) == reference(items)
    assert json.loads(changes_json(items)) == json.loads(reference(items))


def test_what_only_python_can_spell_is_left_to_it() -> None:
    compiled = encoding._COMPILED_CHANGES
    assert compiled is not None
    lone = [Change("w", "p\ud800", 1, 2)]
    odd = [Change("w", "p", True, 2.5)]
    assert compiled(lone) is None and compiled(odd) is None
    # ... and the write still carries them, spelled by Python.
    assert changes_json(lone) == reference(lone) and changes_json(odd) == reference(odd)
