"""Dense ranks on real Redis: the distinct-score counts the job's write keeps, and the reads.

Events go through the job's own write path (planner lookups, one read, plan,
the Lua group write, commit), in batches of two partitions, pieces of a few
updates, a tiny cache (values evicted and read back), retracts, restarts of the
planner, writes sent twice (the second must change nothing), and Redis losing
every write since a snapshot (its keys restored from it) while the job re-applies
the batches after it, as healing does (docs/DESIGN.md). After each
sequence the oracle takes every board as Redis holds it, sorts it and counts
its distinct scores: the counts hash, the set of distinct floors and every
dense rank a reader gives (top, rank, around, tournaments) must equal it.
Standalone and on the cluster of ``lb up --cluster``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.keys import GroupKeys
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from jobs.dense_counts import check, recount
from readers.boards import BoardReader
from readers.dense import DenseRanksUnavailable
from sinks.boards import RedisBoardStore

TOPIC = "score-events"
#: Today (UTC): daily boards of today and tomorrow expire in the future, so their
#: counts' expiry is real; a past day's board would be deleted by its EXPIREAT at once.
TODAY = datetime.now(UTC).date()
TOMORROW = TODAY + timedelta(days=1)
GAMES = f"""
[games."db"]
max_score = 9
windows = ["alltime", "daily"]
dense_ranks = true
[games."db".tournaments]
cup = {{ start = {TODAY}, end = {TOMORROW} }}
[games."di"]
operator = "incr"
max_score = 12
windows = ["alltime", "daily"]
dense_ranks = true
[games."ds"]
operator = "set"
max_score = 9
windows = ["alltime", "daily"]
dense_ranks = true
[games."da"]
order = "asc"
max_score = 9
windows = ["alltime", "daily"]
dense_ranks = true
[games."sb"]
max_score = 9
windows = ["alltime", "daily"]
dense_ranks = true
shards = 3
[games."si"]
operator = "incr"
max_score = 12
windows = ["alltime", "daily"]
dense_ranks = true
shards = 4
[games."sa"]
order = "asc"
operator = "set"
max_score = 9
windows = ["alltime", "daily"]
dense_ranks = true
shards = 2
[games."plain"]
max_score = 9
windows = ["alltime"]
"""
#: Games split over shards: their counts over all shards follow in a second write.
SHARDED = ("sb", "si", "sa")
T0 = int(datetime(TODAY.year, TODAY.month, TODAY.day, 20, tzinfo=UTC).timestamp() * 1000)
NOW_MS = T0 + 3_600_000
PLAYERS = [f"p{i}" for i in range(8)]


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


class Crash(Exception):
    """The job dies between a shard's write and the game-wide counts' write."""


class CrashingStore(RedisBoardStore):
    """A store whose process dies right after the shard writes were answered."""

    def _follow(self, pending: Any) -> None:
        if any(pending.values()):
            raise Crash


class Writer:
    """The job's write path for one namespace, with restarts, doubled writes and lost writes."""

    def __init__(
        self, client: RedisClient, catalog: GameCatalog, ns: str, pieces: int, origin: int = T0
    ) -> None:
        self.client, self.catalog, self.ns, self.pieces = client, catalog, ns, pieces
        self.origin = origin
        self.store = RedisBoardStore(client)
        self.offsets = [0, 0]
        self.history: list[CheckedBatch] = []
        self.saved: list[tuple[str, Any, int]] = []
        self.saved_at = -1
        self.restart()

    def restart(self) -> None:
        """A new planner: a cold, tiny cache (values read back from Redis, evicted)."""
        self.planner = BoardPlanner(
            self.ns, 300_000, cache_capacity=2, partitions={TOPIC: 2}, max_updates=self.pieces
        )

    def batch(
        self,
        game: str,
        steps: list[tuple[bool, int, int, int]],
        twice: bool,
        crash: bool = False,
        replay: bool = True,
    ) -> None:
        config = self.catalog.lookup(game)
        assert config is not None
        by_partition: dict[int, list[Accepted]] = {0: [], 1: []}
        for retract, index, score, minute in steps:
            partition = index % 2
            offset = self.offsets[partition]
            self.offsets[partition] += 1
            ts = self.origin + minute * 60_000
            kind = EventKind.RETRACT if retract else EventKind.SCORE
            event = ScoreEvent(uuid.uuid4().hex, game, PLAYERS[index], score, ts, kind, "k1", b"")
            by_partition[partition].append(
                Accepted(offset, ts, event, config, config.windows_at(ts))
            )
        for partition, recs in by_partition.items():
            if recs:
                batch = CheckedBatch(TOPIC, partition, tuple(recs), (), recs[-1].offset)
                self.history.append(batch)
                if crash:
                    self._crash(batch, replay)
                else:
                    self._apply(batch, twice)

    def _crash(self, batch: CheckedBatch, replay: bool) -> None:
        """Die after the shard writes; the restarted job reads the batch again (unacknowledged)."""
        need = self.planner.lookups(batch)
        plan = self.planner.plan(batch, self.store.read(need), need)
        with contextlib.suppress(Crash):
            assert CrashingStore(self.client).apply(plan) == [1] * len(plan.groups)
        self.restart()
        if not replay:
            return
        need = self.planner.lookups(batch)
        plan = self.planner.plan(batch, self.store.read(need), need)
        assert self.store.apply(plan) == [0] * len(plan.groups)  # Redis had it
        self.planner.commit(plan)

    def _apply(self, batch: CheckedBatch, twice: bool) -> None:
        need = self.planner.lookups(batch)
        plan = self.planner.plan(batch, self.store.read(need), need)
        assert self.store.apply(plan) == [1] * len(plan.groups)
        if twice:  # a write Redis already has: the watermark guard answers 0
            assert self.store.apply(plan) == [0] * len(plan.groups)
        self.planner.commit(plan)

    def snapshot(self) -> None:
        """What Redis holds now, as a restart from an older RDB would bring it back."""
        self.saved = [
            (key, self.client.dump(key), self.client.pexpiretime(key))
            for key in _keys(self.client, self.ns)
        ]
        self.saved_at = len(self.history)

    def roll_back(self) -> None:
        """Redis loses every write since the snapshot; the job re-reads what it lost."""
        if self.saved_at < 0:
            return
        for key in _keys(self.client, self.ns):
            self.client.delete(key)
        for key, value, expire_at_ms in self.saved:
            if value is not None:  # an RDB keeps each key's absolute expiry
                self.client.restore(key, max(expire_at_ms, 0), value, absttl=True)
        self.restart()
        for batch in self.history[self.saved_at :]:
            self._apply(batch, False)


