"""``lb_native.pack_command`` against hiredis' ``pack_command``: the same bytes, the same refusals.

The wire (``sinks/wire.py``) packs every command of the job's round trips
with the compiled packer when it is built; Redis must receive exactly what
hiredis would have sent, for any words the job sends (``str``, ``bytes``,
``int`` of any size, ``float``), and a word hiredis refuses is refused the
same way. tests/integration/test_wire.py sends packed commands to a real Redis.
"""

from __future__ import annotations

from typing import Any

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinks.wire import PACK

words = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",))),
    st.binary(),
    st.integers(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from((0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**30)),
    st.floats(allow_nan=True, allow_infinity=True),
)


def test_the_wire_packs_with_the_compiled_packer() -> None:
    assert PACK is not hiredis.pack_command, "lb_native is not built: run scripts/bootstrap.sh"


@settings(max_examples=500)
@given(st.lists(words, min_size=1, max_size=40))
def test_the_bytes_are_hiredis(command: list[Any]) -> None:
    assert PACK(tuple(command)) == hiredis.pack_command(tuple(command))


@pytest.mark.parametrize("word", [True, None, [1], {"a": 1}, bytearray(b"ab")])
def test_words_hiredis_refuses_are_refused(word: object) -> None:
    with pytest.raises(TypeError) as ours:
        PACK(("SET", "k", word))
    with pytest.raises(TypeError) as theirs:
        hiredis.pack_command(("SET", "k", word))
    assert str(ours.value) == str(theirs.value)


def test_a_lone_surrogate_is_refused_like_hiredis() -> None:
    with pytest.raises(UnicodeEncodeError):
        PACK(("SET", "k", "\ud800"))
    with pytest.raises(UnicodeEncodeError):
        hiredis.pack_command(("SET", "k", "\ud800"))
