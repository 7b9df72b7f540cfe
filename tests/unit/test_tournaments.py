"""Tournaments: their configuration, their windows, and the planner's caps on named cases.

The property tests of ``test_planner`` (and ``test_healing``) check the caps
against an independent oracle on random streams; these cases pin the rules
docs/GAMES.md states in words, one at a time.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.errors import ConfigError, QueryError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog, GameConfig, Operator, Order, Season, Tournament
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from domain.windows import WindowKind
from tests.unit.boardmodel import BoardModel, project

NS = "t"
TOPIC = "score-events"


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


START = _ms(2026, 11, 1, 18)
END = _ms(2026, 11, 1, 20)

CATALOG = """
[games."arena"]
windows = ["alltime", "daily"]
[games."arena".tournaments.cup]
start = 2026-11-01T18:00:00Z
end = 2026-11-01T20:00:00Z
max_entries = 4
max_attempts = 2
[games."arena".tournaments.open]
start = 2026-11-01
end = 2026-11-08
"""


def test_a_tournament_is_a_window_listed_before_every_other_board() -> None:
    game = GameCatalog.from_toml(CATALOG).lookup("arena")
    assert game is not None
    cup, open_ = game.tournaments
    assert (cup.start_ms, cup.end_ms, cup.max_entries, cup.max_attempts) == (START, END, 4, 2)
    assert (open_.max_entries, open_.max_attempts) == (None, None)
    ids = [w.id for w in game.windows_at(START)]
    assert ids == ["tournament:cup", "tournament:open", "daily:2026-11-01", "alltime"]
    assert [w.id for w in game.windows_at(END)] == [
        "tournament:open",
        "daily:2026-11-01",
        "alltime",
    ]
    assert game.window("tournament:cup") == cup.window
    assert game.parse_window("tournament:open", 0) == open_.window
    assert game.expire_at_ms(cup.window) is None  # kept until archived
    assert game.keeps(WindowKind.TOURNAMENT)
    assert WindowKind.TOURNAMENT in game.kept_kinds()
    assert not game.stops_after(WindowKind.TOURNAMENT)
    assert game.stops_after(WindowKind.DAILY)  # a tournament never ends a best fold early
    with pytest.raises(QueryError, match="nope"):
        game.window("tournament:nope")


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("cup = { start = 2026-06-01, end = 2026-06-01 }", "must end after it starts"),
        ("cup = { start = 2026-06-02, end = 2026-06-01 }", "must end after it starts"),
        ('cup = { start = "2026-06-01T00:07:00Z", end = 2026-07-01 }', "quarter hour"),
        ("cup = { start = 2026-06-01, end = 2026-07-01, max_entries = 0 }", "max_entries"),
        ("cup = { start = 2026-06-01, end = 2026-07-01, max_attempts = -1 }", "max_attempts"),
        ("cup = { start = 2026-06-01, end = 2026-07-01, max_entries = true }", "max_entries"),
        ('cup = { start = 2026-06-01, end = 2026-07-01, max_entries = "9" }', "max_entries"),
        ("cup = { start = 2026-06-01, end = 2026-07-01, max_entry = 3 }", "'max_entry'"),
        ("cup = { start = 2026-06-01 }", "end is required"),
        ("cup = 3", "expected a table"),
        ('"bad name" = { start = 2026-06-01, end = 2026-07-01 }', "tournament name"),
        ('cup = { start = "2026-06-01T00:00:00", end = 2026-07-01 }', "offset"),
    ],
)
def test_bad_tournaments_are_refused_naming_the_key(table: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        GameCatalog.from_toml(f'[games."g"]\n[games."g".tournaments]\n{table}\n', "games.toml")
    message = str(caught.value)
    assert message.startswith('games.toml: [games."g"]') and "\n" not in message
    assert "tournament" in message


def test_a_tournament_named_like_a_season_or_twice_is_refused() -> None:
    text = (
        '[games."g"]\n[games."g".seasons]\ns1 = { start = 2026-06-01, end = 2026-07-01 }\n'
        '[games."g".tournaments]\ns1 = { start = 2026-06-01, end = 2026-07-01 }\n'
    )
    with pytest.raises(ConfigError, match="a season has the same name"):
        GameCatalog.from_toml(text)
    twice = GameConfig(tournaments=(Tournament("t", 0, 900_000), Tournament("t", 0, 900_000)))
    with pytest.raises(ConfigError, match="named twice"):
        twice.validate("g")
    assert GameConfig(seasons=(Season("a", 0, 900_000),)).tournaments == ()


def test_a_tournament_too_long_for_max_score_is_refused() -> None:
    text = (
        '[games."g"]\nwindows = ["daily"]\ntie_resolution = "ms"\nmax_score = 100000000\n'
        '[games."g".tournaments]\nlong = { start = 2026-01-01, end = 2027-01-01 }\n'
    )
    with pytest.raises(ConfigError, match=r"tournament 'long'.*largest max_score"):
        GameCatalog.from_toml(text)


@pytest.mark.parametrize(("entries", "cells"), [(1, 1), (4, 4), (10, 4), (3, 8), (100, 12)])
def test_seats_are_split_evenly_and_add_up_to_max_entries(entries: int, cells: int) -> None:
    tournament = Tournament("t", 0, 900_000, max_entries=entries)
    seats = [tournament.seats(cell, cells) for cell in range(cells)]
    assert sum(s or 0 for s in seats) == entries
    assert seats == [entries // cells + (1 if c < entries % cells else 0) for c in range(cells)]
    assert Tournament("t", 0, 900_000).seats(0, cells) is None


# --- the planner ---------------------------------------------------------------------------

CUP = Tournament("cup", START, END, max_entries=4, max_attempts=2)
GAME = GameConfig(windows=(WindowKind.ALLTIME,), max_score=1000, tournaments=(CUP,))
R = 1_800_000_000_000


def _batch(game: GameConfig, partition: int, *events: tuple[int, str, int, int]) -> CheckedBatch:
    """One batch of ``(offset, player, score, ts)`` SCORE events (or score -1: a RETRACT)."""
    accepted = tuple(
        Accepted(
            offset,
            R + offset,
            ScoreEvent(
                f"e{partition}-{offset}",
                "arena",
                player,
                max(score, 0),
                ts,
                EventKind.RETRACT if score < 0 else EventKind.SCORE,
                "k1",
                b"",
            ),
            game,
            game.windows_at(ts),
        )
        for offset, player, score, ts in events
    )
    return CheckedBatch(TOPIC, partition, accepted, (), accepted[-1].offset)


def _planner(partitions: int = 2) -> BoardPlanner:
    return BoardPlanner(NS, 1_000, partitions={TOPIC: partitions})


def _scores(model: BoardModel, window: str, game: GameConfig = GAME) -> dict[str, int]:
    slots = game.codec(game.window(window)).slots
    board = model.zsets.get(f"{NS}:{{arena}}:{window}", {})
    return {p: game.codec(game.window(window)).stored(int(v) // slots) for p, v in board.items()}


def test_the_first_players_of_each_partition_take_its_seats_in_log_order() -> None:
    # Two partitions, four seats: two each. Partition 0 has five players.
    model = BoardModel()
    in_cup = START + 60_000
    first = _batch(GAME, 0, (0, "a", 5, in_cup), (1, "b", 6, in_cup), (2, "c", 7, in_cup))
    second = _batch(GAME, 0, (3, "d", 8, in_cup), (4, "a", 9, in_cup))
    other = _batch(GAME, 1, (0, "x", 1, in_cup), (1, "y", 2, in_cup), (2, "z", 3, in_cup))
    project([first, other, second], _planner(), model)
    assert _scores(model, "tournament:cup") == {"a": 9, "b": 6, "x": 1, "y": 2}
    # Refused players still reach the game's other boards.
    assert set(_scores(model, "alltime")) == {"a", "b", "c", "d", "x", "y", "z"}
    assert model.stats_total() == {"applied": 8, "tournament_full": 3}
    assert model.hashes[f"{NS}:{{arena}}:meta:entries:cup"] == {f"{TOPIC}/0": 2, f"{TOPIC}/1": 2}
    assert model.hashes[f"{NS}:{{arena}}:meta:attempts:cup"] == {"a": 2, "b": 1, "x": 1, "y": 1}


def test_attempts_past_max_attempts_are_refused_and_a_worse_one_still_counts() -> None:
    model = BoardModel()
    t = START + 1_000
    batches = [
        _batch(GAME, 0, (0, "a", 50, t)),
        _batch(GAME, 0, (1, "a", 10, t + 1_000)),  # worse: an attempt all the same
        _batch(GAME, 0, (2, "a", 90, t + 2_000)),  # the third: refused on the cup board only
    ]
    project(batches, _planner(), model)
    assert _scores(model, "tournament:cup") == {"a": 50}
    assert _scores(model, "alltime") == {"a": 90}
    # The worse attempt changed nothing on a board but used an attempt: applied.
    assert model.stats_total() == {"applied": 3, "attempts_used_up": 1}
    assert model.hashes[f"{NS}:{{arena}}:meta:attempts:cup"] == {"a": 2}


def test_events_outside_the_range_neither_count_nor_are_refused() -> None:
    model = BoardModel()
    batches = [
        _batch(GAME, 0, (0, "a", 5, START - 1), (1, "a", 6, END), (2, "a", 7, END + 1)),
        _batch(GAME, 0, (3, "a", 1, START), (4, "a", 2, END - 1), (5, "a", 3, END - 1)),
    ]
    project(batches, _planner(), model)
    assert _scores(model, "tournament:cup") == {"a": 2}
    # Offsets 0-2 only reach the all-time board; 3 and 4 are the two attempts; 5 is
    # refused on the cup board and cannot improve the all-time one.
    assert model.stats_total() == {"applied": 5, "noop": 1, "attempts_used_up": 1}


def test_a_retract_leaves_the_board_but_keeps_the_seat_and_the_attempts() -> None:
    model = BoardModel()
    t = START + 1_000
    batches = [
        _batch(GAME, 0, (0, "a", 5, t), (1, "b", 5, t)),
        _batch(GAME, 0, (2, "a", -1, t)),
        _batch(GAME, 0, (3, "c", 5, t), (4, "a", 7, t), (5, "a", 8, t)),
    ]
    project(batches, _planner(), model)
    # The partition's two seats stay taken by a and b; a had one attempt left.
    assert _scores(model, "tournament:cup") == {"a": 7, "b": 5}
    assert model.stats_total() == {
        "applied": 6,
        "tournament_full": 1,
        "attempts_used_up": 1,
    }


def test_counts_survive_a_restart_and_a_replay_changes_nothing() -> None:
    t = START + 1_000
    batches = [
        _batch(GAME, 0, (0, "a", 5, t), (1, "b", 6, t)),
        _batch(GAME, 0, (2, "c", 7, t), (3, "a", 8, t)),
        _batch(GAME, 0, (4, "a", 9, t), (5, "b", 1, t)),
    ]
    clean = BoardModel()
    project(batches, _planner(), clean)
    restarted = BoardModel()
    for batch in batches:  # a new planner (cold caches) for every batch
        project([batch], _planner(), restarted)
    project(batches, _planner(), restarted)  # and the whole log again: all skipped
    assert restarted.state() == clean.state()
    assert clean.stats_total() == {
        "applied": 6,
        "tournament_full": 1,
        "attempts_used_up": 1,
    }


def test_lowest_wins_and_incr_follow_the_game() -> None:
    # Two attempts count (50 and 10); the third (5) is refused.
    for op, order, expected in ((Operator.BEST, Order.ASC, 10), (Operator.INCR, Order.DESC, 60)):
        game = GameConfig(
            windows=(WindowKind.ALLTIME,),
            max_score=1000,
            operator=op,
            order=order,
            tournaments=(CUP,),
        )
        model = BoardModel()
        t = START + 1_000
        project(
            [_batch(game, 0, (0, "a", 50, t), (1, "a", 10, t + 1), (2, "a", 5, t + 2))],
            _planner(),
            model,
        )
        assert _scores(model, "tournament:cup", game) == {"a": expected}


def test_seats_need_the_partition_count() -> None:
    batch = _batch(GAME, 0, (0, "a", 5, START))
    with pytest.raises(ConfigError, match="partition count"):
        project([batch], BoardPlanner(NS, 1_000), BoardModel())
    # Without max_entries the count is not needed.
    free = GameConfig(
        windows=(WindowKind.ALLTIME,), tournaments=(Tournament("cup", START, END, None, 1),)
    )
    model = BoardModel()
    project([_batch(free, 0, (0, "a", 5, START))], BoardPlanner(NS, 1_000), model)
    assert _scores(model, "tournament:cup", free) == {"a": 5}


def test_a_sharded_game_splits_seats_over_partitions_and_shards() -> None:
    game = GameConfig(
        windows=(WindowKind.ALLTIME,),
        shards=2,
        tournaments=(Tournament("cup", START, END, max_entries=2),),
    )
    model = BoardModel()
    players = [f"p{i}" for i in range(12)]
    project(
        [_batch(game, 0, *((i, p, 1, START) for i, p in enumerate(players)))],
        _planner(partitions=1),
        model,
    )
    # One partition, two shards: one seat in each shard's group.
    boards = {k: v for k, v in model.boards().items() if "tournament:cup" in k}
    assert sorted(len(board) for board in boards.values()) == [1, 1]
    assert len(boards) == 2
    assert model.stats_total()["tournament_full"] == 10


def test_lb_run_warns_when_some_partitions_get_no_seat() -> None:
    from flows.preflight import seat_warnings

    catalog = GameCatalog.from_toml(
        "[default]\n[default.tournaments]\nduel = { start = 2026-06-01, end = 2026-07-01, "
        "max_entries = 2 }\n"
        '[games."big"]\nshards = 2\n[games."big".tournaments]\n'
        "cup = { start = 2026-06-01, end = 2026-07-01, max_entries = 16 }\n"
        "free = { start = 2026-06-01, end = 2026-07-01 }\n"
    )
    assert seat_warnings(catalog, 1) == []
    (duel,) = seat_warnings(catalog, 4)
    assert "'duel'" in duel and "max_entries 2 for 4 seat cells" in duel
    warnings = seat_warnings(catalog, 12)  # big: 12 partitions x 2 shards = 24 cells > 16
    assert len(warnings) == 2 and any("'cup'" in w and "24 seat cells" in w for w in warnings)
