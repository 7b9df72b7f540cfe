"""Healing after Redis lost acknowledged writes: the pure rules, then the board sink.

The sink test runs the real ``_BoardPartition`` (planner, audits, rewinds,
progress hashes) against :class:`tests.unit.boardmodel.BoardModel` standing in
for Redis, fed by a small simulated source that honours rewinds and keeps
batches in flight. At random moments "Redis" loses writes: everything rolls
back to an earlier instant (a restart from an older RDB/AOF), one group rolls
back alone (a cluster master failed over to a replica that lacked its last
writes), or everything is flushed. Sometimes the job crashes too and restarts
from its last committed snapshot through :func:`domain.healing.resume_offset`.
At the end every board, registry, watermark and counter must equal the
oracle of ``test_planner``: nothing lost, nothing applied twice.
"""

from __future__ import annotations

import copy
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.healing import PROGRESS_FIELD, audit, resume_offset
from domain.planner import BoardPlanner, LookupResults, Lookups, WritePlan
from domain.records import CheckedBatch
from domain.rewinds import Rewinds
from sinks.boards import BoardPartition as _BoardPartition
from sinks.boards import read_resume_state
from tests.unit.boardmodel import BoardModel
from tests.unit.test_planner import (
    HORIZON_MS,
    NS,
    PARTITIONS,
    PROPERTY,
    TOPIC,
    Scenario,
    assert_matches_oracle,
    oracle,
    scenarios,
)

#: What Redis holds (the model's write logs are not state).
STATE = ("zsets", "hashes", "sets", "expire_at", "ttl")

WM = f"{NS}:{{g}}:meta:wm"
WM2 = f"{NS}:{{h}}:meta:wm"


# --- the rules -----------------------------------------------------------------------------


def test_audit_rewinds_each_partition_to_its_first_lost_offset() -> None:
    believed = {(WM, "t/0"): 40, (WM2, "t/0"): 30, (WM, "t/1"): 7, (WM2, "t/1"): 9}
    stored = {(WM, "t/0"): 12, (WM2, "t/0"): 25, (WM, "t/1"): 7, (WM2, "t/1"): 9}
    found = audit(believed, stored)
    assert found.rewind_to == {"t/0": 13}
    assert found.corrected == {(WM, "t/0"): 12, (WM2, "t/0"): 25}


def test_audit_a_flushed_group_rereads_from_the_start_and_a_newer_one_rereads_nothing() -> None:
    found = audit({(WM, "t/0"): 40, (WM2, "t/1"): 5}, {(WM, "t/0"): None, (WM2, "t/1"): 9})
    assert found.rewind_to == {"t/0": 0}
    assert found.corrected == {(WM, "t/0"): -1, (WM2, "t/1"): 9}


def test_audit_of_matching_watermarks_finds_nothing() -> None:
    assert not audit({(WM, "t/0"): 4}, {(WM, "t/0"): 4})


@pytest.mark.parametrize(
    ("snapshot", "progress", "stored", "start"),
    [
        (None, {PROGRESS_FIELD: 90, "g": 90}, {"g": 90}, None),  # no snapshot: from the start
        (100, {PROGRESS_FIELD: 120, "g": 118}, {"g": 118}, 100),  # Redis ahead: the snapshot
        (100, {PROGRESS_FIELD: 60, "g": 60}, {"g": 60}, 61),  # rolled back as a whole
        (100, {PROGRESS_FIELD: 120, "g": 118, "h": 99}, {"g": 50, "h": 99}, 51),  # one group lost
        (100, {}, {}, 0),  # flushed, or a namespace the job never wrote
        (100, {PROGRESS_FIELD: 120, "g": 118}, {"g": None}, 0),  # a group flushed alone
    ],
)
def test_resume_offset(
    snapshot: int | None, progress: dict[str, int], stored: dict[str, int | None], start: int
) -> None:
    assert resume_offset(snapshot, progress, stored) == start


def test_rewinds_merge_into_the_lowest_offset_and_start_one_generation() -> None:
    rewinds = Rewinds()
    assert rewinds.take("t", 0) is None
    assert rewinds.request("t", 0, 50) == 1
    assert rewinds.request("t", 0, 20) == 1
    assert rewinds.request("t", 1, 5) == 1
    assert rewinds.take("t", 0) == (20, 1)
    assert rewinds.take("t", 0) is None
    assert rewinds.request("t", 0, 70) == 2
    assert rewinds.take("t", 0) == (70, 2)
    assert rewinds.take("t", 1) == (5, 1)


# --- the board sink against a losing Redis ------------------------------------------------


