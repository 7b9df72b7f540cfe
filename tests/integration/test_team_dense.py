"""Dense and competition ranks on team boards, on real Redis, against an oracle with many ties.

Scores go through the job's planner, board store and Lua group write and
membership records through the membership write (the harness of
``test_team_boards``), on a game with ``dense_ranks = true``: a handful of
score values and of teams, so teams tie on their aggregate all the time. After
every few steps, and after replaying both logs, the team reader's dense and
competition ranks (``top``, ``rank``, ``around``) must equal a simple oracle
(sort the teams, count the distinct aggregates above), and ``verify_game``
must find the distinct-score counts equal to the team boards. Standalone Redis
and the local Redis Cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.redis import RedisClient, text
from domain.games import GameCatalog
from jobs.team_verify import verify_game
from readers.dense import DenseRanksUnavailable
from readers.teams import TeamReader, scored
from sinks.teams.store import resync_teams
from tests.integration.test_team_boards import NOW_MS, Pipeline, run_steps, steps

GAMES = """
[games."dsum"]
teams = "sum"
dense_ranks = true
max_score = 6
windows = ["alltime", "daily"]
[games."dbest"]
teams = "best"
operator = "incr"
dense_ranks = true
max_score = 6
windows = ["alltime", "daily"]
[games."davg"]
teams = "avg"
operator = "set"
dense_ranks = true
max_score = 6
windows = ["alltime", "weekly"]
[games."plain"]
teams = "sum"
max_score = 6
"""
CATALOG = GameCatalog.from_toml(GAMES)
PLAYERS = [f"p{i}" for i in range(9)]
TEAMS = ["t0", "t1", "t2", "t3", "t4"]


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


def oracle(board: dict[str, float]) -> list[tuple[str, float, int, int, int]]:
    """(team, score, unique, competition, dense rank), best first: sort and count distinct."""
    order = sorted(board, key=lambda t: (-board[t], [-b for b in t.encode()]))
    values = sorted(set(board.values()), reverse=True)
    return [
        (
            team,
            board[team],
            i + 1,
            1 + sum(1 for v in board.values() if v > board[team]),
            1 + values.index(board[team]),
        )
        for i, team in enumerate(order)
    ]


def stored_board(client: RedisClient, pipeline: Pipeline, window: str) -> dict[str, float]:
    return dict(scored(client.zrange(pipeline.keys.board(window), 0, -1, withscores=True)))


def check_ranks(client: RedisClient, pipeline: Pipeline, reader: TeamReader) -> None:
    """Every rank mode of every read equal to the oracle, on every window of the game."""
    game = pipeline.game
    windows = [text(w) for w in client.hgetall(pipeline.keys.slots)]
    for window in windows:
        want = oracle(stored_board(client, pipeline, window))
        for mode, at in (("unique", 2), ("competition", 3), ("dense", 4)):
            expected = [(row[0], row[at]) for row in want]
            page = reader.top(game, window, NOW_MS, limit=1000, ranks=mode)
            assert [(e["teamId"], e["rank"]) for e in page["entries"]] == expected, mode
            offset = reader.top(game, window, NOW_MS, limit=2, offset=1, ranks=mode)
            assert [(e["teamId"], e["rank"]) for e in offset["entries"]] == expected[1:3], mode
            for team, rank in expected:
                assert reader.rank(game, team, window, NOW_MS, ranks=mode)["rank"] == rank
            if expected:
                team = expected[len(expected) // 2][0]
                around = reader.around(game, team, window, NOW_MS, k=2, ranks=mode)
                lines = [*around["above"], around["team"], *around["below"]]
                got = [(e["teamId"], e["rank"]) for e in lines if e is not None]
                mid = len(expected) // 2
                assert got == expected[max(0, mid - 2) : mid + 3], mode
        assert reader.rank(game, "nobody", window, NOW_MS, ranks="dense")["rank"] is None


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# A few score values (0..3) among 9 players in 5 teams: teams tie all the time.
@given(game=st.sampled_from(["dsum", "dbest", "davg"]), taken=steps(PLAYERS, TEAMS, 3))
def test_team_dense_ranks_equal_the_oracle_through_joins_leaves_and_scores(
    client: RedisClient, namespace: str, game: str, taken: list[tuple[Any, ...]]
) -> None:
    ns = f"{namespace}{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(client, ns, game, CATALOG)
    reader = TeamReader(client, CATALOG, ns)
    try:
        for n in run_steps(pipeline, taken):
            if n % 8 == 7:
                check_ranks(client, pipeline, reader)
        pipeline.check()  # verify_game with the distinct-score counts
        check_ranks(client, pipeline, reader)
        pipeline.replay()
        pipeline.check()
        check_ranks(client, pipeline, reader)
        resync_teams(client, ns, {game: pipeline.config})  # a recount changes nothing
        pipeline.check()
        check_ranks(client, pipeline, reader)
    finally:
        for key in client.scan_iter(match=f"{ns}:*"):
            client.delete(key)


def test_dense_refused_without_counts_and_served_after_resync(
    client: RedisClient, namespace: str
) -> None:
    plain = Pipeline(client, namespace, "plain", CATALOG)
    for player, team in (("p0", "a"), ("p1", "b"), ("p2", "c")):
        plain.member(player, team)
    for player, score, minute in (("p0", 3, 1), ("p1", 3, 2), ("p2", 1, 3)):
        plain.score(player, score, minute)
    reader = TeamReader(client, CATALOG, namespace)
    with pytest.raises(DenseRanksUnavailable, match="keeps no distinct-score counts"):
        reader.top("plain", "alltime", NOW_MS, ranks="dense")
    with pytest.raises(DenseRanksUnavailable, match="keeps no distinct-score counts"):
        reader.rank("plain", "a", "alltime", NOW_MS, ranks="dense")
    competition = reader.top("plain", "alltime", NOW_MS, ranks="competition")
    assert [(e["teamId"], e["rank"]) for e in competition["entries"]] == [
        ("b", 1),
        ("a", 1),
        ("c", 3),
    ]
    # The same boards under a catalog that turned dense_ranks on: counts miss the teams.
    later = GameCatalog.from_toml(
        GAMES.replace('[games."plain"]', '[games."plain"]\ndense_ranks = true')
    )
    config = later.lookup("plain")
    assert config is not None and config.dense_ranks
    dense_reader = TeamReader(client, later, namespace)
    with pytest.raises(DenseRanksUnavailable, match="0 of 3 teams counted"):
        dense_reader.top("plain", "alltime", NOW_MS, ranks="dense")
    assert verify_game(client, plain.keys, plain._kind, dense=True) != []
    resync_teams(client, namespace, {"plain": config})
    assert verify_game(client, plain.keys, plain._kind, dense=True) == []
    page = dense_reader.top("plain", "alltime", NOW_MS, ranks="dense")
    assert [(e["teamId"], e["rank"]) for e in page["entries"]] == [("b", 1), ("a", 1), ("c", 2)]
    assert dense_reader.rank("plain", "c", "alltime", NOW_MS, ranks="dense")["rank"] == 2
