"""One worker's board writes: rounds of batches, one round trip each, writes in flight.

Delivery guarantee: **exactly-once effects** on top of at-least-once input.
Each board group's share of a batch is applied by atomic Lua calls that first
compare the group's stored watermark for the source partition with the last
offset they cover and do nothing if it was already applied; otherwise they
write the members, expiries, seen event ids, tournament counts, counters and
the new watermark at once (``apply_group.lua``). A replay after a crash
therefore changes nothing twice. The planner decides every member and value;
this module only schedules the rounds, and :mod:`sinks.boards.healing` keeps
what the worker knows of Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from bytewax.outputs import StatelessSinkPartition

from config.heap import collector_paused
from domain.errors import Deposed, RetryBudgetExceeded
from domain.keys import watermark_field
from domain.planner import BoardPlanner, PlanRound, WritePlan
from domain.planner.rounds import split_round
from domain.records import CheckedBatch
from domain.rewinds import Rewinds
from sinks import outcomes
from sinks.boards.encoding import refused_at
from sinks.boards.healing import Healer
from sinks.boards.store import RedisBoardStore
from sinks.retry import give_up, step_down
from telemetry import hooks

_clock = time.perf_counter


class BoardPartition(StatelessSinkPartition[CheckedBatch]):
    """The board writes of the partitions one worker reads (one owner per player)."""

    def __init__(
        self,
        store: RedisBoardStore,
        planner: BoardPlanner,
        namespace: str,
        rewinds: Rewinds,
        check_every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._planner = planner
        self._healer = Healer(store, planner, namespace, rewinds, check_every_s, clock)
        #: The batches whose writes were sent and not answered yet, with their plans.
        self._inflight: list[tuple[CheckedBatch, WritePlan]] = []

    def write_batch(self, items: Sequence[CheckedBatch]) -> None:
        """Project every batch (see :meth:`_write`); an outage past its budget ends the job."""
        try:
            with collector_paused():  # config/heap.py: a batch lives until it is written
                self._write(items)
        except RetryBudgetExceeded as exc:
            give_up(exc)
        except Deposed as exc:
            step_down(exc)

    def _write(self, items: Sequence[CheckedBatch]) -> None:
        """Project every batch; the last round's writes are still in flight on return.

        A round (:func:`~domain.planner.rounds.split_round`) shares one round
        trip: it takes the answers to the previous round's writes and reads
        what this round needs, then this round's writes leave without waiting
        (:meth:`RedisBoardStore.send_writes`), so Redis applies them while the
        worker validates and plans what comes next.

        Bytewax may therefore snapshot a source offset past writes not yet
        acknowledged. That is safe because a restart never trusts the snapshot
        alone: it resumes from ``@ + 1`` of the progress hash at the latest
        (:func:`domain.healing.resume_offset`), and ``@`` only ever covers
        acknowledged batches; re-applying what did land is a no-op.
        """
        healer = self._healer
        if not all(healer.knows(batch) for batch in items):
            # Seeding reads on its own round trip: settle what is in flight first.
            self._settle(self._store.drain())
            for batch in items:
                if not healer.knows(batch):
                    healer.seed(batch)
        pending = [batch for batch in items if healer.current(batch)]
        while pending:
            now, later = split_round(pending)
            healer.see(now)
            audit_pairs = healer.audit_due()
            round_ = PlanRound(self._planner, now)
            started = _clock()
            results, stored, settled = self._store.exchange(
                round_.lookups, healer.take_progress(), audit_pairs
            )
            hooks.stage("redis_read", _clock() - started)
            if self._settle(settled) or healer.audit(audit_pairs, stored):
                pending = [batch for batch in pending if healer.current(batch)]
                continue  # the reads may predate the healing: plan the round again
            started = _clock()
            plans = round_.plan(results)
            hooks.stage("plan", _clock() - started)
            # The next round's plans build on these values before Redis has
            # answered: it applies them before anything sent later, and a refusal
            # heals, which forgets every cached value.
            round_.commit()
            self._inflight = list(zip(now, plans, strict=True))
            started = _clock()
            sent = self._store.send_writes(plans)
            hooks.stage("redis_write", _clock() - started)
            if self._settle(sent):
                pending = [batch for batch in later if healer.current(batch)]
                continue
            pending = later

    def _settle(self, answers: list[int] | None) -> bool:
        """Take the answers to the writes sent last; True when the round must be planned again.

        That is when Redis refused some (healed) or already had some (superseded).
        An applied batch is acknowledged (its offset may enter the progress
        hash); a refused one means Redis lost writes (:mod:`sinks.boards.healing`).
        ``None`` means nothing was in flight or the answers are still to come.
        """
        if answers is None:
            return False
        inflight, self._inflight = self._inflight, []
        replies = iter(answers)
        refused: dict[tuple[str, str], int] = {}
        restart: dict[str, int] = {}
        superseded = False
        for batch, plan in inflight:
            lost = False
            for write in plan.groups:
                answer = next(replies)
                if refused_at(answer) is not None:
                    lost = True
                    # The first refused piece of a group says what its plan expected.
                    refused.setdefault((write.keys.watermarks, write.watermark[0]), write.expected)
                superseded = superseded or answer == 0
            if lost:
                restart[watermark_field(batch.topic, batch.partition)] = batch.first_offset
            else:
                self._healer.acknowledge(batch)
                outcomes.add_applied(batch, plan)
        if refused:
            self._healer.heal_refused(refused, restart)
            return True
        if superseded:
            # Redis already had a batch: a retried write, or a backfill cut the
            # group over (jobs/cutover.py). Its values may not be this plan's:
            # forget the cache and plan the round again from what Redis holds.
            self._planner.forget({})
            return True
        return False

    def close(self) -> None:
        """Settle the writes in flight and leave the progress hashes current for the next start."""
        try:
            self._settle(self._store.drain())
        except Deposed as exc:
            step_down(exc)
        self._store.write_progress(self._healer.take_progress())
