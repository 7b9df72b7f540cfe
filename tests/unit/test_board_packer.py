"""The compiled ``ZADD`` packing of a replay's load (``lb_native.BoardPacker``).

Its bytes are read back with hiredis' own RESP reader (a command is an array
of bulk strings, as a reply can be) and checked against the board they came
from: every member once, in score order, each score the same double Redis
would parse from the Python path's argument, at most ``chunk`` members per
call. The same boards loaded into Redis both ways are compared in
tests/integration/test_replay_fold.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import hiredis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.replay_memory import PACKER, Score

Packer = Callable[[str, dict[str, Score], int], Iterable[bytes]]


def packer() -> Packer:
    assert PACKER is not None, "lb_native is not built: run scripts/bootstrap.sh"
    return PACKER


def commands(packed: Iterable[bytes]) -> list[list[bytes]]:
    """Each packed command as its words, read by hiredis."""
    out = []
    for one in packed:
        reader = hiredis.Reader()
        reader.feed(one)
        words = reader.gets()
        assert isinstance(words, list) and reader.gets() is False, "one whole command each"
        out.append(words)
    return out


scores = st.one_of(
    st.floats(allow_nan=False),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from([0.0, -0.0, 1e-320, 2**53 + 1, 1e300]),
)
boards = st.dictionaries(st.text(min_size=1, max_size=12), scores, max_size=60)


@given(board=boards, chunk=st.integers(min_value=1, max_value=7))
def test_every_member_once_in_redis_order_each_score_the_same_double(
    board: dict[str, Score], chunk: int
) -> None:
    got = commands(packer()("ns:g:alltime", board, chunk))
    assert len(got) == math.ceil(len(board) / chunk)
    pairs: list[tuple[float, str]] = []
    for words in got:
        assert words[:2] == [b"ZADD", b"ns:g:alltime"]
        assert 2 < len(words) <= 2 + 2 * chunk and len(words) % 2 == 0
        pairs += [(float(s), m.decode()) for s, m in zip(words[2::2], words[3::2], strict=True)]
    assert sorted(m for _, m in pairs) == sorted(board)
    assert all(score == float(board[member]) for score, member in pairs)
    # Redis' own order: by score (-0.0 and 0.0 are one), a tie by the member's bytes.
    assert pairs == sorted(pairs, key=lambda pair: (pair[0], pair[1].encode()))


def test_a_tie_comes_in_member_order_whatever_the_dict_order() -> None:
    board: dict[str, Score] = {f"p{i:05d}": 7 for i in reversed(range(2_000))}
    board.update({"z": -0.0, "a": 0.0, "m": 0})
    words = [w for call in commands(packer()("b", board, 333)) for w in call[3::2]]
    assert words[:3] == [b"a", b"m", b"z"]
    assert words[3:] == sorted(words[3:]) and len(words) == 2_003


def test_a_large_board_comes_in_full_calls_and_len_counts_its_members() -> None:
    board: dict[str, Score] = {f"p{i}": (i * 7919) % 10_007 for i in range(12_345)}
    packed = packer()("b", board, 5_000)
    assert len(packed) == 12_345
    sizes = [(len(words) - 2) // 2 for words in commands(packed)]
    assert sizes == [5_000, 5_000, 2_345]


@pytest.mark.parametrize(
    ("board", "chunk", "error", "match"),
    [
        ({"p": math.nan}, 5, ValueError, 'member "p" has a NaN score'),
        ({1: 2.0}, 5, TypeError, "member must be a str"),
        ({"p": "high"}, 5, TypeError, "must be real number, not str"),
        ({"p": 10**400}, 5, OverflowError, "too large to convert to float"),
        ({"p": 1.0}, 0, ValueError, "chunk must be at least 1"),
    ],
)
def test_what_redis_could_not_take_is_refused_before_anything_is_sent(
    board: dict[object, object], chunk: int, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        packer()("b", board, chunk)
