"""Team boards on real Redis: the job's write path and the membership write against the oracle.

Score events go through the job's own planner, board store and Lua group
write; membership records through the membership write. Whatever the
interleaving of the two streams, and after replaying either of them again,
every team board, members set and sum must equal
:func:`domain.teams.team_boards` of the final membership and the final boards
(``jobs.team_verify.verify_game``), and the membership must be each player's
last record. Standalone Redis and the local Redis Cluster.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.redis import RedisClient, text
from domain.errors import ConfigError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from domain.teams import TeamAggregate, TeamKeys
from jobs.team_verify import verify_game
from readers.teams import TeamReader
from sinks.boards import RedisBoardStore
from sinks.teams.store import apply_membership
from tests.integration.api_server import api_settings, running_api
from tests.integration.streams import KEYS
from tests.integration.test_http_api import Client

GAMES = """
[games."tsum"]
teams = "sum"
max_score = 1000
windows = ["alltime", "daily"]
[games."tbest"]
teams = "best"
operator = "incr"
max_score = 1000
windows = ["alltime", "daily"]
[games."tavg"]
teams = "avg"
operator = "set"
max_score = 1000
windows = ["alltime", "weekly"]
"""
#: Far enough ahead that no daily or weekly board expires while the tests run.
T0 = int(datetime(2031, 3, 3, tzinfo=UTC).timestamp() * 1000)
NOW_MS = T0 + 3 * 86_400_000
SCORES, MEMBERS = "score-events", "team-membership"
PLAYERS = [f"p{i}" for i in range(6)]
TEAMS = ["red", "blue", "green"]


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


CATALOG = GameCatalog.from_toml(GAMES)


class Pipeline:
    """The two writers of one namespace: the score path (one partition) and the membership one."""

    def __init__(
        self, client: RedisClient, ns: str, game: str, catalog: GameCatalog = CATALOG
    ) -> None:
        config = catalog.lookup(game)
        assert config is not None and config.teams is not None
        self.client, self.ns, self.game, self.config = client, ns, game, config
        self.keys = TeamKeys(ns, game)
        self.scores: list[tuple[str, int | None, int]] = []
        self.members: list[tuple[str, str | None]] = []
        self.planner = BoardPlanner(ns, 300_000, partitions={SCORES: 1})
        self.store = RedisBoardStore(client)

    def score(self, player: str, score: int | None, minute: int, replay: bool = False) -> None:
        """One SCORE (or RETRACT, ``score`` None) record through the job's write path."""
        offset = self._replayed if replay else len(self.scores)
        if not replay:
            self.scores.append((player, score, minute))
        ts = T0 + minute * 60_000
        kind = EventKind.RETRACT if score is None else EventKind.SCORE
        event = ScoreEvent(f"e{offset}", self.game, player, score or 0, ts, kind, "k1", b"")
        rec = Accepted(offset, ts, event, self.config, self.config.windows_at(ts))
        batch = CheckedBatch(SCORES, 0, (rec,), (), offset)
        need = self.planner.lookups(batch)
        plan = self.planner.plan(batch, self.store.read(need), need)
        answers = self.store.apply(plan)
        assert answers == [0 if replay else 1] * len(plan.groups)
        self.planner.commit(plan)

    def member(self, player: str, team: str | None) -> None:
        offset = len(self.members)
        self.members.append((player, team))
        apply_membership(
            self.client,
            self.keys,
            self._kind,
            f"{MEMBERS}/0",
            [(offset, player, team)],
            offset,
            dense=self.config.dense_ranks,
        )

    @property
    def _kind(self) -> TeamAggregate:
        assert self.config.teams is not None
        return self.config.teams

    def replay(self) -> None:
        """Both logs again from the start, as after a crash: nothing may change."""
        records = [(o, p, t) for o, (p, t) in enumerate(self.members)]
        if records:
            apply_membership(
                self.client,
                self.keys,
                self._kind,
                f"{MEMBERS}/0",
                records,
                len(records) - 1,
                dense=self.config.dense_ranks,
            )
        self.planner = BoardPlanner(self.ns, 300_000, partitions={SCORES: 1})
        for offset, (player, score, minute) in enumerate(self.scores):
            self._replayed = offset
            self.score(player, score, minute, replay=True)

    _replayed = 0

    def check(self) -> None:
        dense = self.config.dense_ranks
        assert verify_game(self.client, self.keys, self._kind, dense=dense) == []
        last: dict[str, str | None] = {}
        for player, team in self.members:
            last[player] = team
        stored = {text(p): text(t) for p, t in self.client.hgetall(self.keys.membership).items()}
        assert stored == {p: t for p, t in last.items() if t}


