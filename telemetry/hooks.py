"""The few calls the job's hot path makes into telemetry, each once per batch (or rarer).

Call sites stay one line each (the source registers its partitions, the board
sink reports an acknowledged batch through :mod:`sinks.outcomes`, the retry
helper and the Kafka error log report failures) so the job's modules keep
their shape. State kept here is small and process-wide; the collector in
:mod:`telemetry.metrics` reads it at scrape time.

With metrics off (``LB_METRICS_PORT=off``, or a process that never called
:func:`enable`), every hook returns at its first line: that is the "off" side
of the overhead measurement in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

from telemetry import derive, metrics

T = TypeVar("T")
_RECORD_TS = attrgetter("record_ts_ms")
R = TypeVar("R")

#: A retry loop longer than this makes the process not ready (``LB_READY_RETRY_S``).
_ready_threshold_s = 30.0
#: A Kafka error run is over after this quiet spell.
KAFKA_QUIET_S = 15.0


class _State:
    def __init__(self) -> None:
        self.enabled = False
        self.lock = threading.Lock()
        self.partitions: dict[tuple[str, int], tuple[Any, Callable[[], int]]] = {}
        self.last_ts: dict[tuple[str, int], int] = {}
        self.freshness = derive.WeightedBuckets()
        self.planners: weakref.WeakSet[Any] = weakref.WeakSet()
        self.recovery_dir: Path | None = None
        self.health = derive.Health(started_at=time.monotonic())
        self.stall_s = 120.0
        self.records: dict[tuple[str, str], Any] = {}
        self.letters: dict[str, Any] = {}
        self.process = 0
        self.processes = 1
        self.lease_role = ""


_state = _State()


def enable(
    recovery_dir: str | None,
    ready_retry_s: float,
    stall_s: float,
    process: int = 0,
    processes: int = 1,
) -> None:
    """Turn the hooks on and register the scrape-time collector (once per process)."""
    global _ready_threshold_s
    if _state.enabled:
        return
    _state.enabled = True
    _state.process, _state.processes = process, processes
    _state.recovery_dir = Path(recovery_dir) if recovery_dir else None
    _state.stall_s = stall_s
    _ready_threshold_s = ready_retry_s
    metrics.register(read_state)


def enabled() -> bool:
    """True once :func:`enable` ran in this process."""
    return _state.enabled


def last_activity() -> float | None:
    """Monotonic time of the last batch, tick or retry this process's sinks saw (``None``: none)."""
    with _state.lock:
        return _state.health.last_activity


# -- the source ----------------------------------------------------------------------


def watch_partition(topic: str, partition: int, consumer: Any, position: Callable[[], int]) -> None:
    """A reader started: its lag is read at scrape time from librdkafka's cached end offset."""
    if not _state.enabled:
        return
    with _state.lock:
        _state.partitions[(topic, partition)] = (consumer, position)
        _state.health.connected = True


def unwatch_partition(topic: str, partition: int) -> None:
    """A reader closes (before its consumer does, so a scrape never touches a closed one)."""
    if not _state.enabled:
        return
    with _state.lock:
        _state.partitions.pop((topic, partition), None)


def kafka_error(code: str) -> None:
    """A Kafka client error reached the job (counted before any log throttling)."""
    if not _state.enabled:
        return
    metrics.KAFKA_ERRORS.labels(code).inc()
    now = time.monotonic()
    health = _state.health
    if derive.kafka_failing(health, now, KAFKA_QUIET_S) is None:
        health.kafka_errors_since = now
    health.kafka_last_error = now


# -- the steps -----------------------------------------------------------------------


def timed(stage: str, step: Callable[[T], R]) -> Callable[[T], R]:
    """``step`` timed into ``lb_batch_seconds{stage}``; batch sizes into ``lb_batch_records``.

    Returns ``step`` itself when metrics are off, so "off" costs nothing.
    """
    if not _state.enabled:
        return step
    seconds = metrics.BATCH_SECONDS.labels(stage)
    sizes = metrics.BATCH_RECORDS

    def run(batch: T) -> R:
        started = time.perf_counter()
        out = step(batch)
        records = getattr(batch, "records", None)
        if records:  # an idle partition's tick is not a batch
            seconds.observe(time.perf_counter() - started)
            sizes.observe(len(records))
        return out

    return run


def board_sink_started(planner: Any) -> None:
    """A worker's board sink connected: watch its planner's cache size."""
    if not _state.enabled:
        return
    _state.planners.add(planner)
    _state.health.connected = True


def stage(name: str, seconds: float) -> None:
    """The board sink spent ``seconds`` in stage ``name`` of a round.

    ``plan``; ``redis_read``: the round trip (this round's reads, plus the
    answers to the writes sent the round before); ``redis_write``: sending a
    round's writes, which does not wait for them (a cluster's synchronous write
    included).
    """
    if _state.enabled:
        metrics.BATCH_SECONDS.labels(name).observe(seconds)


def group_writes(micros: list[int]) -> None:
    """Redis applied group writes that took these many microseconds (inside Redis) each."""
    if not _state.enabled:
        return
    observe = metrics.GROUP_WRITE_SECONDS.observe
    for spent in micros:
        observe(spent / 1e6)