class ModelStore:
    """``RedisBoardStore``'s interface over the in-memory model (no client, no mock).

    Writes sent with :meth:`send_writes` stay in flight, as on a standalone
    Redis, until the next :meth:`exchange` or :meth:`drain` applies them and
    answers; a crash decides whether Redis had received them (:meth:`crash`).
    """

    def __init__(self, model: BoardModel) -> None:
        self.model = model
        self.inflight: list[WritePlan] | None = None

    def send_writes(self, plans: list[WritePlan]) -> list[int] | None:
        assert self.inflight is None
        self.inflight = list(plans)
        return None

    def exchange(
        self,
        many: list[Lookups],
        progress: list[tuple[str, dict[str, int]]] = [],  # noqa: B006
        audit: list[tuple[str, str]] = [],  # noqa: B006
    ) -> tuple[list[LookupResults], list[int | None], list[int] | None]:
        written = self.drain()
        for key, fields in progress:
            self.model.hashes.setdefault(key, {}).update(fields)
        results = [self.model.read(lookups) for lookups in many]
        return results, self.read_watermarks(audit), written

    def drain(self) -> list[int] | None:
        plans, self.inflight = self.inflight, None
        return None if plans is None else self.apply_many(plans)

    def crash(self, delivered: bool) -> None:
        """The process died with writes in flight: Redis had them, or never saw them."""
        if delivered:
            self.drain()
        self.inflight = None

    def read_many_and_audit(
        self,
        many: list[Lookups],
        progress: list[tuple[str, dict[str, int]]] = [],  # noqa: B006
        audit: list[tuple[str, str]] = [],  # noqa: B006
    ) -> tuple[list[LookupResults], list[int | None]]:
        assert self.inflight is None, "writes in flight would be lost"
        results, stored, _ = self.exchange(many, progress, audit)
        return results, stored

    def read_watermarks(self, pairs: list[tuple[str, str]]) -> list[int | None]:
        return [self.model.hashes.get(key, {}).get(name) for key, name in pairs]

    def read_progress(self, key: str) -> dict[str, int]:
        return dict(self.model.hashes.get(key, {}))

    def apply_many(self, plans: list[WritePlan]) -> list[int]:
        return [answer for plan in plans for answer in self.model.apply(plan)]

    def write_progress(self, progress: list[tuple[str, dict[str, int]]]) -> None:
        self.read_many_and_audit([], progress)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Reader:
    """One partition of the simulated source: a position, a generation, a snapshot."""

    recs: list[Any]
    at: int = 0
    generation: int = 0
    committed: int = 0  # Bytewax's durable snapshot: an index whose batches were all applied

    def position(self) -> int:
        """The next offset this reader will read."""
        if self.at < len(self.recs):
            return int(self.recs[self.at].offset)
        return int(self.recs[-1].offset) + 1 if self.recs else 0

    def seek(self, offset: int) -> None:
        self.at = next((i for i, r in enumerate(self.recs) if r.offset >= offset), len(self.recs))


@dataclass
class World:
    scn: Scenario
    rnd: random.Random
    model: BoardModel = field(default_factory=BoardModel)
    history: list[dict[str, Any]] = field(default_factory=list)
    losses: int = 0

    def remember(self) -> None:
        self.history.append({name: copy.deepcopy(getattr(self.model, name)) for name in STATE})

    def lose_writes(self) -> None:
        """Roll back everything, one group, or flush, at random."""
        self.losses += 1
        kind = self.rnd.random()
        if kind < 0.15 or not self.history:
            self._restore({})
            return
        before = self.rnd.choice(self.history)
        if kind < 0.6:
            self._restore(before)
            return
        tags = sorted({key.split("{", 1)[1].split("}", 1)[0] for key in self.model.hashes})
        tags = [t for t in tags if not t.startswith("@")]
        if not tags:
            return
        tag = self.rnd.choice(tags)
        marker = "{" + tag + "}"
        for name in STATE:
            live: dict[str, Any] = getattr(self.model, name)
            old: dict[str, Any] = before.get(name, {})
            for key in [k for k in live if marker in k]:
                del live[key]
            live.update(copy.deepcopy({k: v for k, v in old.items() if marker in k}))

    def _restore(self, state: dict[str, Any]) -> None:
        for name in STATE:
            setattr(self.model, name, copy.deepcopy(state.get(name, {})))


def _sink(world: World, rewinds: Rewinds, clock: Clock) -> _BoardPartition:
    planner = BoardPlanner(
        NS, HORIZON_MS, world.rnd.choice((1, 3, 1_000_000)), partitions={TOPIC: len(PARTITIONS)}
    )
    return _BoardPartition(ModelStore(world.model), planner, NS, rewinds, 1.0, clock)


