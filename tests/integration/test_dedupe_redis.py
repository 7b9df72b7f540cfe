"""The dedupe ids in real Redis: compact bags at the planned fill, duplicates read back.

Written by the job's write path (planner lookups, one read, plan, the Lua
group write, commit) against the standalone Redis, in the test's namespace.
"""

from __future__ import annotations

import random

from adapters.redis import RedisClient
from domain.events import EventKind, ScoreEvent
from domain.games import GameConfig, Operator
from domain.planner import BoardPlanner
from domain.planner.dedupe import BAG_FILL, SeenLayout
from domain.records import Accepted, CheckedBatch
from domain.windows import WindowKind
from sinks.boards import RedisBoardStore
from sinks.boards.reads import parse_reads, read_commands

TOPIC = "score-events"
HORIZON_MS = 300_000
GAME = GameConfig(windows=(WindowKind.ALLTIME,), operator=Operator.INCR, max_score=10**6)
T = 1_778_000_000_000
BUCKET_START = (T // HORIZON_MS) * HORIZON_MS
SPLIT = 1024


def _write(
    client: RedisClient,
    namespace: str,
    layout: SeenLayout,
    recs: list[tuple[int, str]],
    first_offset: int,
) -> dict[str, int]:
    """``(record time, event id)`` records in batches of 500 by a fresh planner; its counters."""
    planner = BoardPlanner(namespace, HORIZON_MS, dedupe_layout=layout)
    store = RedisBoardStore(client)
    totals: dict[str, int] = {}
    for start in range(0, len(recs), 500):
        accepted = tuple(
            Accepted(
                first_offset + start + i,
                rts,
                ScoreEvent(eid, "g", f"p{(start + i) % 97}", 1, T, EventKind.SCORE, "k1", b""),
                GAME,
                GAME.windows_at(T),
            )
            for i, (rts, eid) in enumerate(recs[start : start + 500])
        )
        batch = CheckedBatch(TOPIC, 0, accepted, (), accepted[-1].offset)
        need = planner.lookups(batch)
        plan = planner.plan(batch, store.read(need), need)
        assert store.apply(plan) == [1] * len(plan.groups)
        planner.commit(plan)
        for name, value in plan.totals().items():
            totals[name] = totals.get(name, 0) + value
    return {name: value for name, value in totals.items() if value}


def _batch(recs: list[tuple[int, str]], first_offset: int) -> CheckedBatch:
    accepted = tuple(
        Accepted(
            first_offset + i,
            rts,
            ScoreEvent(eid, "g", f"p{i % 97}", 1, T, EventKind.SCORE, "k1", b""),
            GAME,
            GAME.windows_at(T),
        )
        for i, (rts, eid) in enumerate(recs)
    )
    return CheckedBatch(TOPIC, 0, accepted, (), accepted[-1].offset)


def test_a_replayed_historys_scattered_lookups_share_script_calls_and_find_every_copy(
    redis_client: RedisClient, namespace: str
) -> None:
    """Record times over 400 buckets in random order: a field or two per dedupe key.

    The store asks such keys through the ``read_bags.lua`` script, many per call;
    it must read exactly what one ``HMGET`` per key reads, and every copy is found.
    """
    layout = SeenLayout(HORIZON_MS, SPLIT)
    rnd = random.Random(7)
    recs = [(BUCKET_START + rnd.randrange(400 * HORIZON_MS), f"event-{i}") for i in range(2000)]
    assert _write(redis_client, namespace, layout, recs, 0) == {"applied": 2000}

    planner = BoardPlanner(namespace, HORIZON_MS, dedupe_layout=layout)
    need = planner.lookups(_batch(recs[:500], 2000))
    assert len(need.seen) > 1000  # three buckets per record, a part each
    batched = read_commands([need], (), (), batched=True)
    assert 0 < sum(c[0] == "EVAL" for c in batched) < 10 and len(batched) < 20
    before = redis_client.info("commandstats").get("cmdstat_eval", {}).get("calls", 0)
    got = RedisBoardStore(redis_client).read(need)
    after = redis_client.info("commandstats")["cmdstat_eval"]["calls"]
    assert after > before
    pipe = redis_client.pipeline(transaction=False)
    for command in read_commands([need], (), ()):
        pipe.execute_command(*command)
    (plain,), _ = parse_reads([need], 0, pipe.execute())
    assert got.seen == plain.seen
    assert sum(value is not None for values in got.seen for value in values) >= 500

    copies = [(rts + rnd.choice((-1, 1)) * rnd.randrange(HORIZON_MS), eid) for rts, eid in recs]
    assert _write(redis_client, namespace, layout, copies, 2000) == {"duplicate": 2000}


def test_ids_at_the_planned_fill_stay_compact_and_are_found_again(
    redis_client: RedisClient, namespace: str
) -> None:
    layout = SeenLayout(HORIZON_MS, SPLIT)
    n = SPLIT * BAG_FILL
    recs = [(BUCKET_START + i * HORIZON_MS // n, f"event-{i}") for i in range(n)]
    assert _write(redis_client, namespace, layout, recs, 0) == {"applied": n}

    keys = list(redis_client.scan_iter(match=f"{namespace}:*meta:seen:*", count=1000))
    assert len(keys) == 16  # parts
    bags = used = 0
    for key in keys:
        assert 0 < redis_client.ttl(key) <= 2 * HORIZON_MS // 1000 + 60
        bags += redis_client.hlen(key)
        used += int(redis_client.memory_usage(key, samples=0) or 0)
    assert bags == SPLIT
    assert used / n <= 16, used / n

    # Copies a horizon later or earlier (a restarted planner: read back from Redis)
    # are duplicates; a horizon and a millisecond later they are new events.
    again = [(rts + HORIZON_MS * (1 if i % 2 else -1), eid) for i, (rts, eid) in enumerate(recs)]
    assert _write(redis_client, namespace, layout, again, n) == {"duplicate": n}
    later = [(rts + HORIZON_MS + 1, eid) for rts, eid in recs]
    assert _write(redis_client, namespace, layout, later, 2 * n) == {"applied": n}