def batch_applied(batch: Any, plan: Any) -> None:
    """One batch acknowledged by Redis: outcomes per game, freshness, the partition's last record.

    ``batch`` is a :class:`~domain.records.CheckedBatch`, ``plan`` its
    :class:`~domain.planner.WritePlan`. Per batch: a few dictionary updates
    and one bucketing pass over the accepted records' timestamps.
    """
    if not _state.enabled:
        return
    now_ms = time.time_ns() // 1_000_000
    for group in plan.groups:
        game = group.keys.tag.split("/", 1)[0]
        for outcome, n in group.stats.items():
            if n and outcome in derive.OUTCOMES:
                _record_counter(game, outcome).inc(n)
            elif n and outcome in derive.TOURNAMENT_REFUSALS:
                metrics.TOURNAMENT_REFUSALS.labels(game, outcome).inc(n)
    last_ts = _last_record_ts(batch)
    with _state.lock:
        if batch.accepted:
            _state.freshness.add_timestamps(now_ms, map(_RECORD_TS, batch.accepted))
        if last_ts is not None:
            _state.last_ts[(batch.topic, batch.partition)] = last_ts
        _state.health.last_activity = time.monotonic()


def _last_record_ts(batch: Any) -> int | None:
    """Record timestamp of the batch's last record, accepted or dead-lettered."""
    last = None
    if batch.accepted:
        last = (batch.accepted[-1].offset, batch.accepted[-1].record_ts_ms)
    if batch.dead and (last is None or batch.dead[-1].record.offset > last[0]):
        last = (batch.dead[-1].record.offset, batch.dead[-1].record.timestamp_ms)
    return None if last is None else last[1]


def _record_counter(game: str, outcome: str) -> Any:
    child = _state.records.get((game, outcome))
    if child is None:
        child = _state.records[(game, outcome)] = metrics.RECORDS.labels(game, outcome)
    return child


def dead_letters(codes: list[str]) -> None:
    """Dead letters Kafka acknowledged, one code each."""
    if not _state.enabled or not codes:
        return
    counts: dict[str, int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    for code, n in counts.items():
        child = _state.letters.get(code)
        if child is None:
            child = _state.letters[code] = metrics.DEAD_LETTERS.labels(code)
        child.inc(n)
    _record_counter(derive.NO_GAME, "dead_letter").inc(len(codes))


# -- retries -------------------------------------------------------------------------


def retrying(setting: str, first_failure: float) -> None:
    """A call under ``setting``'s retry budget failed and will be tried again."""
    if not _state.enabled:
        return
    if setting == "LB_REDIS_RETRY_S":
        metrics.REDIS_RETRIES.inc()
    with _state.lock:
        _state.health.failing_since.setdefault(setting, first_failure)
        _state.health.last_activity = time.monotonic()


def recovered(setting: str) -> None:
    """The retried call under ``setting`` succeeded."""
    if not _state.enabled:
        return
    with _state.lock:
        _state.health.failing_since.pop(setting, None)


# -- the deployment lease ------------------------------------------------------------


def lease(role: str, waiting: str | None) -> None:
    """The deployment's lease role; ``waiting`` (a standby's line) makes it not ready."""
    with _state.lock:
        _state.lease_role = role
        _state.health.lease_wait = waiting


# -- read at scrape time -------------------------------------------------------------


def health_now() -> tuple[str | None, list[str]]:
    """(why not live or None, why not ready: empty when ready)."""
    now = time.monotonic()
    with _state.lock:
        health = _state.health
        return (
            derive.liveness(health, now, _state.stall_s),
            derive.readiness(health, now, _ready_threshold_s, KAFKA_QUIET_S),
        )


def read_state() -> metrics.ProcessState:
    """Everything the collector exports, read now."""
    from confluent_kafka import TopicPartition

    now_ms = time.time_ns() // 1_000_000
    with _state.lock:
        watched = list(_state.partitions.items())
        last_ts = dict(_state.last_ts)
        freshness = _state.freshness.cumulative()
        fresh_sum = _state.freshness.total_s
        planners = list(_state.planners)
    parts = []
    for (topic, partition), (consumer, position) in sorted(watched, key=lambda kv: kv[0]):
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except (RuntimeError, ValueError, TypeError):  # closed between the copy and now
            continue
        lag = derive.lag_records(high if high is not None else -1, position())
        parts.append(
            metrics.PartitionState(
                topic,
                partition,
                lag,
                derive.lag_seconds(lag, last_ts.get((topic, partition)), now_ms),
            )
        )
    cache = sum(len(getattr(p, "_entries", ())) for p in planners) if planners else None
    not_live, not_ready = health_now()
    return metrics.ProcessState(
        partitions=parts,
        freshness=freshness,
        freshness_sum_s=fresh_sum,
        cache_players=cache,
        snapshot_age_s=_snapshot_age_s(),
        live=not_live is None,
        ready=not not_ready,
        process=_state.process,
        processes=_state.processes,
        lease_role=_state.lease_role,
    )


def _snapshot_age_s() -> float | None:
    """Seconds since the newest file of the recovery store changed (Bytewax's SQLite writes)."""
    where = _state.recovery_dir
    if where is None:
        return None
    try:
        newest = max(entry.stat().st_mtime for entry in os.scandir(where) if entry.is_file())
    except (OSError, ValueError):
        return None
    return max(0.0, time.time() - newest)


def reset_for_tests() -> None:
    """Forget partitions, planners and health (tests running several flows in one process)."""
    with _state.lock:
        _state.partitions.clear()
        _state.last_ts.clear()
        _state.health = derive.Health(started_at=time.monotonic())
