"""The in-memory fold of a replay (jobs.replay_memory): its keyspace against simple oracles.

The whole fold against the Lua group writes, on real Redis, is
tests/integration/test_replay_fold.py; here the pieces: Redis' expiry rules,
the group write's watermark guard and member sections, distinct-score counts
and the order a board is loaded in.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from domain.keys import GroupKeys
from domain.planner import GroupWrite
from jobs.replay_memory import Keyspace, apply_write, board_order, dense_apply

KEYS = GroupKeys("ns", "g")
BOARD = KEYS.board("alltime")
NOW_MS = 1_800_000_000_000


def _write(offset: int, expected: int, **sections: object) -> GroupWrite:
    return GroupWrite(KEYS, watermark=("t/0", offset), expected=expected, **sections)


def test_an_expiry_not_ahead_deletes_the_key_and_a_missing_key_is_left_alone() -> None:
    ks = Keyspace(now_ms=NOW_MS)
    ks.zset("a")["p"] = 1
    ks.expire_at_ms("missing", NOW_MS + 1000)
    assert "missing" not in ks.expires
    ks.expire_at_ms("a", NOW_MS + 1000)
    assert ks.pexpiretime("a") == NOW_MS + 1000
    ks.now_ms += 1000  # due: gone on its next access, as Redis' lazy expiry does
    assert not ks.alive("a") and ks.pexpiretime("a") == -2
    ks.zset("a")["p"] = 1  # written again: a new key without a TTL
    assert ks.pexpiretime("a") == -1
    ks.expire_at_ms("a", NOW_MS)  # in the past
    assert "a" not in ks.zsets


def test_a_hash_or_set_emptied_is_gone_with_its_expiry() -> None:
    ks = Keyspace(now_ms=NOW_MS)
    ks.hash("h")[b"f"] = b"1"
    ks.expire_at_ms("h", NOW_MS + 5000)
    ks.hdel("h", ["f"])
    assert "h" not in ks.hashes and "h" not in ks.expires
    ks.zset("z").update({"a": 1, "b": 2})
    ks.zrem("z", ["a", "b"])
    assert not ks.alive("z")


def test_the_watermark_guard_applies_once_and_refuses_a_stale_plan() -> None:
    ks = Keyspace(now_ms=NOW_MS)
    first = _write(10, -1, zadd={BOARD: {"p1": 5}}, stats={"applied": 1})
    assert apply_write(ks, first) == 1
    assert apply_write(ks, first) == 0  # applied before: nothing changes
    assert apply_write(ks, _write(20, 3, zadd={BOARD: {"p1": 9}})) == -2 - 10
    assert ks.zsets[BOARD] == {"p1": 5}
    assert ks.hashes[KEYS.stats] == {b"applied": b"1"}
    assert ks.hashes[KEYS.watermarks] == {b"t/0": b"10"}


Ops = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 50), max_size=4),
        st.lists(st.sampled_from("abcdef"), max_size=3),
        st.integers(0, 2),
    ),
    max_size=30,
)


@given(Ops)
def test_member_sections_and_counters_follow_a_dictionary_oracle(
    ops: list[tuple[dict[str, int], list[str], int]],
) -> None:
    ks = Keyspace(now_ms=NOW_MS)
    board: dict[str, int] = {}
    applied = 0
    for offset, (add, remove, by) in enumerate(ops):
        zrem = {BOARD: remove} if remove else {}
        write = _write(offset, offset - 1, zadd={BOARD: add}, zrem=zrem, stats={"applied": by})
        assert apply_write(ks, write) == 1
        board.update(add)
        for member in remove:
            board.pop(member, None)
        applied += by
    assert ks.zsets.get(BOARD, {}) == board
    assert ks.alive(BOARD) == bool(board)
    assert int(ks.hashes.get(KEYS.stats, {}).get(b"applied", b"0")) == applied


Moves = st.lists(st.tuples(st.sampled_from(["10", "20", "30"]), st.integers(-2, 3)), max_size=25)


@given(Moves)
def test_distinct_counts_hold_every_floor_with_holders(moves: list[tuple[str, int]]) -> None:
    ks = Keyspace(now_ms=NOW_MS)
    counts: dict[str, int] = {}
    total = 0
    for floor, delta in moves:
        dense_apply(ks, "n", "s", [floor], [delta], delta)
        now = counts.get(floor, 0) + delta
        if now > 0:
            counts[floor] = now
        else:
            counts.pop(floor, None)
        total += delta
    held = ks.hashes.get("n", {})
    assert {f.decode(): int(v) for f, v in held.items() if f != b"#"} == counts
    assert int(held.get(b"#", b"0")) == total and held.get(b"#") != b"0"
    assert ks.zsets.get("s", {}) == {f: int(f) for f in counts}


@given(
    st.dictionaries(st.text("abcxyz\u00e9", min_size=1, max_size=4), st.integers(0, 5)),
    st.integers(1, 6),
)
def test_a_board_loads_in_score_order_every_member_once(members: dict[str, int], run: int) -> None:
    runs = list(board_order(members, run))
    ordered = [member for part in runs for member in part]
    assert [members[m] for m in ordered] == sorted(members.values())
    assert sorted(ordered) == sorted(members)
    assert all(runs)  # no empty run is sent


def test_a_large_board_comes_in_runs_of_about_the_size_asked() -> None:
    members = {f"p{i}": (i * 7919) % 1000 for i in range(10_000)}
    runs = list(board_order(members, 1_000))
    assert 5 <= len(runs) <= 15 and max(len(r) for r in runs) <= 3_000
