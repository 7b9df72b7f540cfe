"""What one worker knows Redis holds, and how it heals when Redis lost writes.

Per partition the worker keeps the last offset Redis acknowledged and the
generation its batches must carry; per group the planner keeps the watermark
it believes Redis holds. When Redis refuses a write (its watermark is not what
the plan was based on) or the periodic audit finds a watermark below what this
worker wrote, Redis lost acknowledged writes: the worker forgets what it
cached, asks the source to re-read each damaged partition from the first lost
offset, and drops that partition's batches until the re-read ones arrive
(:mod:`domain.healing` decides where from). The progress hashes it writes let
the next start check the same (:mod:`sinks.boards.resume`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from domain.healing import MISSING, Divergence, audit, progress_fields, resume_offset
from domain.keys import GroupKeys, progress_key, tag_of, watermark_field
from domain.planner import BoardPlanner
from domain.records import CheckedBatch
from domain.rewinds import Rewinds
from sinks.boards.resume import BoardReads, read_resume_state

log = logging.getLogger(__name__)


class Healer:
    """The partitions one worker writes: acknowledged offsets, generations, audits, rewinds."""

    def __init__(
        self,
        store: BoardReads,
        planner: BoardPlanner,
        namespace: str,
        rewinds: Rewinds,
        check_every_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._planner = planner
        self._namespace = namespace
        self._rewinds = rewinds
        self._check_every_s = check_every_s
        self._clock = clock
        self._next_check = clock() + check_every_s
        #: Per (topic, partition): the generation batches must carry (see Rewinds).
        self._generation: dict[tuple[str, int], int] = {}
        #: Watermark field -> (topic, partition), for the partitions seen.
        self.partition_of: dict[str, tuple[str, int]] = {}
        #: Per (topic, partition): the last offset whose batch was acknowledged,
        #: and the partitions whose progress hash is behind.
        self.acked: dict[tuple[str, int], int] = {}
        self._dirty: set[tuple[str, int]] = set()

    def knows(self, batch: CheckedBatch) -> bool:
        """Whether the batch's partition was seen (seeded) already."""
        return (batch.topic, batch.partition) in self.acked

    def see(self, batches: Sequence[CheckedBatch]) -> None:
        """Remember which partition each batch's watermark field names."""
        for batch in batches:
            where = (batch.topic, batch.partition)
            self.partition_of[watermark_field(*where)] = where

    def audit(self, pairs: list[tuple[str, str]], stored: list[int | None]) -> bool:
        """Compare the audited watermarks with the beliefs; True when it healed."""
        if not pairs:
            return False
        beliefs = self._planner.beliefs()
        found = audit(
            {pair: beliefs[pair] for pair in pairs}, dict(zip(pairs, stored, strict=True))
        )
        if found:
            self.heal(found, {})
            return True
        return False

    def seed(self, batch: CheckedBatch) -> None:
        """First sight of a partition: check what the previous run left in Redis.

        The progress hash names every group the previous run had written and
        the watermark it had acknowledged there; what Redis holds now becomes
        this run's belief, so the audit covers those groups before this run
        writes to them. Redis may have lost writes since the reader chose where
        to start (:class:`ResumeFromRedis`): the same rule
        (:func:`~domain.healing.resume_offset`) is applied again at the
        partition's current position, and a lower answer rewinds the reader.
        """
        where = (batch.topic, batch.partition)
        wm_field = watermark_field(*where)
        self.partition_of[wm_field] = where
        position = batch.first_offset if batch.first_offset >= 0 else batch.last_offset + 1
        progress, stored = read_resume_state(self._store, self._namespace, *where)
        self._planner.assume(
            {
                (GroupKeys(self._namespace, tag).watermarks, wm_field): MISSING
                if value is None
                else value
                for tag, value in stored.items()
            }
        )
        start = resume_offset(position, progress, stored)
        assert start is not None
        self.acked[where] = start - 1
        if start < position:
            found = Divergence(rewind_to={wm_field: start})
            self.heal(found, {}, f"its progress in Redis ends before offset {position}")

    def current(self, batch: CheckedBatch) -> bool:
        """False for a batch read before its partition's latest rewind (dropped)."""
        return batch.generation >= self._generation.get((batch.topic, batch.partition), 0)

    def audit_due(self) -> list[tuple[str, str]]:
        """Every believed watermark, once every ``check_every_s`` (else nothing)."""
        now = self._clock()
        if now < self._next_check:
            return []
        self._next_check = now + self._check_every_s
        return list(self._planner.beliefs())

    def heal_refused(self, refused: dict[tuple[str, str], int], restart: dict[str, int]) -> None:
        """A write was refused: audit every belief (and the refused pairs) against Redis."""
        believed = self._planner.beliefs()
        for pair, expected in refused.items():
            believed.setdefault(pair, expected)
        pairs = list(believed)
        stored = self._store.read_watermarks(pairs)
        self.heal(audit(believed, dict(zip(pairs, stored, strict=True))), restart)

    def heal(
        self, found: Divergence, restart: dict[str, int], why: str = "a write was refused"
    ) -> None:
        """Forget the caches and rewind every damaged partition (see the module docstring)."""
        self._planner.forget(found.corrected)
        rewind = dict(found.rewind_to)
        for wm_field, offset in restart.items():
            rewind[wm_field] = min(rewind.get(wm_field, offset), offset)
        for _, wm_field in found.corrected:
            where = self.partition_of.get(wm_field)
            if where is not None:
                self._dirty.add(where)
        for wm_field, offset in sorted(rewind.items()):
            where = self.partition_of.get(wm_field)
            if where is None:  # a partition this worker no longer reads
                continue
            topic, partition = where
            # Never past what this worker has not applied yet (a re-read already
            # under way, batches in flight): they are dropped with the generation.
            offset = min(offset, self.acked.get(where, offset - 1) + 1)
            self._generation[where] = self._rewinds.request(topic, partition, offset)
            self.acked[where] = min(self.acked.get(where, offset - 1), offset - 1)
            self._dirty.add(where)
            log.warning(
                "Redis holds less of %s[%d] than this worker wrote (%s): re-reading it from "
                "offset %d (healing writes Redis lost after a restart, failover or flush; "
                "after an lb rebuild/backfill cut-over, catching up behind it)",
                topic,
                partition,
                ", ".join(
                    f"{tag_of(k)} has {v}" for (k, f), v in found.corrected.items() if f == wm_field
                )
                or why,
                offset,
            )

    def acknowledge(self, batch: CheckedBatch) -> None:
        """Redis applied ``batch``: its partition's progress may cover it."""
        where = (batch.topic, batch.partition)
        self.acked[where] = max(self.acked.get(where, -1), batch.last_offset)
        self._dirty.add(where)

    def take_progress(self) -> list[tuple[str, dict[str, int]]]:
        """The progress hashes to write: ``@`` and *every* group's believed watermark.

        Every group, not only those written since the last time: Redis may
        have lost the hash's older fields along with a group's writes before
        anyone noticed, and ``@`` must never stand in a hash that no longer
        names a group it depends on.
        """
        if not self._dirty:
            return []
        fields = {where: watermark_field(*where) for where in self._dirty}
        copies: dict[str, dict[str, int]] = {name: {} for name in fields.values()}
        for (wm_key, wm_field), value in self._planner.beliefs().items():
            if wm_field in copies:
                copies[wm_field][tag_of(wm_key)] = value
        out = [
            (
                progress_key(self._namespace, *where),
                progress_fields(self.acked.get(where, -1), copies[name]),
            )
            for where, name in fields.items()
        ]
        self._dirty = set()
        return out
