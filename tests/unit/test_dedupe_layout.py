"""The dedupe layout: fingerprints decide as full ids do, collisions as documented.

The reference is the rule itself over full event ids, written out here (a copy
is a duplicate when an applied copy of the same id has a record time within
the horizon, either way); the system under test is the planner with each
layout, driving :class:`tests.unit.boardmodel.BoardModel`.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig, Operator
from domain.keys import GroupKeys
from domain.planner import BoardPlanner
from domain.planner.dedupe import (
    BAG_FILL,
    FIELD_BYTES,
    PLANNED_RATE,
    SeenLayout,
    false_duplicates_per_day,
    split_for,
)
from domain.records import Accepted, CheckedBatch
from domain.windows import WindowKind
from tests.unit.boardmodel import BoardModel, project

NS = "t"
TOPIC = "score-events"
HORIZON_MS = 1_000
GAME = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=10**6)
T = 1_778_000_000_000  # the event time (one all-time board either way)
R = 1_800_000_000_000  # record times start here
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"

Rec = tuple[int, int, ScoreEvent]  # offset, record time, event


def _event(eid: str, player: str = "p", score: int = 1) -> ScoreEvent:
    return ScoreEvent(eid, "ga", player, score, T, EventKind.SCORE, "k1", b"")


def _batch(*recs: Rec) -> CheckedBatch:
    accepted = tuple(
        Accepted(offset, rts, ev, GAME, GAME.windows_at(ev.ts_ms)) for offset, rts, ev in recs
    )
    return CheckedBatch(TOPIC, 0, accepted, (), accepted[-1].offset)


def _rule(recs: list[Rec], horizon_ms: int) -> list[bool]:
    """Per record: a duplicate under the rule over full ids."""
    applied: dict[str, list[int]] = {}
    out = []
    for _, rts, ev in recs:
        copies = applied.setdefault(ev.event_id, [])
        dup = any(abs(rts - t) <= horizon_ms for t in copies)
        if not dup:
            copies.append(rts)
        out.append(dup)
    return out


def _run(recs: list[Rec], cuts: list[int], layout: SeenLayout, restart_at: int = -1) -> BoardModel:
    """``recs`` in batches ending at ``cuts``; a new planner (a restart) at batch ``restart_at``."""
    model = BoardModel()
    planner = BoardPlanner(NS, HORIZON_MS, dedupe_layout=layout)
    start = 0
    for i, end in enumerate([*cuts, len(recs)]):
        if end <= start:
            continue
        if i == restart_at:
            planner = BoardPlanner(NS, HORIZON_MS, dedupe_layout=layout)
        project([_batch(*recs[start:end])], planner, model)
        start = end
    return model


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Rec], list[int], int]:
    """Event ids from a small pool (copies), record times advancing with skewed retries."""
    n = draw(st.integers(1, 60))
    ids = draw(st.integers(1, 12))
    at = R + draw(st.integers(0, HORIZON_MS))
    recs: list[Rec] = []
    for offset in range(n):
        at += draw(st.sampled_from((0, 1, 250, 499, 500, 999, 1_000, 1_001, 2_000)))
        skew = draw(st.sampled_from((0, 0, -1_001, -1_000, -999, -1, 1, 999, 1_000, 1_001)))
        eid = f"e{draw(st.integers(0, ids - 1))}"
        recs.append((offset, at + skew, _event(eid, score=offset + 1)))
    cuts = sorted(draw(st.lists(st.integers(1, n), max_size=5)))
    return recs, cuts, draw(st.integers(-1, len(cuts)))


@given(streams())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fingerprints_decide_as_full_ids(case: tuple[list[Rec], list[int], int]) -> None:
    """Same duplicates, same sums, with either layout, however batched or restarted."""
    recs, cuts, restart_at = case
    expected = _rule(recs, HORIZON_MS)
    dups = sum(expected)
    boards = []
    for layout in (
        SeenLayout.sized(HORIZON_MS),
        SeenLayout.sized(HORIZON_MS, 0),
        SeenLayout(HORIZON_MS, 1),  # every id of a bucket in one bag
        SeenLayout(HORIZON_MS, 8),
    ):
        model = _run(recs, cuts, layout, restart_at)
        stats = model.stats_total()
        assert stats.get("duplicate", 0) == dups, layout
        assert stats.get("applied", 0) == len(recs) - dups, layout
        boards.append(model.boards())
    assert all(board == boards[0] for board in boards)
    sums = sum(ev.score for (_, _, ev), dup in zip(recs, expected, strict=True) if not dup)
    (board,) = boards[0].values()
    slots = GAME.codec(GAME.windows_at(T)[0]).slots
    assert board["p"] // slots == sums


def test_the_layout_keeps_ids_as_documented() -> None:
    """Bags ``bag // 16`` in ``meta:seen:<bucket>:<bag % 16>``: field bytes, then 2-byte offset."""
    layout = SeenLayout(HORIZON_MS, 64)
    model = BoardModel()
    records = [(i, R + 10 + 37 * i, _event(f"e{i}")) for i in range(200)]
    project(
        [_batch(*records[:120]), _batch(*records[120:])],
        BoardPlanner(NS, HORIZON_MS, dedupe_layout=layout),
        model,
    )
    bits = 8 * FIELD_BYTES
    expected: dict[str, dict[str, bytes]] = {}
    for _, rts, ev in records:
        token = layout.token(ev.event_id)
        assert isinstance(token, int)
        bucket, bag = rts // HORIZON_MS, token >> bits
        bags = expected.setdefault(f"{NS}:{{ga}}:meta:seen:{bucket}:{bag % 16}", {})
        entry = (token & ((1 << bits) - 1)).to_bytes(FIELD_BYTES, "big")
        entry += (rts - bucket * HORIZON_MS).to_bytes(2, "big")
        bags[str(bag // 16)] = bags.get(str(bag // 16), b"") + entry
    assert model.hashes_with(":meta:seen:") == expected
    assert any(len(bag) > 8 for bags in expected.values() for bag in bags.values())


def test_fingerprints_are_stable_across_processes() -> None:
    """BLAKE2b of the id, not ``hash()``: the same token in every process and replay.

    Pinned: another fingerprint function would part every live bucket's ids
    from the new ones (an upgrade's empty dedupe state, docs/DESIGN.md).
    """
    layout = SeenLayout(300_000, 262_144)
    assert layout.token("e-1") == PINNED_E1
    tokens = [layout.token(f"id{i}") for i in range(1000)]
    assert all(isinstance(t, int) and 0 <= t >> 48 < 262_144 for t in tokens)
    assert len({t >> 48 for t in tokens if isinstance(t, int)}) > 990  # spread over bags


#: The token of "e-1" at a 300 s horizon and 262,144 bags.
PINNED_E1 = 46385516938578101118


def test_the_default_split_fills_sub_hashes_as_planned() -> None:
    """A power of two bags, each holding between half and all of ``BAG_FILL`` ids."""
    for horizon in (1_000, 60_000, 300_000, 3_600_000):
        split = split_for(PLANNED_RATE, horizon)
        assert split & (split - 1) == 0
        assert BAG_FILL / 2 < PLANNED_RATE * horizon / 1000 / split <= BAG_FILL
    assert split_for(PLANNED_RATE, 300_000) == 262_144
    assert split_for(0, 300_000) == 0
    assert SeenLayout.sized(300_000, 0).token("x") == "x"


def test_ids_sharing_a_fingerprint_are_one_id_to_the_rule() -> None:
    """Two ids with one fingerprint: the later is a duplicate within the horizon, not beyond.

    Found by search with a 1-byte field (any width behaves the same way); the
    full-id layout applies both.
    """
    layout = SeenLayout(HORIZON_MS, 2, field_bytes=1)
    first: dict[int | str, str] = {}
    a = b = ""
    for i in range(10_000):
        eid = f"id{i}"
        other = first.setdefault(layout.token(eid), eid)
        if other != eid:
            a, b = other, eid
            break
    assert a and b and layout.token(a) == layout.token(b)
    for gap, dup in ((HORIZON_MS, 1), (-HORIZON_MS, 1), (HORIZON_MS + 1, 0)):
        recs = [(0, R + 2_000, _event(a)), (1, R + 2_000 + gap, _event(b))]
        for cuts in ([], [1]):  # in one batch, or the first copy read back from the model
            model = _run(recs, cuts, layout)
            assert model.stats_total().get("duplicate", 0) == dup, (gap, cuts)
        full = _run(recs, [1], SeenLayout.sized(HORIZON_MS, 0))
        assert full.stats_total() == {"applied": 2}


def test_false_duplicates_follow_the_formula() -> None:
    """With a 2-byte field collisions are frequent enough to count: as the formula says.

    In log order and shuffled (each pair within the horizon is compared once
    either way); 20,000 events, 100 per horizon in the one bag: ~30 expected.
    """
    layout = SeenLayout(HORIZON_MS, 1, field_bytes=2)
    rnd = random.Random(7)
    spacing = 10  # ms: 100 ids per horizon
    n = 20_000
    expected = false_duplicates_per_day(1, HORIZON_MS / spacing, 2) * n / 86_400
    times = [R + i * spacing for i in range(n)]
    for order in ("log", "shuffled"):
        if order == "shuffled":
            rnd.shuffle(times)
        recs = [(i, rts, _event(f"{rnd.getrandbits(64):x}")) for i, rts in enumerate(times)]
        model = _run(recs, list(range(500, n, 500)), layout)
        got = model.stats_total().get("duplicate", 0)
        assert 0.5 * expected <= got <= 1.5 * expected, (order, got, expected)


def test_the_documented_collision_figures_are_the_formulas() -> None:
    """docs/DESIGN.md states the false duplicates at 100,000 events/s: the formula's numbers."""
    text = DESIGN.read_text()
    split = split_for(PLANNED_RATE, 300_000)
    planned = false_duplicates_per_day(100_000, PLANNED_RATE * 300 / split) * 365
    hot = false_duplicates_per_day(100_000, 100_000 * 300 / split) * 365
    assert re.search(rf"\b{planned:.1f} a year\b", text), planned
    assert re.search(rf"\b{hot:.0f} a year\b", text), hot


def test_reads_and_writes_round_trip_record_times() -> None:
    keys = GroupKeys(NS, "ga")
    for layout in (
        SeenLayout(HORIZON_MS, 4),
        SeenLayout(HORIZON_MS, 64),
        SeenLayout(HORIZON_MS, 0),
    ):
        tokens = {layout.token(f"e{i}"): R + 37 * i for i in range(50)}
        written: dict[int, dict[int | str, int]] = {}
        for token, rts in tokens.items():
            written.setdefault(rts // HORIZON_MS, {})[token] = rts
        stored = layout.writes(keys, written)
        asked = {bucket: list(ids) for bucket, ids in written.items()}
        reads, at = layout.reads(keys, asked)
        # Each written key is read, and so are its bucket's two neighbours.
        assert {key for key, _ in reads} >= set(stored)
        assert {b for b, _ in at} == {b + d for b in written for d in (-1, 0, 1)}
        for (key, fields), (bucket, toks) in zip(reads, at, strict=True):
            if key not in stored:
                continue
            values = [stored[key].get(f) for f in fields]
            times = [
                None if v is None else layout.stored(bucket, t, v)
                for t, v in zip(toks, values, strict=True)
            ]
            # Found in its own bucket; asked in the neighbours too, not found there.
            assert times == [tokens[t] if tokens[t] // HORIZON_MS == bucket else None for t in toks]
        if layout.split:  # ids never written are not found in the bags they would be in
            missing = [layout.token(f"x{i}") for i in range(200)]
            found = 0
            reads, at = layout.reads(keys, dict.fromkeys(written, missing))
            for (key, fields), (bucket, toks) in zip(reads, at, strict=True):
                for name, token in zip(fields, toks, strict=True):
                    bag = stored.get(key, {}).get(name)
                    if bag is not None:
                        found += 1
                        assert layout.stored(bucket, token, bag) is None
            assert found