def _floor(composite: int, slots: int) -> int:
    return composite - composite % slots


def _check_counts(
    client: Any,
    keys: GroupKeys,
    board_key: str | None,
    window: str,
    board: dict[str, int],
    slots: int,
) -> None:
    """The counts hash and floor set under ``keys`` hold exactly ``board``'s scores."""
    floors = Counter(_floor(c, slots) for c in board.values())
    expected = {str(f): str(n) for f, n in floors.items()}
    if board:
        expected["#"] = str(len(board))
    counts = {text(k): text(v) for k, v in client.hgetall(keys.dense_counts(window)).items()}
    assert counts == expected, (keys.tag, window)
    distinct = [int(text(m)) for m in client.zrange(keys.dense_scores(window), 0, -1)]
    assert distinct == sorted(floors), (keys.tag, window)
    if board and board_key is not None:  # both expire with the board
        ttl = client.pexpiretime(board_key)
        assert client.pexpiretime(keys.dense_counts(window)) == ttl
        assert client.pexpiretime(keys.dense_scores(window)) == ttl


def check_board(client: Any, reader: BoardReader, ns: str, game: str, window: str) -> int:
    """The counts of one board against the board itself, and every dense rank read.

    A sharded game's: each shard's counts against the shard, and the game-wide
    counts against all the shards' members together.
    """
    config = reader.game(game)
    slots = config.codec(config.window(window)).slots
    tags = [game] if config.shards == 1 else [f"{game}/{i}" for i in range(config.shards)]
    board: dict[str, int] = {}
    for tag in tags:
        keys = GroupKeys(ns, tag)
        mine = {
            text(m): int(c) for m, c in client.zrange(keys.board(window), 0, -1, withscores=True)
        }
        _check_counts(client, keys, keys.board(window), window, mine, slots)
        board.update(mine)
        if config.shards > 1:  # every queued change was applied and dropped
            queued = client.hgetall(keys.dense_outbox)
            assert not [f for f in queued if not text(f).endswith("@")], queued
    if config.shards > 1:
        keys = GroupKeys(ns, game)
        expiring = next(
            (k for k in (GroupKeys(ns, t).board(window) for t in tags) if client.exists(k)), None
        )
        _check_counts(client, keys, expiring, window, board, slots)
    floors = Counter(_floor(c, slots) for c in board.values())

    def oracle(player: str) -> int:
        mine = _floor(board[player], slots)
        return 1 + sum(1 for f in floors if f > mine)

    top = reader.top(game, window, 1000, now_ms=NOW_MS, ranks="dense")
    assert [(e["playerId"], e["rank"]) for e in top["entries"]] == [
        (e["playerId"], oracle(e["playerId"])) for e in top["entries"]
    ]
    assert len(top["entries"]) == len(board)
    for player in board:
        assert reader.rank(game, player, window, now_ms=NOW_MS, ranks="dense")["rank"] == oracle(
            player
        )
    for player in list(board)[:2]:
        around = reader.around(game, player, window, 2, now_ms=NOW_MS, ranks="dense")
        lines = [*around["above"], around["player"], *around["below"]]
        assert [line["rank"] for line in lines if line] == [
            oracle(line["playerId"]) for line in lines if line
        ]
    return len(board)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    game=st.sampled_from(["db", "di", "ds", "da", "sb", "si", "sa"]),
    batches=st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    st.integers(0, 7).map(lambda n: n == 0),  # 1 in 8 a RETRACT
                    st.integers(0, len(PLAYERS) - 1),
                    st.integers(0, 9),
                    st.integers(0, 40 * 60),
                ),
                min_size=1,
                max_size=6,
            ),
            st.sampled_from(["", "", "twice", "restart", "snapshot", "lose writes", "crash"]),
        ),
        min_size=1,
        max_size=12,
    ),
    pieces=st.sampled_from([0, 3]),
)
def test_counts_and_dense_ranks_equal_the_oracle_under_ties_retracts_and_replays(
    client: Any,
    catalog: GameCatalog,
    namespace: str,
    game: str,
    batches: list[tuple[list[tuple[bool, int, int, int]], str]],
    pieces: int,
) -> None:
    ns = f"{namespace}x{uuid.uuid4().hex[:8]}"
    writer = Writer(client, catalog, ns, pieces)
    try:
        for steps, how in batches:
            if how == "restart":
                writer.restart()
            elif how == "snapshot":
                writer.snapshot()
            elif how == "lose writes":
                writer.roll_back()
            writer.batch(game, steps, twice=how == "twice", crash=how == "crash")
        reader = BoardReader(client, catalog, ns)
        shards = catalog.lookup(game).shards  # type: ignore[union-attr]
        tags = [game] if shards == 1 else [f"{game}/{i}" for i in range(shards)]
        windows = {text(w) for tag in tags for w in client.smembers(GroupKeys(ns, tag).boards)}
        for window in sorted(windows):
            check_board(client, reader, ns, game, window)
        if game == "db":
            players = {PLAYERS[index] for steps, _ in batches for _, index, _, _ in steps}
            for player in players:
                for line in reader.player_tournaments(game, player, now_ms=NOW_MS, ranks="dense")[
                    "tournaments"
                ]:
                    unique = reader.rank(game, player, line["window"], now_ms=NOW_MS)
                    dense = reader.rank(game, player, line["window"], now_ms=NOW_MS, ranks="dense")
                    assert line["rank"] == dense["rank"] <= unique["rank"]  # type: ignore[operator]
    finally:
        for node_keys in _keys(client, ns):
            client.delete(node_keys)