def _resume(world: World, partition: int, snapshot: int) -> int:
    """What ``ResumeFromRedis`` computes, from the model's progress hash."""
    progress, stored = read_resume_state(ModelStore(world.model), NS, TOPIC, partition)
    start = resume_offset(snapshot, progress, stored)
    assert start is not None
    return start


def _ticks(readers: dict[int, Reader]) -> list[CheckedBatch]:
    """The empty batches an idle source emits so the sink still audits (with its position)."""
    return [
        CheckedBatch(TOPIC, p, (), (), r.position() - 1, r.generation) for p, r in readers.items()
    ]


def _take_rewinds(
    rewinds: Rewinds, readers: dict[int, Reader], flight: deque[CheckedBatch]
) -> bool:
    """The source's side of a rewind: seek, new generation; True when one was pending."""
    any_taken = False
    for p, reader in readers.items():
        taken = rewinds.take(TOPIC, p)
        if taken is not None:
            any_taken = True
            reader.seek(taken[0])
            reader.generation = taken[1]
    return any_taken


def simulate(scn: Scenario, rnd: random.Random, losses: int, crashes: int) -> World:
    world = World(scn, rnd)
    clock = Clock()
    rewinds = Rewinds()
    sink = _sink(world, rewinds, clock)
    readers = {p: Reader(list(recs)) for p, recs in scn.records.items()}
    flight: deque[CheckedBatch] = deque()  # read, not yet at the sink
    loss_left, crash_left = losses, crashes
    for _ in range(10_000):
        idle = all(r.at >= len(r.recs) for r in readers.values()) and not flight
        if idle and loss_left == 0 and crash_left == 0:
            # Quiet now: one more audit must find nothing left to heal.
            clock.now += 2.0
            sink.write_batch(_ticks(readers))
            if not _take_rewinds(rewinds, readers, flight):
                break
            continue
        roll = rnd.random()
        if roll < 0.04 and loss_left:
            loss_left -= 1
            world.lose_writes()
        elif roll < 0.06 and crash_left:
            crash_left -= 1
            flight.clear()
            sink._store.crash(delivered=rnd.random() < 0.5)
            rewinds = Rewinds()
            sink = _sink(world, rewinds, clock)
            for p, reader in readers.items():
                snapshot = Reader(reader.recs, reader.committed).position()
                reader.seek(_resume(world, p, snapshot))
                reader.generation = 0
        elif roll < 0.5:
            # The source: honour a rewind, then read a batch of one partition.
            p = rnd.choice(sorted(readers))
            reader = readers[p]
            _take_rewinds(rewinds, {p: reader}, flight)
            if reader.at < len(reader.recs):
                part = reader.recs[reader.at : reader.at + rnd.choice((1, 2, 3, 5))]
                reader.at += len(part)
                flight.append(
                    CheckedBatch(
                        TOPIC,
                        p,
                        tuple(scn.accepted(r) for r in part),
                        (),
                        part[-1].offset,
                        reader.generation,
                    )
                )
        elif flight:
            # The sink: one or more batches in flight arrive together.
            items = [flight.popleft() for _ in range(min(len(flight), rnd.choice((1, 1, 2, 4))))]
            clock.now += rnd.choice((0.0, 0.3, 1.5))
            sink.write_batch(items)
            world.remember()
            for p, reader in readers.items():
                if not any(b.partition == p for b in flight) and rnd.random() < 0.5:
                    reader.committed = reader.at  # an epoch closed: Bytewax's snapshot
        else:
            clock.now += 1.5  # idle: the source's tick still reaches the sink
            sink.write_batch(_ticks(readers))
    else:
        raise AssertionError("the simulation did not settle")
    sink.close()
    return world


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[*PROPERTY.suppress_health_check, HealthCheck.large_base_example],
)
@given(
    scn=scenarios(),
    rnd=st.randoms(use_true_random=False),
    losses=st.integers(1, 3),
    crashes=st.integers(0, 2),
)
def test_boards_equal_the_oracle_after_redis_loses_writes(
    scn: Scenario, rnd: random.Random, losses: int, crashes: int
) -> None:
    world = simulate(scn, rnd, losses, crashes)
    model = world.model
    for key in [k for k in model.hashes if k.endswith(":meta:progress")]:
        del model.hashes[key]  # bookkeeping of the healing itself, not in the oracle
    assert_matches_oracle(model, scn, oracle(scn))
