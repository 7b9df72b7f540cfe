"""The board sink's write path for a replay: one batch, into a namespace only the replay writes.

``lb verify`` (a scratch namespace) and ``lb backfill``/``lb rebuild`` (a
staging namespace) replay the log with the streaming job's own validator,
planner and Lua write, so what they build is what the job would have built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from config.heap import collector_paused
from domain.errors import ServiceError
from domain.planner import BoardPlanner, LookupResults, Lookups, PlanRound, WritePlan
from domain.records import Accepted, CheckedBatch, RecordBatch
from domain.validation import Validator
from sinks.boards import refused_at


class ReplayStore(Protocol):
    """What a replay reads and writes through: the Redis board store, or a fold in memory."""

    def read_many(self, many: Sequence[Lookups]) -> list[LookupResults]: ...

    def apply_many(self, plans: Sequence[WritePlan]) -> list[int]: ...


def apply_replayed(
    batch: RecordBatch,
    validator: Validator,
    planner: BoardPlanner,
    store: ReplayStore,
    keep: Callable[[Accepted], bool] | None,
    namespace: str,
    adjust: Callable[[WritePlan], None] | None = None,
) -> None:
    """One batch: see :func:`apply_round`."""
    apply_round([batch], validator, planner, store, keep, namespace, adjust)


@collector_paused()  # config/heap.py: a round's objects live until it is written
def apply_round(
    batches: Sequence[RecordBatch],
    validator: Validator,
    planner: BoardPlanner,
    store: ReplayStore,
    keep: Callable[[Accepted], bool] | None,
    namespace: str,
    adjust: Callable[[WritePlan], None] | None = None,
) -> None:
    """Validate, keep what ``keep`` wants (None: all), plan, (``adjust``,) write and commit.

    ``batches`` are of distinct partitions (distinct players and watermark
    fields), so, as in the board sink, they share one read and one write
    round trip. Dead letters are dropped: the live job wrote them when it read
    the records; so are the live pushes (the change stream): nobody subscribes
    to a replay. Nobody else writes ``namespace``, so a refused write is a bug
    or a second replay into the same namespace, never a reason to heal.
    """
    checked: list[CheckedBatch] = []
    for batch in batches:
        valid = validator.check_batch(batch)
        accepted = (
            valid.accepted if keep is None else tuple(rec for rec in valid.accepted if keep(rec))
        )
        if accepted:
            checked.append(
                CheckedBatch(batch.topic, batch.partition, accepted, (), valid.last_offset)
            )
    if not checked:
        return
    round_ = PlanRound(planner, checked)
    plans = round_.plan(store.read_many(round_.lookups))
    for plan in plans:
        for write in plan.groups:
            # Nobody reads a replay's change stream: spare Redis the JSON per change.
            write.changes = []
        if adjust is not None:
            adjust(plan)
    if any(refused_at(answer) is not None for answer in store.apply_many(plans)):
        raise ServiceError(f"another writer changed the namespace {namespace!r}")
    round_.commit()