def _keys(client: Any, ns: str) -> list[str]:
    return [text(k) for k in client.scan_iter(match=f"{ns}:*", count=1000)]


def test_a_dense_read_of_a_game_without_counts_is_refused_before_any_read(
    client: Any, catalog: GameCatalog, namespace: str
) -> None:
    reader = BoardReader(client, catalog, namespace)
    for call in (
        lambda: reader.top("plain", "alltime", now_ms=NOW_MS, ranks="dense"),
        lambda: reader.rank("plain", "p1", "alltime", now_ms=NOW_MS, ranks="dense"),
        lambda: reader.around("plain", "p1", "alltime", now_ms=NOW_MS, ranks="dense"),
    ):
        with pytest.raises(DenseRanksUnavailable, match="keeps no distinct-score counts"):
            call()


@pytest.mark.parametrize("game", ["db", "sb"])
def test_a_board_older_than_its_counts_is_refused_not_misranked(
    client: Any, catalog: GameCatalog, namespace: str, game: str
) -> None:
    # The game's board existed before dense_ranks was turned on: its counts
    # miss those members, and reads say so rather than rank from them.
    before = GameCatalog.from_toml(GAMES.replace("dense_ranks = true", "dense_ranks = false"))
    Writer(client, before, namespace, 0).batch(game, [(False, 0, 5, 1), (False, 1, 7, 2)], False)
    writer = Writer(client, catalog, namespace, 0)
    writer.offsets = [10, 10]
    writer.batch(game, [(False, 2, 5, 3), (False, 0, 8, 4)], False)
    reader = BoardReader(client, catalog, namespace)
    assert reader.top(game, "alltime", now_ms=NOW_MS)["entries"]  # unique ranks still served
    with pytest.raises(DenseRanksUnavailable, match="incomplete distinct-score counts"):
        reader.top(game, "alltime", now_ms=NOW_MS, ranks="dense")
    with pytest.raises(QueryError, match="1 of 3 members counted"):
        reader.rank(game, "p2", "alltime", now_ms=NOW_MS, ranks="dense")


