"""A replay folded in memory and loaded in bulk leaves what the Lua group writes leave.

Real Kafka and Redis: a stream with duplicates, retracts, bad records, erasures,
v2 metadata, several windows, a tournament and dense-ranked games is replayed
into one namespace through Redis (``memory_members=0``, the group writes) and
into another through the fold (:mod:`jobs.replay_memory`), by one process and
by two (and with a planner cache that evicts at once), and the namespaces are
compared key by key; then ``lb rebuild`` (which folds) is checked against the
independent oracle and ``lb verify``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient, text
from config.settings import Settings
from domain.backfill_plan import BackfillPlan, Mode, split_ranges
from domain.errors import ServiceError
from domain.planner import MAX_UPDATES, BoardPlanner
from domain.planner.dedupe import FIELD_BYTES
from jobs import replay_memory
from jobs.backfill import make_plan
from jobs.namespace_swap import drop_namespace
from jobs.replay_memory import MEMORY_MEMBERS, FoldingStore, Keyspace, load
from jobs.replay_workers import Part, replay_part, replay_tools, run_parts
from sinks.boards import RedisBoardStore
from tests.faults.harness import verify
from tests.integration.streams import (
    DEDUPE_HORIZON_MS,
    GAMES_TOML,
    Stream,
    generate,
    job_env,
    lb,
    produce,
)

pytestmark = pytest.mark.timeout(300)

#: A bag entry: the fingerprint's field bytes, then the record time in the bucket (3 bytes).
ENTRY = FIELD_BYTES + 3
#: A dedupe set's TTL runs from its last write: the two replays end seconds apart.
SEEN_SLACK_MS = 120_000


def _games() -> str:
    """The test games, ``gbest`` and ``gtz`` with distinct-score counts (dense ranks)."""
    out = []
    for line in GAMES_TOML.splitlines():
        out.append(line)
        if line in ('[games."gbest"]', '[games."gtz"]'):
            out.append("dense_ranks = true")
    return "\n".join(out) + "\n"


def snapshot(client: RedisClient, namespace: str, *, bags: bool) -> dict[str, Any]:
    """Every key of ``namespace`` (its name after the namespace): type, value, expiry.

    ``bags``: dedupe bags as sorted entries (two processes append in either order).
    """
    out: dict[str, Any] = {}
    for raw in client.scan_iter(match=f"{namespace}:*", count=1000):
        key = text(raw)
        kind = text(client.type(key))
        value: Any
        if kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = client.hgetall(key)
            if bags and ":meta:seen:" in key:
                value = {
                    f: sorted(v[at : at + ENTRY] for at in range(0, len(v), ENTRY))
                    for f, v in value.items()
                }
        elif kind == "set":
            value = sorted(client.smembers(key))
        else:
            value = kind
        out[key[len(namespace) :]] = (value, int(client.execute_command("PEXPIRETIME", key)))
    return out


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Key by key; a dedupe set's expiry (a TTL from its last write) within the slack."""
    assert sorted(got) == sorted(want)
    for key, (value, expiry) in want.items():
        assert got[key][0] == value, key
        if ":meta:seen:" in key:
            assert abs(got[key][1] - expiry) <= SEEN_SLACK_MS, key
        else:
            assert got[key][1] == expiry, key


def _replay(
    settings: Settings,
    topic: str,
    namespace: str,
    processes: int,
    memory: int,
    cache: int = 2_000_000,
    plan: BackfillPlan | None = None,
) -> tuple[dict[str, Any], dict[int, int]]:
    """The namespace a replay of ``plan`` (the whole topic) leaves, and where it stopped."""
    client, log, validator = replay_tools(settings, topic)
    drop_namespace(client, namespace)
    if plan is None:
        plan = make_plan(log, topic, (), None, None)
    parts = [
        Part(i, ranges, plan, namespace, DEDUPE_HORIZON_MS, cache, None, memory)
        for i, ranges in enumerate(split_ranges(plan.ranges, processes))
    ]
    if processes == 1:
        ends = replay_part(parts[0], client, log, validator, lambda _: None).ends
    else:
        tools = functools.partial(replay_tools, settings, topic)
        _, ends = run_parts(parts, tools, lambda _: None)
    got = snapshot(client, namespace, bags=processes > 1)
    drop_namespace(client, namespace)
    return got, ends


