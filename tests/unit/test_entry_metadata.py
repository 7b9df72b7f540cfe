"""Entry metadata in the planner: the metadata of the event that set a value, kept with it.

The rule (docs/CONTRACTS.md): a board entry's metadata is that of the event
that set its current value, replaced only when the value changes; an event
without metadata that changes the value leaves the entry without any, and a
removed entry has none. Checked on hand-picked cases and, as a property,
against an oracle of plain dictionaries on games without a time tie-break
(the board value is the score itself), through the planner and
:class:`tests.unit.boardmodel.BoardModel` (the Lua script's semantics) with
random batching, bounded pieces and a tiny cache.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig, Operator
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from domain.scoring import TieResolution
from domain.windows import WindowKind
from sinks.boards.encoding import change_json, encode
from tests.unit.boardmodel import BoardModel, project

NS = "t"
TOPIC = "score-events"
HORIZON_MS = 1_000
T = 1_777_888_800_000
R = 1_800_000_000_000
META = f"{NS}:{{ga}}:meta:entry:alltime"
BOARD = f"{NS}:{{ga}}:alltime"


def _game(op: Operator) -> GameConfig:
    return GameConfig(
        operator=op,
        windows=(WindowKind.ALLTIME,),
        max_score=50,
        tie_resolution=TieResolution.NONE,
    )


def _batch(game: GameConfig, start: int, events: list[ScoreEvent]) -> CheckedBatch:
    accepted = tuple(
        Accepted(start + i, R + start + i, ev, game, game.windows_at(ev.ts_ms))
        for i, ev in enumerate(events)
    )
    return CheckedBatch(TOPIC, 0, accepted, (), accepted[-1].offset)


def _ev(n: int, player: str, score: int, meta: str | None, retract: bool = False) -> ScoreEvent:
    kind = EventKind.RETRACT if retract else EventKind.SCORE
    return ScoreEvent(f"e{n}", "ga", player, score, T, kind, "k1", b"", meta)


def _run(op: Operator, batches: list[list[ScoreEvent]], **planner: int) -> BoardModel:
    model = BoardModel()
    game = _game(op)
    offset = 0
    plan = BoardPlanner(NS, HORIZON_MS, **planner)
    for events in batches:
        project([_batch(game, offset, events)], plan, model)
        offset += len(events)
    return model


def test_a_best_score_keeps_the_metadata_of_the_event_that_set_it() -> None:
    model = _run(Operator.BEST, [[_ev(1, "p", 10, "car=red")], [_ev(2, "p", 5, "car=blue")]])
    assert model.metadata == {META: {"p": "car=red"}}
    # A better score without metadata: the entry has none any more.
    model = _run(Operator.BEST, [[_ev(1, "p", 10, "car=red")], [_ev(2, "p", 12, None)]])
    assert model.metadata == {}
    # An equal score changes nothing, metadata included.
    model = _run(Operator.BEST, [[_ev(1, "p", 10, "a")], [_ev(2, "p", 10, "b")]])
    assert model.metadata == {META: {"p": "a"}}


def test_within_one_batch_the_last_change_decides() -> None:
    events = [_ev(1, "p", 10, "a"), _ev(2, "p", 20, "b"), _ev(3, "p", 15, "c")]
    assert _run(Operator.BEST, [events]).metadata == {META: {"p": "b"}}


def test_set_back_to_the_same_value_still_takes_the_last_setters_metadata() -> None:
    # 5 (a) -> then in one batch 7 (b) and 5 again (none): the value is unchanged
    # at the end of the batch, so no ZADD, but the setter of the current value changed.
    model = _run(Operator.SET, [[_ev(1, "p", 5, "a")], [_ev(2, "p", 7, "b"), _ev(3, "p", 5, None)]])
    assert model.boards() == {BOARD: {"p": 5.0}}
    assert model.metadata == {}
    model = _run(Operator.SET, [[_ev(1, "p", 5, "a")], [_ev(2, "p", 7, None), _ev(3, "p", 5, "c")]])
    assert model.metadata == {META: {"p": "c"}}
    # No event of the batch has metadata, yet the value's setter changed: cleared.
    model = _run(
        Operator.SET, [[_ev(1, "p", 5, "a")], [_ev(2, "p", 7, None), _ev(3, "p", 5, None)]]
    )
    assert model.boards() == {BOARD: {"p": 5.0}}
    assert model.metadata == {}


def test_a_retract_removes_the_metadata() -> None:
    model = _run(
        Operator.BEST, [[_ev(1, "p", 5, "a"), _ev(2, "q", 6, "b")], [_ev(3, "p", 0, None, True)]]
    )
    assert model.metadata == {META: {"q": "b"}}


def test_a_v1_only_stream_writes_no_metadata_but_lists_its_boards() -> None:
    game = _game(Operator.BEST)
    planner = BoardPlanner(NS, HORIZON_MS)
    batch = _batch(game, 0, [_ev(1, "p", 5, None)])
    model = BoardModel()
    project([batch], planner, model)
    assert model.metadata == {}
    # The script still hears of the board, to drop old metadata of members it rewrites.
    planner = BoardPlanner(NS, HORIZON_MS)
    round_batch = _batch(game, 1, [_ev(2, "p", 9, None)])
    lookups = planner.lookups(round_batch)
    plan = planner.plan(round_batch, model.read(lookups), lookups)
    (write,) = plan.groups
    keys, _ = encode(write)
    assert META in keys
    assert write.metadata == {}


def test_changes_carry_the_metadata_of_their_new_value() -> None:
    game = _game(Operator.BEST)
    planner = BoardPlanner(NS, HORIZON_MS)
    batch = _batch(game, 0, [_ev(1, "p", 5, "Zoë | 🏎"), _ev(2, "q", 6, None)])
    lookups = planner.lookups(batch)
    plan = planner.plan(batch, BoardModel().read(lookups), lookups)
    (write,) = plan.groups
    by_player = {c.player_id: c for c in write.changes}
    assert by_player["p"].meta == "Zoë | 🏎" and by_player["q"].meta is None
    assert change_json(by_player["p"]).endswith(',"m":"Zo\\u00eb | \\ud83c\\udfce"}')
    assert '"m"' not in change_json(by_player["q"])


# --- the property ----------------------------------------------------------------------

PLAYERS = ("p0", "p1", "p2")
METAS = (None, None, "a", "b", "", "日本|x")


def _oracle(
    op: Operator, events: list[ScoreEvent], cap: int
) -> tuple[dict[str, int], dict[str, str]]:
    """Values and metadata per player: the last event that changed a value sets its metadata."""
    values: dict[str, int] = {}
    meta: dict[str, str | None] = {}
    for ev in events:
        player = ev.player_id
        if ev.kind is EventKind.RETRACT:
            values.pop(player, None)
            meta.pop(player, None)
            continue
        current = values.get(player)
        if current is None:
            new = ev.score
        elif op is Operator.BEST:
            new = max(current, ev.score)
        elif op is Operator.INCR:
            new = min(current + ev.score, cap)
        else:
            new = ev.score
        if new != current:
            values[player] = new
            meta[player] = ev.metadata
    return values, {p: m for p, m in meta.items() if m is not None and p in values}


@st.composite
def _streams(draw: st.DrawFn) -> tuple[Operator, list[ScoreEvent], int, int, int]:
    op = draw(st.sampled_from(tuple(Operator)))
    count = draw(st.integers(1, 40))
    events = []
    for n in range(count):
        retract = draw(st.integers(0, 15)) == 0
        events.append(
            _ev(
                n,
                draw(st.sampled_from(PLAYERS)),
                0 if retract else draw(st.integers(0, 12)),
                None if retract else draw(st.sampled_from(METAS)),
                retract,
            )
        )
    return (
        op,
        events,
        draw(st.integers(0, 2**32)),
        draw(st.sampled_from((0, 2, 3, 7))),
        draw(st.sampled_from((1, 2, 1_000))),
    )


@settings(max_examples=300, deadline=None)
@given(_streams())
def test_metadata_matches_the_oracle_however_the_stream_is_cut(
    stream: tuple[Operator, list[ScoreEvent], int, int, int],
) -> None:
    op, events, seed, max_updates, cache = stream
    rnd = random.Random(seed)
    batches: list[list[ScoreEvent]] = []
    at = 0
    while at < len(events):
        size = rnd.randint(1, 8)
        batches.append(events[at : at + size])
        at += size
    model = _run(op, batches, max_updates=max_updates, cache_capacity=cache)
    values, metadata = _oracle(op, events, 50)
    assert {p: int(v) for p, v in model.boards().get(BOARD, {}).items()} == values
    assert model.metadata.get(META, {}) == metadata
