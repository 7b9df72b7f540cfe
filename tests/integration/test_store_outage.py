"""The board store's writes that could not leave: a real Redis refusing to run them for a while.

The store sends a round's group writes without waiting for their answers; on
a standalone Redis a paced send still waits for replies to let its later
writes go. When Redis stalls right then, the send fails and the next round
trip sends the writes again. That failure is the start of an outage like any
other: logged as a warning, and the round trip that succeeds afterwards is
logged as a recovery, timed from the failed send. The writes land once.
"""

from __future__ import annotations

import logging

import pytest
import redis

from adapters.redis import text_of
from domain.backoff import Backoff
from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig, Operator
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from domain.windows import WindowKind
from sinks.boards import RedisBoardStore
from tests.integration.watching import private_redis

GAME = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=10**6)
T = 1_778_000_000_000
PLAYERS = 6


def _batch() -> CheckedBatch:
    accepted = tuple(
        Accepted(
            i,
            T,
            ScoreEvent(f"e{i}", "g", f"p{i}", 10 + i, T, EventKind.SCORE, "k1", b""),
            GAME,
            GAME.windows_at(T),
        )
        for i in range(PLAYERS)
    )
    return CheckedBatch("score-events", 0, accepted, (), accepted[-1].offset)


def test_writes_that_could_not_leave_are_an_outage_logged_and_recovered_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with private_redis() as server:
        _write_through_a_pause(server.port, caplog)


def _write_through_a_pause(port: int, caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis(port=port, socket_timeout=1.0, socket_connect_timeout=1.0)
    admin = redis.Redis(port=port, socket_timeout=5)
    # A few players per group write: several scripts, one in Redis at a time.
    planner = BoardPlanner("ns", 300_000, max_updates=2)
    store = RedisBoardStore(client, Backoff(budget_s=60), writes_in_flight=1)
    batch = _batch()
    need = planner.lookups(batch)
    plan = planner.plan(batch, store.read(need), need)
    groups = len(plan.groups)
    assert groups >= 2, "the test needs a send that waits for a reply"
    planner.commit(plan)

    # Scripts wait out the pause (reads would not): the send times out after 1 s;
    # the round trip after it most likely waits 0.5 s and succeeds at once, which
    # is still the end of the outage the failed send began.
    admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
    with caplog.at_level(logging.WARNING):
        assert store.send_writes([plan]) is None
        assert "Redis write not sent (Timeout" in caplog.text
        _, _, answers = store.exchange([])
    assert answers == [1] * groups
    recovered = [r.getMessage() for r in caplog.records if "recovered after" in r.getMessage()]
    assert len(recovered) == 1, caplog.text
    assert recovered[0].startswith("Redis read recovered after"), recovered
    written = {m: v for write in plan.groups for m, v in write.zadd["ns:{g}:alltime"].items()}
    board = dict(admin.zrange("ns:{g}:alltime", 0, -1, withscores=True))
    assert {text_of(m): int(v) for m, v in board.items()} == written
    assert len(written) == PLAYERS