def steps(
    players: list[str], teams: list[str], top: int
) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Score records (scores 0..top, None: a RETRACT) and membership records, interleaved."""
    return st.lists(
        st.one_of(
            st.tuples(
                st.just("score"),
                st.sampled_from(players),
                st.one_of(st.none(), st.integers(0, top)),
                st.integers(0, 3 * 24 * 60),
            ),
            st.tuples(st.just("member"), st.sampled_from(players), st.sampled_from([None, *teams])),
        ),
        min_size=1,
        max_size=40,
    )


def run_steps(pipeline: Pipeline, taken: list[tuple[Any, ...]]) -> Iterator[int]:
    """Apply the steps in order, yielding each one's index once it is written."""
    for n, step in enumerate(taken):
        if step[0] == "score":
            pipeline.score(step[1], step[2], step[3])
        else:
            pipeline.member(step[1], step[2])
        yield n


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(game=st.sampled_from(["tsum", "tbest", "tavg"]), taken=steps(PLAYERS, TEAMS, 1000))
def test_team_boards_equal_the_oracle_whatever_the_interleaving(
    client: RedisClient, namespace: str, game: str, taken: list[tuple[Any, ...]]
) -> None:
    ns = f"{namespace}{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(client, ns, game)
    try:
        for _ in run_steps(pipeline, taken):
            pass
        pipeline.check()
        pipeline.replay()
        pipeline.check()
    finally:
        for key in client.scan_iter(match=f"{ns}:*"):
            client.delete(key)


def test_two_interleavings_of_the_same_logs_give_the_same_team_boards(
    client: RedisClient, namespace: str
) -> None:
    scores = [("p0", 50, 1), ("p1", 70, 2), ("p2", 20, 3), ("p0", 90, 4), ("p3", 10, 5)]
    members = [("p0", "red"), ("p1", "red"), ("p2", "blue"), ("p0", "blue"), ("p3", "red")]
    states = []
    for n, order in enumerate(["scores first", "members first", "alternating"]):
        pipeline = Pipeline(client, f"{namespace}{n}", "tsum")
        if order == "scores first":
            steps = [("s", s) for s in scores] + [("m", m) for m in members]
        elif order == "members first":
            steps = [("m", m) for m in members] + [("s", s) for s in scores]
        else:
            pairs = itertools.zip_longest(scores, members)
            steps = [x for s, m in pairs for x in (("s", s), ("m", m))]
        for what, item in steps:
            if what == "s":
                pipeline.score(*item)
            else:
                pipeline.member(*item)
        pipeline.check()
        reader = TeamReader(client, CATALOG, f"{namespace}{n}")
        states.append(
            (
                reader.top("tsum", "alltime", NOW_MS),
                reader.members("tsum", "blue", "alltime", NOW_MS),
                reader.members("tsum", "red", "alltime", NOW_MS),
            )
        )
    assert states[0] == states[1] == states[2]
    top, blue, red = states[0]
    # blue: p0 (90) + p2 (20); red: p1 (70) + p3 (10)
    assert top["entries"] == [
        {"rank": 1, "teamId": "blue", "score": 110},
        {"rank": 2, "teamId": "red", "score": 80},
    ]
    assert [(e["playerId"], e["score"]) for e in blue["entries"]] == [("p0", 90), ("p2", 20)]
    assert [(e["playerId"], e["score"]) for e in red["entries"]] == [("p1", 70), ("p3", 10)]


