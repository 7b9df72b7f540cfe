"""``lb backfill`` / ``lb rebuild``: replay part of the log beside the live job, then cut over.

The replay uses the streaming job's own code path (the validator, the
planner, the board store and its Lua write) into a staging namespace, so a
staged group is exactly what the live job would have built from the same
records. Then (:mod:`domain.backfill_plan` explains the two modes):

* replace: the replay keeps reading until it is at the live head, and cuts
  each group over atomically with its watermarks set to the last offset read
  (:func:`jobs.cutover.replace_group`); a group the live job has moved past
  is retried after reading further. Groups already cut over are no longer
  replayed. The live job notices the new watermarks and carries on from them.
* fill: after the range, each staged board the live group lacks is moved in
  (:func:`jobs.cutover.fill_group`).

Dead letters are not written (the live job wrote them when it read the
records). The staging namespace is dropped at the start (what a killed run
left) and at the end, also on Ctrl-C or SIGTERM: a group is either cut over
whole or its live keys were never touched.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from adapters.kafka import LogReader, Tail
from adapters.redis import RedisClient, text
from domain.backfill_plan import (
    BackfillPlan,
    Bound,
    Loading,
    Mode,
    loaded_line,
    mode_of,
    resolve_range,
    split_ranges,
    status_line,
)
from domain.erasure import is_erasure
from domain.errors import ConfigError
from domain.keys import GroupKeys, group_tag
from domain.planner import BoardPlanner
from domain.records import Accepted, RecordBatch
from domain.validation import Validator
from jobs import dense_counts
from jobs.cutover import FOREIGN, FillResult, Replaced, fill_group, replace_group, tags
from jobs.namespace_swap import drop_namespace
from jobs.replay import apply_round
from jobs.replay_memory import MEMORY_MEMBERS
from jobs.replay_workers import Part, Tools, replay_part, run_parts
from sinks.boards import RedisBoardStore


def make_plan(
    offsets: LogReader,
    topic: str,
    games: tuple[str, ...],
    start: Bound | None,
    until: Bound | None,
    windows: tuple[str, ...] = (),
) -> BackfillPlan:
    """Resolve the options against the topic's offsets now.

    A range a person cannot have meant is refused (:class:`ConfigError`, one
    line): ``--from`` after ``--until``, a ``--from`` offset past its
    partition's end, a bounded range that holds no record (a ``--from`` time
    after the newest record).
    """
    _check_order(start, until)
    low, high = offsets.bounds()
    mode = mode_of(start, until)
    first = None if start is None else offsets.at(start, high)
    if start is not None and start.at_ms is None:
        _check_within(start.offsets, high)
    ranges = resolve_range(low, high, first, None if until is None else offsets.at(until, high))
    plan = BackfillPlan(topic, games, mode, ranges, follow=mode is Mode.REPLACE, windows=windows)
    if mode is Mode.FILL and plan.records == 0:
        said = " and ".join(
            f"{name} {_bound_text(bound)}"
            for name, bound in (("--from", start), ("--until", until))
            if bound is not None
        )
        held = _spans(low, high)
        raise ConfigError(
            f"{said}: the range holds no record of {topic!r} ("
            + (f"its partitions hold offsets {held}" if held else "the topic is empty")
            + "); a --from time after the newest record replays nothing"
        )
    return plan


def plan_notes(plan: BackfillPlan, start: Bound | None, until: Bound | None) -> list[str]:
    """What a person should know about a plan that is right but surprising (stderr lines)."""
    notes = []
    for name, bound, where in (
        ("--from", start, "from their start"),
        ("--until", until, "to their end"),
    ):
        if bound is None or bound.at_ms is not None:
            continue
        unnamed = [str(p) for p in sorted(plan.ranges) if p not in bound.offsets]
        if unnamed:
            notes.append(f"partition(s) {', '.join(unnamed)} not named in {name}: replayed {where}")
    if until is not None and until.at_ms is None:
        clamped = [
            f"{p} (ends at {plan.ranges[p][1]})"
            for p, offset in sorted(until.offsets.items())
            if p in plan.ranges and offset > plan.ranges[p][1]
        ]
        if clamped:
            notes.append(
                f"--until past a partition's end, replayed to its end: {', '.join(clamped)}"
            )
    return notes


def _check_order(start: Bound | None, until: Bound | None) -> None:
    if start is None or until is None:
        return
    if start.at_ms is not None and until.at_ms is not None and start.at_ms >= until.at_ms:
        raise ConfigError(
            f"--from {_bound_text(start)} is not before --until {_bound_text(until)}: "
            "the range is empty (--from is inclusive, --until exclusive)"
        )
    for p, offset in sorted(start.offsets.items()):
        if p in until.offsets and offset >= until.offsets[p]:
            raise ConfigError(
                f"--from {p}:{offset} is not before --until {p}:{until.offsets[p]}: partition "
                f"{p}'s range is empty (--from is inclusive, --until exclusive)"
            )


def _check_within(named: Mapping[int, int], high: Mapping[int, int]) -> None:
    for p, offset in sorted(named.items()):
        if p in high and offset > high[p]:
            raise ConfigError(
                f"--from {p}:{offset} is past the end of partition {p} (its next offset is "
                f"{high[p]}): nothing to replay there"
            )


def _bound_text(bound: Bound | None) -> str:
    if bound is None:
        return ""
    if bound.at_ms is not None:
        moment = datetime.fromtimestamp(bound.at_ms / 1000, UTC)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return ",".join(f"{p}:{o}" for p, o in sorted(bound.offsets.items()))


def _spans(low: Mapping[int, int], high: Mapping[int, int]) -> str:
    return ", ".join(f"{p}:{low[p]}..{high[p] - 1}" for p in sorted(high) if high[p] > low[p])


@dataclass
class BackfillReport:
    """What a run did (printed as JSON by the commands)."""

    mode: str
    records: int = 0
    groups: list[str] = field(default_factory=list)
    #: Groups cut over under the relaxed rules (after ``strict_for_s``).
    relaxed: list[str] = field(default_factory=list)
    #: Groups whose live job could not notice the cut-over (an idle partition).
    equal_cutovers: list[str] = field(default_factory=list)
    #: Groups left alone: the live group holds records of another topic too.
    other_topic: list[str] = field(default_factory=list)
    filled: dict[str, FillResult] = field(default_factory=dict)
    seconds: float = 0.0
    #: Where the seconds went, phase by phase (:func:`phase_seconds`).
    phases: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "records_replayed": self.records,
            "groups": len(self.groups),
            "seconds": round(self.seconds, 2),
            "phases_s": {name: round(s, 2) for name, s in self.phases.items()},
        }
        if self.relaxed:
            out["cut_over_relaxed"] = self.relaxed
        if self.equal_cutovers:
            out["cut_over_at_equal_watermarks"] = self.equal_cutovers
        if self.other_topic:
            out["left_alone_other_topic"] = self.other_topic
        if self.filled:
            out["boards_moved"] = {t: r.moved for t, r in self.filled.items() if r.moved}
            out["boards_kept_live"] = {t: r.kept for t, r in self.filled.items() if r.kept}
        return out


def phase_seconds(
    mode: Mode, started: float, load_started: float | None, replayed: float, ended: float
) -> dict[str, float]:
    """A run's seconds by phase, consecutive, so that they add up to the whole run.

    ``replay``: reading and folding the planned ranges (and the head, where the
    replay processes followed it); ``load``: the fold going into Redis, from its
    first command to the end of the replay (absent when nothing was folded in
    memory); then the rest: in replace mode ``catch_up_and_cut_over`` (reading on
    from where the replay stopped, and the groups cut over), in fill mode
    ``move_in`` (the missing boards moved into the live groups). The times are
    readings of one monotonic clock.
    """
    out = {"replay": (replayed if load_started is None else load_started) - started}
    if load_started is not None:
        out["load"] = replayed - load_started
    out["move_in" if mode is Mode.FILL else "catch_up_and_cut_over"] = ended - replayed
    return out


class Backfill:
    """One run of a :class:`BackfillPlan` (see the module docstring)."""

    def __init__(
        self,
        client: RedisClient,
        log: LogReader,
        validator: Validator,
        plan: BackfillPlan,
        *,
        live: str,
        staging: str,
        dedupe_horizon_ms: int,
        cache_players: int,
        now_s: Callable[[], float],
        keep_s: int = 86_400,
        strict_for_s: float = 5.0,
        progress: TextIO | None = sys.stderr,
        what: str = "lb backfill",
        workers: int = 1,
        tools: Tools | None = None,
        memory_members: int = MEMORY_MEMBERS,
    ) -> None:
        self._client = client
        self._log = log
        self._log_config = log.config
        self._validator = validator
        self._plan = plan
        self._live = live
        self._staging = staging
        self._store = RedisBoardStore(client, sort_members=True)
        # The staging namespace is dropped first and this run is its only writer.
        self._planner = BoardPlanner(
            staging,
            dedupe_horizon_ms,
            cache_players,
            partitions=plan.partition_counts,
            changes=False,
            fresh=True,
            games=validator.catalog.lookup,
        )
        self._horizon_ms = dedupe_horizon_ms
        self._cache_players = cache_players
        self._workers = workers
        self._tools = tools
        self._memory_members = memory_members
        self._now_s = now_s
        self._keep_s = keep_s
        self._strict_for_s = strict_for_s
        self._out = progress
        self._what = what
        self._done: set[str] = set()
        self._records = 0
        self._total = plan.records
        #: Partition -> the next offset to read: the planned ends until a replay went further.
        self._ends = {p: end for p, (_, end) in plan.ranges.items()}
        self._started = time.monotonic()
        self._last_line = 0.0
        #: The fold going into Redis: entries sent and to send, since when.
        self._loaded = (0, 0)
        self._load_started: float | None = None
        self._load_sent_at = 0.0

    def run(self) -> BackfillReport:
        """Replay, cut over; the staging namespace is dropped whatever happens."""
        report = BackfillReport(mode=str(self._plan.mode))
        drop_namespace(self._client, self._staging)
        try:
            if self._plan.mode is Mode.FILL:
                self._replay_planned(int(self._now_s()) + self._keep_s)
                replayed = time.monotonic()
                for tag in sorted(tags(self._client, self._staging)):
                    report.filled[tag] = fill_group(
                        self._client, self._staging, self._live, tag, self._plan.windows
                    )
                    report.groups.append(tag)
                    self._recount(tag)
            else:
                self._replay_planned(None)
                replayed = time.monotonic()
                self._follow_and_replace(report)
            self._line(force=True)
        finally:
            drop_namespace(self._client, self._staging)
        ended = time.monotonic()
        report.records = self._records
        report.seconds = ended - self._started
        report.phases = phase_seconds(
            self._plan.mode, self._started, self._load_started, replayed, ended
        )
        return report

    # -- replaying ---------------------------------------------------------------------

    def _replay_planned(self, expiry_floor_s: int | None) -> None:
        """The planned ranges, by ``workers`` processes or in this one.

        In fill mode windowed boards expire no earlier than ``expiry_floor_s``
        (a window rebuilt for an audit is usually past its retention, and an
        EXPIREAT in the past would delete it at once).
        """
        parts = [
            Part(
                index,
                ranges,
                self._plan,
                self._staging,
                self._horizon_ms,
                self._cache_players,
                expiry_floor_s,
                self._memory_members,
            )
            for index, ranges in enumerate(split_ranges(self._plan.ranges, self._workers))
        ]
        if len(parts) > 1 and self._tools is not None:
            base = self._records

            def progress(records: int) -> None:
                self._records = base + records
                self._line()

            _, ends = run_parts(parts, self._tools, progress, self._loading)
            self._ends.update(ends)
            self._loaded_line()
            # The processes wrote players this planner never saw: read them from now on.
            self._planner = BoardPlanner(
                self._staging,
                self._horizon_ms,
                self._cache_players,
                partitions=self._plan.partition_counts,
                changes=False,
                games=self._validator.catalog.lookup,
            )
            # And the groups they wrote, which an erasure read from now on reaches.
            self._planner.assume(_watermarks(self._client, self._staging))
            return
        for part in parts:
            replayed = replay_part(
                part,
                self._client,
                self._log,
                self._validator,
                self._count,
                self._planner,
                self._loading,
            )
            self._planner = replayed.planner
            self._ends.update(replayed.ends)
        self._loaded_line()

    def _count(self, records: int) -> None:
        self._records += records
        self._line()

    def _loading(self, sent: int, total: int) -> None:
        now = time.monotonic()
        if self._load_started is None:
            self._load_started = now
        if sent > self._loaded[0]:
            self._load_sent_at = now
        self._loaded = (sent, total)
        self._line()

    def _loaded_line(self) -> None:
        """Once the replay processes are done: what their loads wrote, and how long it took."""
        sent, _ = self._loaded
        if self._out is not None and self._load_started is not None and sent:
            seconds = self._load_sent_at - self._load_started
            print(loaded_line(self._what, self._records, sent, seconds), file=self._out, flush=True)

    def _apply_round(self, batches: list[RecordBatch]) -> None:
        """Batches of distinct partitions: one read and one write round trip."""
        self._records += sum(len(batch.records) for batch in batches)
        self._planner.erasure_reach = self._reach
        apply_round(batches, self._validator, self._planner, self._store, self._keep, self._staging)

    def _keep(self, rec: Accepted) -> bool:
        if is_erasure(rec):
            return True  # it reaches the groups _reach names (the planner's fan-out)
        return self._reach(group_tag(rec))

    def _reach(self, tag: str, partition: int = 0, offset: int = 0) -> bool:
        """Whether this run still replays group ``tag`` (an erasure's reach, too)."""
        return self._plan.wants(tag) and tag not in self._done

    # -- replace: catch up with the live head, cut over group by group -----------------

    def _follow_and_replace(self, report: BackfillReport) -> None:
        """From where the replay stopped, tail the log and cut over group by group.

        One consumer reads on from where the replay stopped (the planned ends, or
        further where its processes followed the head), so a cut-over is
        tried as soon as the replay is at the head, with ``through`` the last
        offset read of each partition (:func:`jobs.cutover.replace_group`).
        A group the live job is as far as or further than is tried again after
        the next records; after ``strict_for_s`` of that, the relaxed rules
        apply (see :mod:`jobs.cutover`).
        """
        tail = Tail(
            self._log_config,
            self._plan.topic,
            {p: (end, end) for p, end in self._ends.items()},
        )
        first_try: float | None = None
        try:
            while True:
                batches = tail.poll()
                self._apply_round(batches)
                self._line(at_head_since=first_try)
                # At the head: every partition at its end, or past the plan with
                # nothing more waiting than one poll took (a stream that never pauses).
                drained = (
                    tail.past(self._plan.ranges)
                    and sum(len(b.records) for b in batches) < Tail.BATCH_MAX
                )
                if not (tail.at_end() or drained):
                    continue
                if first_try is None:
                    first_try = time.monotonic()
                relaxed = time.monotonic() - first_try >= self._strict_for_s
                if self._cut_over(report, tail.through(), relaxed=relaxed):
                    return
        finally:
            tail.close()

    def _cut_over(self, report: BackfillReport, through: dict[int, int], *, relaxed: bool) -> bool:
        """Try every group not yet cut over; True when none is left."""
        wanted = {
            t
            for t in tags(self._client, self._staging) | tags(self._client, self._live)
            if self._plan.wants(t)
        } - self._done
        for tag in sorted(wanted):
            answer = replace_group(
                self._client,
                self._staging,
                self._live,
                tag,
                self._plan.topic,
                through,
                relaxed=relaxed,
            )
            if answer == FOREIGN:
                # Replacing it would drop another topic's effects: left alone, reported.
                self._done.add(tag)
                report.other_topic.append(tag)
            elif isinstance(answer, Replaced):
                self._done.add(tag)
                report.groups.append(tag)
                self._recount(tag)
                if relaxed and not answer.unnoticed:
                    report.relaxed.append(tag)  # behind the live job, which heals it
                if answer.unnoticed:
                    report.equal_cutovers.append(tag)
        return not wanted - self._done

    def _recount(self, tag: str) -> None:
        """A shard of a sharded dense game changed without queued changes: recount its game."""
        game, _, shard = tag.rpartition("/")
        config = self._validator.catalog.lookup(game) if shard else None
        if config is not None and config.dense_ranks and config.shards > 1:
            dense_counts.recount(self._client, self._live, game, config.shards)

    def _line(self, force: bool = False, at_head_since: float | None = None) -> None:
        now = time.monotonic()
        if self._out is None or (not force and now - self._last_line < 1.0):
            return
        self._last_line = now
        sent, total = self._loaded
        loading = (
            None if self._load_started is None else Loading(sent, total, now - self._load_started)
        )
        line = status_line(
            self._what,
            self._records,
            self._total,
            now - self._started,
            loading,
            None if at_head_since is None else now - at_head_since,
            self._strict_for_s,
        )
        print(line, file=self._out, flush=True)


def _watermarks(client: RedisClient, namespace: str) -> dict[tuple[str, str], int]:
    """Every group's watermarks in ``namespace``, per (``meta:wm`` key, field)."""
    out: dict[tuple[str, str], int] = {}
    for tag in tags(client, namespace):
        key = GroupKeys(namespace, tag).watermarks
        for name, value in client.hgetall(key).items():
            out[(key, text(name))] = int(value)
    return out