def _produced(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path, stream: Stream
) -> Settings:
    """``stream`` in ``topic``; the settings of a replay of it with this module's games."""
    produce(kafka_bootstrap, topic, stream.records)
    games = tmp_path / "games.toml"
    games.write_text(_games())
    return Settings.from_env(job_env(topic, namespace, tmp_path / "state", games))


@pytest.mark.parametrize("processes", [1, 2])
def test_the_fold_leaves_every_key_as_the_group_writes_do(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path, processes: int
) -> None:
    stream = generate(seed=61, count=4000, metadata_ratio=0.3, erasures=0.01)
    settings = _produced(kafka_bootstrap, topic, namespace, tmp_path, stream)
    written, _ = _replay(settings, topic, f"{namespace}~lua", processes, 0)
    folded, _ = _replay(settings, topic, f"{namespace}~fold", processes, MEMORY_MEMBERS)
    # A planner cache that evicts at once: the fold says which values it lacks.
    evicting, _ = _replay(settings, topic, f"{namespace}~evicting", processes, MEMORY_MEMBERS, 8)
    # A bound the fold passes after its first round: it loads, then writes through Redis.
    handed_on, _ = _replay(settings, topic, f"{namespace}~handed", processes, 50)
    assert any(":meta:dense:n:" in key for key in written)
    assert any(":meta:entry:" in key for key in written)
    assert any(":meta:seen:" in key for key in written)
    assert_same(folded, written)
    assert_same(evicting, written)
    assert_same(handed_on, written)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_replay_folds_the_records_written_after_its_plan_before_it_loads(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path, processes: int
) -> None:
    # 3,000 records per process past a plan made at half the topic: over
    # FOLLOW_MIN_RECORDS, so each process folds them itself.
    stream = generate(seed=64, count=12_000, metadata_ratio=0.2)
    settings = _produced(kafka_bootstrap, topic, namespace, tmp_path, stream)
    _, log, _ = replay_tools(settings, topic)
    whole = make_plan(log, topic, (), None, None)
    early = dataclasses.replace(
        whole, ranges={p: (a, a + (end - a) // 2) for p, (a, end) in whole.ranges.items()}
    )
    assert whole.follow and 2 * early.records <= whole.records
    full, full_ends = _replay(settings, topic, f"{namespace}~full", processes, MEMORY_MEMBERS)
    followed, ends = _replay(
        settings, topic, f"{namespace}~early", processes, MEMORY_MEMBERS, plan=early
    )
    assert ends == full_ends == log.ends()
    assert_same(followed, full)  # boards, dedupe ids, counters and watermarks
    # A fill (a bounded range) stops where its plan does.
    bounded = dataclasses.replace(early, follow=False, mode=Mode.FILL)
    _, stopped = _replay(settings, topic, f"{namespace}~fill", processes, 0, plan=bounded)
    assert stopped == {p: end for p, (_, end) in early.ranges.items()}


def test_the_fold_lifts_the_planners_write_bound_and_gives_it_back_when_it_hands_on(
    redis_client: RedisClient, namespace: str
) -> None:
    planner = BoardPlanner(namespace, DEDUPE_HORIZON_MS, changes=False, fresh=True)
    store = FoldingStore(redis_client, RedisBoardStore(redis_client), 10, planner)
    told = planner.absent
    assert planner.max_updates == 0 and told is not None
    assert told(f"{namespace}:g:alltime", "p1")
    store.hand_on("a test")
    assert planner.max_updates == MAX_UPDATES and planner.absent is None
    assert store.handed_on == "a test" and not store.folding


def test_lb_rebuild_folds_and_matches_the_oracle(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream = generate(seed=62, count=4000, metadata_ratio=0.2)
    produce(kafka_bootstrap, topic, stream.records)
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    # The live job wrote the dead letters (a rebuild does not) and the boards it replaces.
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    done = lb(["rebuild", "--processes", "2"], env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    # The fold's load is reported once it is done: the board members the namespace holds
    # and the fields of its hashes (those the cut-over and the live job write too).
    loaded = re.search(r"; ([\d,]+) entries \(board members and hash fields\) loaded", done.stderr)
    assert loaded is not None, done.stderr[-3000:]
    members = fields = 0
    for key in redis_client.scan_iter(match=f"{namespace}:*", count=1000):
        kind = redis_client.type(key)
        if kind == b"zset":
            members += int(redis_client.zcard(key))
        elif kind == b"hash":
            fields += int(redis_client.hlen(key))
    assert 0 < members < int(loaded.group(1).replace(",", "")) <= members + fields
    verify(stream.records, redis_client, namespace, kafka_bootstrap, topic, "")
    checked = lb(["verify"], env, timeout=240)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_a_load_writes_the_live_keys_and_skips_the_due_ones(
    redis_client: RedisClient, namespace: str
) -> None:
    ks = Keyspace(now_ms=int(time.time() * 1000))
    ks.zset(f"{namespace}:a").update({"p1": 3, "p2": 1, "p3": 2})
    ks.zset(f"{namespace}:b").update({"p1": 5})
    ks.hash(f"{namespace}:h")[b"f"] = b"v"
    ks.sets[f"{namespace}:s"] = {"w1", "w2"}
    for due in ("due-z", "due-h", "due-s"):
        key = f"{namespace}:{due}"
        if due == "due-z":
            ks.zset(key)["p"] = 1
        elif due == "due-h":
            ks.hash(key)[b"f"] = b"1"
        else:
            ks.sets[key] = {"w"}
        ks.expires[key] = ks.now_ms - 1  # due: Redis would have dropped it
    assert load(redis_client, ks) == 5  # 4 members and 1 field
    got = snapshot(redis_client, namespace, bags=False)
    assert got == {
        ":a": ([(b"p2", 1.0), (b"p3", 2.0), (b"p1", 3.0)], -1),
        ":b": ([(b"p1", 5.0)], -1),
        ":h": ({b"f": b"v"}, -1),
        ":s": ([b"w1", b"w2"], -1),
    }


def test_boards_load_the_same_packed_by_lb_native_or_in_python(
    redis_client: RedisClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert replay_memory.PACKER is not None, "lb_native is not built: run scripts/bootstrap.sh"
    rng = random.Random(64)
    scores = [0.0, -0.0, 1.5, -3, 2**53 + 1, 10**18 + 7, 1e300, -1e-300, math.inf, -math.inf]
    boards: dict[str, dict[str, int | float]] = {
        # Several calls per board, ties, ints past 2**53, infinities, non-ASCII members.
        "big": {f"p{i}-é": rng.choice([*scores, rng.uniform(-1e9, 1e9)]) for i in range(12_000)},
        "ints": {f"q{i}": rng.randrange(-(2**62), 2**62) for i in range(7_000)},
        "one": {"solo": 42},
    }
    got = {}
    for engine in ("native", "python"):
        if engine == "python":
            monkeypatch.setattr(replay_memory, "PACKER", None)
        ks = Keyspace(now_ms=int(time.time() * 1000))
        for name, board in boards.items():
            ks.zset(f"{namespace}~{engine}:{name}").update(board)
        heard: list[tuple[int, int]] = []

        def hear(sent: int, total: int, heard: list[tuple[int, int]] = heard) -> None:
            heard.append((sent, total))

        ks.hash(f"{namespace}~{engine}:h").update({b"a": b"1", b"b": b"2"})
        assert load(redis_client, ks, hear) == 19_003
        got[engine] = snapshot(redis_client, f"{namespace}~{engine}", bags=False)
        # Entries sent: the hash's two fields, then every 5,000 members of a board
        # (boards by name: big, ints, one).
        sent = [0, 2, 5_002, 10_002, 12_002, 17_002, 19_002, 19_003]
        assert heard == [(n, 19_003) for n in sent], engine
    assert got["native"] == got["python"]
    assert len(got["native"][":big"][0]) == 12_000


@pytest.mark.parametrize("packer", ["native", "python"])
def test_a_board_redis_would_refuse_fails_the_load_with_its_key(
    redis_client: RedisClient, namespace: str, monkeypatch: pytest.MonkeyPatch, packer: str
) -> None:
    if packer == "python":
        monkeypatch.setattr(replay_memory, "PACKER", None)
    ks = Keyspace(now_ms=int(time.time() * 1000))
    ks.zset(f"{namespace}:bad").update({"p1": 1.0, "p2": math.nan})
    with pytest.raises(ServiceError, match="loading the folded replay into Redis failed"):
        load(redis_client, ks)