def test_reads_rank_around_and_aggregates(client: RedisClient, namespace: str) -> None:
    for game, expected in (("tbest", [("a", 60), ("b", 40)]), ("tavg", [("a", 45.0), ("b", 40.0)])):
        pipeline = Pipeline(client, namespace, game)
        for player, team in (("p0", "a"), ("p1", "a"), ("p2", "b")):
            pipeline.member(player, team)
        for player, score, minute in (("p0", 30, 1), ("p1", 60, 2), ("p2", 40, 3)):
            pipeline.score(player, score, minute)
        reader = TeamReader(client, CATALOG, namespace)
        page = reader.top(game, "alltime", NOW_MS)
        assert [(e["teamId"], e["score"]) for e in page["entries"]] == expected
        rank = reader.rank(game, "b", "alltime", NOW_MS)
        assert (rank["rank"], rank["members"]) == (2, 1)
        around = reader.around(game, "b", "alltime", NOW_MS, k=1)
        assert [e["teamId"] for e in around["above"]] == ["a"] and around["below"] == []
        assert reader.rank(game, "nobody", "alltime", NOW_MS)["rank"] is None
        assert reader.team_of(game, "p2") == {"playerId": "p2", "teamId": "b"}


def test_team_rules_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="unsharded"):
        GameCatalog.from_toml('[games."x"]\nteams = "sum"\nshards = 2\n')
    with pytest.raises(ConfigError, match="desc"):
        GameCatalog.from_toml('[games."x"]\nteams = "sum"\norder = "asc"\n')
    with pytest.raises(ConfigError, match="per game"):
        GameCatalog.from_toml('[default]\nteams = "sum"\n')
    with pytest.raises(ConfigError, match="teams"):
        GameCatalog.from_toml('[games."x"]\nteams = "median"\n')


def test_the_http_routes_answer_what_the_reader_answers(
    kafka_bootstrap: str, redis_url: str, redis_client: RedisClient, namespace: str
) -> None:
    pipeline = Pipeline(redis_client, namespace, "tsum")
    for player, team in (("p0", "a"), ("p1", "a"), ("p2", "b")):
        pipeline.member(player, team)
    for player, score, minute in (("p0", 30, 1), ("p1", 60, 2), ("p2", 40, 3)):
        pipeline.score(player, score, minute)
    settings = api_settings(kafka_bootstrap, redis_url, "unused", namespace, KEYS)
    reader = TeamReader(redis_client, CATALOG, namespace)
    with running_api(settings, catalog=CATALOG, clock=lambda: NOW_MS) as base:
        http = Client(base)
        base_path = "/v1/leaderboards/tsum/teams"
        status, _, page = http.get(f"{base_path}?window=alltime&limit=5")
        assert (status, page) == (200, reader.top("tsum", "alltime", NOW_MS, 5))
        assert [(e["teamId"], e["score"]) for e in page["entries"]] == [("a", 90), ("b", 40)]
        status, _, rank = http.get(f"{base_path}/b")
        assert (status, rank) == (200, reader.rank("tsum", "b", "alltime", NOW_MS))
        status, _, around = http.get(f"{base_path}/b/around?k=1")
        assert (status, around["above"][0]["teamId"]) == (200, "a")
        status, _, members = http.get(f"{base_path}/a/members?window=daily:2031-03-03")
        assert status == 200
        assert [(e["playerId"], e["score"]) for e in members["entries"]] == [("p1", 60), ("p0", 30)]
        status, _, missing = http.get(f"{base_path}/nobody")
        assert (status, missing["error"]["code"]) == (404, "NOT_FOUND")
        status, _, bad = http.get(f"{base_path}/a:b")
        assert status == 400, bad
        status, _, unknown = http.get("/v1/leaderboards/nogame/teams")
        assert (status, unknown["error"]["code"]) == (404, "UNKNOWN_GAME")
