"""The board sink's write path for a replay: one batch, into a namespace only the replay writes.

``lb verify`` (a scratch namespace) and ``lb backfill``/``lb rebuild`` (a
staging namespace) replay the log with the streaming job's own validator,
planner and Lua write, so what they build is what the job would have built.
"""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import ServiceError
from domain.planner import BoardPlanner, WritePlan
from domain.records import Accepted, CheckedBatch, RecordBatch
from domain.validation import Validator
from sinks.redis_boards import RedisBoardStore, refused_at


def apply_replayed(
    batch: RecordBatch,
    validator: Validator,
    planner: BoardPlanner,
    store: RedisBoardStore,
    keep: Callable[[Accepted], bool],
    namespace: str,
    adjust: Callable[[WritePlan], None] | None = None,
) -> None:
    """Validate, keep what ``keep`` wants, plan, (``adjust``,) write and commit.

    Dead letters are dropped: the live job wrote them when it read the records.
    Nobody else writes ``namespace``, so a refused write is a bug or a second
    replay into the same namespace, never a reason to heal.
    """
    checked = validator.check_batch(batch)
    accepted = tuple(rec for rec in checked.accepted if keep(rec))
    if not accepted:
        return
    checked = CheckedBatch(batch.topic, batch.partition, accepted, (), checked.last_offset)
    lookups = planner.lookups(checked)
    results = store.read(lookups)
    planner.remember_registries(lookups, results)
    plan = planner.plan(checked, results, lookups)
    if adjust is not None:
        adjust(plan)
    if any(refused_at(answer) is not None for answer in store.apply(plan)):
        raise ServiceError(f"another writer changed the namespace {namespace!r}")
    planner.commit(plan)
