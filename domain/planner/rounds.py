"""One round of planning: the sequence every caller of the planner follows.

A round is at most one batch per partition: batches of different partitions
touch disjoint players and watermark fields, so their reads share one round
trip and their plans do not depend on each other, while a second batch of a
partition must see the first one's values and waits for the next round.

The caller owns the I/O::

    round_ = PlanRound(planner, batches)
    results = store.read_many(round_.lookups)     # one round trip
    plans = round_.plan(results)
    round_.commit()                               # before or after the write
    store.apply_many(plans)

Committing before Redis answered is what the live sink does to keep Redis
busy while it plans the next round: Redis applies the writes in order, and a
refused one heals, which forgets every cached value.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.planner.board_planner import BoardPlanner
from domain.planner.model import LookupResults, Lookups, WritePlan
from domain.records import CheckedBatch


def split_round(
    batches: Sequence[CheckedBatch],
) -> tuple[list[CheckedBatch], list[CheckedBatch]]:
    """The first batch of each partition (this round) and the rest (later rounds)."""
    now: list[CheckedBatch] = []
    later: list[CheckedBatch] = []
    partitions: set[tuple[str, int]] = set()
    for batch in batches:
        where = (batch.topic, batch.partition)
        (later if where in partitions else now).append(batch)
        partitions.add(where)
    return now, later


class PlanRound:
    """The lookups, plans and commit of one round of batches (at most one per partition)."""

    def __init__(self, planner: BoardPlanner, batches: Sequence[CheckedBatch]) -> None:
        self.planner = planner
        self.batches = list(batches)
        #: What to read, one :class:`Lookups` per batch.
        self.lookups: list[Lookups] = [planner.lookups(batch) for batch in self.batches]
        self.plans: list[WritePlan] = []

    def plan(self, results: Sequence[LookupResults]) -> list[WritePlan]:
        """The batches' write plans from the answers to :attr:`lookups`."""
        planner = self.planner
        self.plans = []
        for batch, need, got in zip(self.batches, self.lookups, results, strict=True):
            planner.remember_registries(need, got)
            self.plans.append(planner.plan(batch, got, need))
        return self.plans

    def commit(self) -> None:
        """Take the plans into the planner's caches (see the module docstring for when)."""
        for plan in self.plans:
            self.planner.commit(plan)
