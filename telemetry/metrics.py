"""The job's Prometheus metrics, in ``prometheus_client``'s default registry.

Counters and the stage histograms are updated once per batch by
:mod:`telemetry.hooks`; everything that is a *state* rather than an event
(lag, freshness buckets, cache size, snapshot age, health) is read by a
collector at scrape time, so the hot path never pays for it. Names are in base
units with the usual suffixes; labels are bounded (topic, partition, game,
outcome, code, stage), never a player or an event id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

RECORDS = Counter(
    "lb_records",
    "Input records by game and where they ended (applied, noop, duplicate, dead_letter); "
    "dead letters carry game='*'",
    ["game", "outcome"],
)
TOURNAMENT_REFUSALS = Counter(
    "lb_tournament_refusals",
    "Events kept off a tournament's board (the record still updates the game's other "
    "boards): reason 'tournament_full' (no seat left) or 'attempts_used_up'",
    ["game", "reason"],
)
DEAD_LETTERS = Counter(
    "lb_dead_letters", "Records sent to the dead-letter topic (acknowledged by Kafka)", ["code"]
)
BATCH_RECORDS = Histogram(
    "lb_batch_records",
    "Records per batch read from one partition",
    buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
BATCH_SECONDS = Histogram(
    "lb_batch_seconds",
    "Time one batch spends in a stage: validate, plan, redis_read, redis_write",
    ["stage"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
GROUP_WRITE_SECONDS = Histogram(
    "lb_group_write_seconds",
    "Time Redis spent applying one atomic group write (measured inside Redis); "
    "every reader of that Redis waits this long behind it",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)
REDIS_RETRIES = Counter("lb_redis_retries", "Redis round trips retried after a transient error")
KAFKA_ERRORS = Counter(
    "lb_kafka_errors", "Kafka client errors reported to the job, by librdkafka code", ["code"]
)


@dataclass(frozen=True)
class PartitionState:
    """What the collector reads of one partition at scrape time."""

    topic: str
    partition: int
    lag_records: int | None
    lag_seconds: float | None


@dataclass(frozen=True)
class ProcessState:
    """What the collector reads of the whole process at scrape time."""

    partitions: list[PartitionState]
    freshness: list[tuple[str, float]]
    freshness_sum_s: float
    cache_players: int | None
    snapshot_age_s: float | None
    live: bool
    ready: bool
    #: This process's index in its Bytewax cluster and the cluster's size.
    process: int = 0
    processes: int = 1
    #: Where its deployment stands on the projection's lease (``domain.lease.Role``).
    lease_role: str = ""


class JobCollector(Collector):
    """Turns a :class:`ProcessState`, read at scrape time, into metric families."""

    def __init__(self, read: Callable[[], ProcessState]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        state = self._read()
        yield from _lag_families(state.partitions)
        fresh = HistogramMetricFamily(
            "lb_freshness_seconds",
            "Record timestamp to its board write acknowledged by Redis",
        )
        fresh.add_metric([], buckets=state.freshness, sum_value=state.freshness_sum_s)
        yield fresh
        if state.cache_players is not None:
            yield GaugeMetricFamily(
                "lb_planner_cache_players",
                "Players whose board values this process keeps in memory",
                value=state.cache_players,
            )
        if state.snapshot_age_s is not None:
            yield GaugeMetricFamily(
                "lb_snapshot_age_seconds",
                "Seconds since Bytewax last wrote this job's recovery snapshot",
                value=state.snapshot_age_s,
            )
        yield GaugeMetricFamily("lb_live", "1 while the job makes progress", value=state.live)
        yield GaugeMetricFamily(
            "lb_ready", "1 while connected and not retrying past the threshold", value=state.ready
        )
        info = GaugeMetricFamily(
            "lb_job_process",
            "1 per job process: its index in the Bytewax cluster, the cluster's size, and "
            "its deployment's lease role (active, standby, starting, deposed)",
            labels=["process", "processes", "lease"],
        )
        info.add_metric([str(state.process), str(state.processes), state.lease_role], 1)
        yield info


def _lag_families(parts: Iterable[PartitionState]) -> Iterator[GaugeMetricFamily]:
    records = GaugeMetricFamily(
        "lb_consumer_lag_records",
        "End offset minus the next offset to read",
        labels=["topic", "partition"],
    )
    seconds = GaugeMetricFamily(
        "lb_consumer_lag_seconds",
        "Age of the last applied record while records wait (0 once caught up)",
        labels=["topic", "partition"],
    )
    for part in parts:
        labels = [part.topic, str(part.partition)]
        if part.lag_records is not None:
            records.add_metric(labels, part.lag_records)
        if part.lag_seconds is not None:
            seconds.add_metric(labels, part.lag_seconds)
    yield records
    yield seconds


def register(read: Callable[[], ProcessState]) -> JobCollector:
    """Add the scrape-time collector to the default registry (once per process)."""
    collector = JobCollector(read)
    REGISTRY.register(collector)
    return collector
