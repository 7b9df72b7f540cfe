"""What keeping distinct-score counts (``dense_ranks``) costs Redis per event: a ratio.

The same synthetic events are planned by the job's planner and written by its
Lua group write twice, into two games that differ only in ``dense_ranks``;
batches alternate between them, so drift on a shared machine hits both. The
Redis time is what the script measures itself around its writes (``TIME``
before and after, the figure ``lb_group_write_seconds`` exports), summed per
game, so other clients of the same Redis do not count.

Events: ``--players`` players, scores drawn log-normal (mu 7, sigma 1.5, as
``lb produce`` draws first scores: nearly every score distinct, the counts' worst
case) or, with ``--distinct N``, uniform over N values (many ties), on the
default game (``best``; all-time, weekly and daily boards), event times spread
over one day.

With ``--shards S`` both games are split over ``S`` shards; the dense one's
writes then also queue their changes for the game-wide counts, which the
bench applies and drops as the store does (``sinks.boards.dense_union``), and
their Redis time counts too (reported apart as well).

Usage (the services up: ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.dense_cost                       # 300K events, 50K players
    .venv/bin/python -m bench.dense_cost --distinct 100              # many ties
    .venv/bin/python -m bench.dense_cost --shards 4                  # sharded games

Progress on stderr, a JSON summary on stdout; writes no doc section
(docs/BENCHMARKS.md quotes it with this command). Its keys live in a
throwaway namespace, deleted at the end or on SIGTERM.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from adapters.redis import RedisClient
from bench.common import Scratch, base_settings, emit, log, machine
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.planner import BoardPlanner
from domain.records import Accepted, CheckedBatch
from sinks.boards.dense_union import TRIM_OUTBOX, UNION_APPLY, queued, union_call
from sinks.boards.encoding import PER_COMMAND, encode
from sinks.boards.store import APPLY_GROUP, RedisBoardStore

TOPIC = "bench-dense"


def _games(shards: int) -> str:
    return (
        f'[games."plain"]\nshards = {shards}\n'
        f'[games."dense"]\ndense_ranks = true\nshards = {shards}\n'
    )


DAY_START_MS = int(datetime(2026, 5, 4, tzinfo=UTC).timestamp() * 1000)


def _events(count: int, players: int, seed: int, distinct: int) -> list[tuple[str, int, int]]:
    """``(player, score, ts)`` in log order; ``distinct > 0``: scores uniform in 0..distinct-1."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if distinct:
            score = rng.randrange(distinct)
        else:
            score = min(10_000_000, int(math.exp(rng.gauss(7, 1.5))))
        ts = DAY_START_MS + (i * 86_400_000) // count
        out.append((f"p{rng.randrange(players):07d}", score, ts))
    return out


def _follow(client: RedisClient, replies: list[Any]) -> int:
    """The game-wide writes and trims of a sharded dense game's queued changes; Redis us."""
    spent = 0
    for (outbox, field), entries in queued(replies).items():
        if not entries:
            continue
        keys, argv_ = union_call(outbox, field, entries, PER_COMMAND)
        ok, applied, micros = UNION_APPLY(client, keys, argv_)
        assert int(ok) == 1
        spent += int(micros)
        _, micros = TRIM_OUTBOX(client, [outbox], [field, int(applied)])
        spent += int(micros)
    return spent


def main(argv: list[str] | None = None) -> int:
    """Write the same events into a plain and a dense game; print the Redis time of each."""
    parser = argparse.ArgumentParser(prog="python -m bench.dense_cost", description=__doc__)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--players", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000, help="events per batch")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument(
        "--distinct",
        type=int,
        default=0,
        help="scores uniform over this many values (many ties); 0: log-normal (default)",
    )
    parser.add_argument("--shards", type=int, default=1, help="shards of both games")
    args = parser.parse_args(argv)
    if min(args.events, args.players, args.batch, args.shards) <= 0 or args.distinct < 0:
        parser.error("--events, --players, --batch and --shards must be positive, --distinct >= 0")
    catalog = GameCatalog.from_toml(_games(args.shards))
    events = _events(args.events, args.players, args.seed, args.distinct)
    info = machine()
    with Scratch(base_settings(), f"bench-dense-{uuid.uuid4().hex[:10]}") as scratch:
        ns = scratch.namespace(scratch.prefix)
        client = scratch.redis
        store = RedisBoardStore(client)
        planner = BoardPlanner(ns, 300_000, partitions={TOPIC: 1})
        micros = {"plain": 0, "dense": 0}
        members = {"plain": 0, "dense": 0}
        game_wide = 0  # of the dense game's micros: game-wide counts and outbox trims
        for n, start in enumerate(range(0, len(events), args.batch)):
            chunk = events[start : start + args.batch]
            games = ["plain", "dense"] if n % 2 == 0 else ["dense", "plain"]
            for game in games:
                config = catalog.lookup(game)
                assert config is not None
                recs = tuple(
                    Accepted(
                        start + i,
                        ts,
                        ScoreEvent(
                            f"{game}{start + i}", game, player, score, ts, EventKind.SCORE, "k", b""
                        ),
                        config,
                        config.windows_at(ts),
                    )
                    for i, (player, score, ts) in enumerate(chunk)
                )
                batch = CheckedBatch(TOPIC, 0, recs, (), recs[-1].offset)
                need = planner.lookups(batch)
                plan = planner.plan(batch, store.read(need), need)
                replies = []
                for write in plan.groups:
                    keys, argv_ = encode(write)
                    reply = APPLY_GROUP(client, keys, argv_)
                    assert int(reply[0]) == 1, reply
                    micros[game] += int(reply[1])
                    members[game] += sum(len(m) for m in write.zadd.values())
                    replies.append(reply)
                spent = _follow(client, replies)
                micros[game] += spent
                game_wide += spent
                planner.commit(plan)
            if n % 10 == 0:
                log(f"{start + len(chunk):,} events: Redis us {micros}")
        per_event = {game: micros[game] / len(events) for game in micros}
        ratio = micros["dense"] / max(1, micros["plain"])
        log(
            f"Redis time per event: plain {per_event['plain']:.2f} us, dense "
            f"{per_event['dense']:.2f} us ({ratio:.2f}x; game-wide counts "
            f"{game_wide / len(events):.2f} us); members written {members}"
        )
    emit(
        {
            "benchmark": "dense_cost",
            "command": ".venv/bin/python -m bench.dense_cost "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": info,
            "args": vars(args),
            "redis_us_per_event": {k: round(v, 3) for k, v in per_event.items()},
            "members_written": members,
            "ratio": round(ratio, 3),
            "dense_game_wide_us_per_event": round(game_wide / len(events), 3),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