def test_game_wide_counts_that_lost_writes_are_refused_until_recounted(
    client: Any, catalog: GameCatalog, namespace: str
) -> None:
    # The master of the game's slot fails over and loses its last writes while
    # the shards keep theirs: the shard's next change does not follow what the
    # game-wide counts hold, so dense reads are refused, never wrong, until a
    # recount (what lb rebuild runs) puts them right.
    writer = Writer(client, catalog, namespace, 0)
    writer.batch("sb", [(False, 0, 5, 1), (False, 2, 7, 2)], False)
    game = [text(k) for k in client.scan_iter(match=f"{namespace}:{{sb}}:*", count=1000)]
    saved = [(key, client.dump(key), client.pexpiretime(key)) for key in game]
    writer.batch("sb", [(False, 0, 8, 3), (False, 2, 9, 4)], False)
    for key, value, expire_at_ms in saved:
        client.delete(key)
        client.restore(key, max(expire_at_ms, 0), value, absttl=True)
    writer.batch("sb", [(False, 0, 9, 5)], False)
    reader = BoardReader(client, catalog, namespace)
    with pytest.raises(DenseRanksUnavailable, match="do not follow its shards"):
        reader.top("sb", "alltime", now_ms=NOW_MS, ranks="dense")
    assert reader.top("sb", "alltime", now_ms=NOW_MS)["entries"]  # unique ranks still served
    outboxes = [GroupKeys(namespace, f"sb/{s}").dense_outbox for s in range(3)]
    queued = [f for key in outboxes for f in client.hkeys(key) if not text(f).endswith("@")]
    assert queued == []  # dropped unapplied: the recount starts from the shards
    recount(client, namespace, "sb", 3)
    for window in {
        text(w) for s in range(3) for w in client.smembers(GroupKeys(namespace, f"sb/{s}").boards)
    }:
        check_board(client, reader, namespace, "sb", window)


def test_the_check_counts_queued_changes_and_names_a_wrong_count(
    client: Any, catalog: GameCatalog, namespace: str
) -> None:
    # What lb verify runs for a sharded dense game: changes a shard queued and
    # the game-wide counts have not applied yet (the job died between the two
    # writes, or they are in flight) are no difference; a wrong count is one.
    writer = Writer(client, catalog, namespace, 0)
    writer.batch("sb", [(False, 0, 5, 1), (False, 1, 7, 2), (False, 2, 7, 3)], False)
    writer.batch("sb", [(False, 0, 8, 4), (False, 3, 8, 5)], False, crash=True, replay=False)
    outboxes = [GroupKeys(namespace, f"sb/{s}").dense_outbox for s in range(3)]
    assert any(not text(f).endswith("@") for key in outboxes for f in client.hkeys(key))
    assert check(client, namespace, "sb", 3) == []
    client.hincrby(GroupKeys(namespace, "sb").dense_counts("alltime"), "#", 1)
    found = check(client, namespace, "sb", 3)
    assert [(d.board, d.player, d.kind) for d in found] == [
        ("meta:dense:n:alltime", "#", "wrong value")
    ]


def test_a_window_that_expired_leaves_no_counts_behind(
    client: Any, catalog: GameCatalog, namespace: str
) -> None:
    # Ten days ago: the daily board's EXPIREAT is past, so Redis drops it (and
    # its counts) at once; a later RETRACT the planner remembers a value for
    # must not leave counts of a board that is not there.
    writer = Writer(client, catalog, namespace, 0, origin=T0 - 10 * 86_400_000)
    writer.batch("db", [(False, 0, 5, 1), (False, 2, 7, 2)], False)
    writer.batch("db", [(True, 0, 0, 3)], False)
    keys = GroupKeys(namespace, "db")
    daily = [text(w) for w in client.smembers(keys.boards) if text(w).startswith("daily:")]
    assert daily
    for window in daily:
        assert not client.exists(keys.board(window))
        assert not client.exists(keys.dense_counts(window), keys.dense_scores(window))
    config = catalog.lookup("db")
    assert config is not None
    floor = 7 * config.codec(config.window("alltime")).slots
    alltime = client.hgetall(keys.dense_counts("alltime"))
    assert {text(k): text(v) for k, v in alltime.items()} == {str(floor): "1", "#": "1"}
