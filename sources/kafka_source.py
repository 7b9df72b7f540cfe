"""Bytewax input: one partition of the score topic -> time-bounded record batches.

Each Kafka partition is one Bytewax source partition with its own consumer,
assigned (not subscribed), so Bytewax owns partition placement and recovery.
Items are whole :class:`RecordBatch` objects closed ``batch_ms`` after their
first record (or at ``batch_max`` records): every downstream step works per
batch, which is what lets a Python flow reach 100K events/s.

Delivery: the snapshot is the offset after the last *emitted* record, so on
resume Bytewax replays from the last snapshot (at-least-once input). The
board and dead-letter sinks turn that into exactly-once effects with offset
watermarks. Two things can move a reader further back: at start, ``resume``
(the board sink's view of what Redis still holds, see
:mod:`domain.healing`), and while running, a rewind the board sink requested
through :class:`~domain.rewinds.Rewinds` after Redis lost writes; the
reader then drops what it had buffered, seeks, and stamps later batches with
the partition's new generation. An idle partition emits an empty batch every
``tick_ms`` so the board sink still audits its watermarks while nothing arrives.

Outages: librdkafka reconnects to a restarted broker on its own and resumes
fetching from the consumer's position, so transient errors (connection lost,
all brokers down, leader moving, timeouts) are logged, at most once per
``adapters.kafka.ERROR_LOG_S`` per kind, and never end the job; an idle partition simply
stays idle meanwhile. Only fatal or non-retriable partition errors (e.g. the
topic was deleted) stop it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from adapters.kafka import QUIET_KAFKA_LOGGER, ErrorLog, is_transient, topic_partitions
from domain.batching import MicroBatcher
from domain.errors import ServiceError
from domain.records import RecordBatch, SourceRecord
from domain.rewinds import Rewinds
from telemetry import hooks

#: ``(topic, partition, snapshot offset or None) -> offset to start from or None``.
ResumeAdvisor = Callable[[str, int, int | None], int | None]

log = logging.getLogger(__name__)

#: How long an idle partition sleeps between polls (bounds the added latency).
IDLE_POLL = timedelta(milliseconds=5)

#: How long the broker may hold a fetch of a partition that has nothing new.
#: It answers as soon as one record arrives (``fetch.min.bytes`` stays 1), so
#: this adds no latency; what it sets is how often an idle or slow partition's
#: consumer asks again. Each partition has a consumer of its own, so at 10 ms
#: a job of 8 partitions made 800 fetch requests a second while nothing
#: arrived, and the broker spent a third of a core answering them (a job of
#: 256 partitions would send 25,600); at 500 ms (librdkafka's default) an idle
#: partition costs two a second. The price: the first fetch after a rewind may
#: wait for the one in flight, up to this long.
FETCH_WAIT_MS = 500


def partition_consumer_config(
    config: Mapping[str, Any], topic: str, errors: Callable[[KafkaError], None]
) -> dict[str, Any]:
    """The configuration of one partition's consumer: assigned, offsets ours, quiet logs."""
    return {
        **config,
        "error_cb": errors,
        "group.id": f"lb-{topic}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        "queued.max.messages.kbytes": 65536,
        "log_level": 3,
        "logger": QUIET_KAFKA_LOGGER,  # the errors reach error_cb, throttled
    }


class StopSignal:
    """Set from a signal handler; sources then flush and end cleanly.

    A plain flag, not a ``threading.Event``: Python runs a signal handler
    between any two bytecodes of the main thread, including inside a previous
    run of the same handler, and ``Event.set`` takes a non-reentrant lock. The
    job usually receives its stop signal twice (``lb run`` forwards SIGTERM to
    a child that a process-group kill or a terminal's Ctrl-C already reached),
    and the second handler then waited for ever on the lock the first one
    held: the job hung instead of stopping. Assigning a bool cannot block, and
    the sources only ever poll it.
    """

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _PartitionReader(StatefulSourcePartition[RecordBatch, int]):
    def __init__(
        self,
        config: Mapping[str, str],
        topic: str,
        partition: int,
        start: int | None,
        batch_ms: int,
        batch_max: int,
        until_end: bool,
        stop: StopSignal,
        rewinds: Rewinds,
        tick_ms: int | None = None,
    ) -> None:
        self._topic = topic
        self._tick_ms = tick_ms
        self._last_emit_ms = _now_ms()
        self._partition = partition
        self._stop = stop
        self._rewinds = rewinds
        self._generation = 0
        self._errors = ErrorLog(f"{topic}[{partition}]", counted=hooks.kafka_error, logger=log)
        self._consumer = Consumer(partition_consumer_config(config, topic, self._errors))
        tp = TopicPartition(topic, partition)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=30)
        except Exception as exc:  # librdkafka raises KafkaException
            raise ServiceError(f"cannot read offsets of {topic}[{partition}]: {exc}") from exc
        self._next = start if start is not None else low
        self._end = high if until_end else None
        self._consumer.assign(
            [
                TopicPartition(
                    topic, partition, self._next if start is not None else OFFSET_BEGINNING
                )
            ]
        )
        self._batcher: MicroBatcher[SourceRecord] = MicroBatcher(batch_ms, batch_max)
        self._pending_next = self._next
        self._awake: datetime | None = None
        hooks.watch_partition(topic, partition, self._consumer, self.snapshot)

    def next_batch(self) -> list[RecordBatch]:
        rewind = self._rewinds.take(self._topic, self._partition)
        if rewind is not None:
            self._rewind(*rewind)
        now = _now_ms()
        if self._batcher.room and not self._reached_end():
            fresh: list[SourceRecord] = []
            for msg in self._consumer.consume(num_messages=self._batcher.room, timeout=0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if not is_transient(err):
                        raise ServiceError(
                            f"Kafka error on {self._topic}[{self._partition}]: {err}"
                        )
                    self._errors(err)
                    continue
                offset = msg.offset() or 0
                fresh.append(SourceRecord(offset, msg.timestamp()[1], msg.key(), msg.value()))
                self._pending_next = offset + 1
            self._batcher.add(fresh, now)
        finishing = self._stop.is_set() or self._reached_end()
        if len(self._batcher) and (finishing or self._batcher.due(now)):
            records = tuple(self._batcher.take())
            self._next = self._pending_next
            self._awake = None
            self._last_emit_ms = now
            return [RecordBatch(self._topic, self._partition, records, self._generation)]
        if finishing and not len(self._batcher):
            raise StopIteration
        if self._tick_ms is not None and now - self._last_emit_ms >= self._tick_ms:
            # An idle partition still reaches the sinks now and then, so the board
            # sink's audit notices a Redis that lost writes while nothing arrives.
            self._last_emit_ms = now
            return [RecordBatch(self._topic, self._partition, (), self._generation, self._next)]
        deadline = self._batcher.deadline_ms
        if deadline is not None:
            self._awake = datetime.now(UTC) + timedelta(milliseconds=max(0, deadline - now))
        else:
            self._awake = datetime.now(UTC) + IDLE_POLL
        return []

    def _rewind(self, offset: int, generation: int) -> None:
        """Re-read from ``offset``: drop what was buffered, seek, start a new generation."""
        self._batcher.take()
        self._consumer.assign([TopicPartition(self._topic, self._partition, offset)])
        self._next = self._pending_next = offset
        self._generation = generation
        log.warning("%s[%d]: re-reading from offset %d", self._topic, self._partition, offset)

    def _reached_end(self) -> bool:
        return self._end is not None and self._pending_next >= self._end

    def next_awake(self) -> datetime | None:
        return self._awake

    def snapshot(self) -> int:
        return self._next

    def close(self) -> None:
        hooks.unwatch_partition(self._topic, self._partition)
        self._consumer.close()


@dataclass(frozen=True)
class TopicInput:
    """A further topic one :class:`ScoreTopicSource` reads beside its own."""

    topic: str
    resume: ResumeAdvisor | None = None
    rewinds: Rewinds = field(default_factory=Rewinds)
    tick_ms: int | None = None


class ScoreTopicSource(FixedPartitionedSource[RecordBatch, int]):
    """Every partition of ``topic`` (and of each topic in ``also``), read in time-bounded batches.

    Why one source for several topics: Bytewax lets a source partition read
    only once the whole dataflow has finished that partition's previous epoch,
    and each input steps its partitions' epochs on its own. Two inputs drift
    apart during a long catch-up, after which the partitions a step ahead read
    once per epoch. One input steps every partition in the same activation.
    A further topic's partitions are named ``<topic>:<partition>``; the own
    topic's keep their plain numbers, so its snapshots carry over.
    """

    def __init__(
        self,
        config: Mapping[str, str],
        topic: str,
        *,
        batch_ms: int,
        batch_max: int,
        until_end: bool = False,
        stop: StopSignal | None = None,
        rewinds: Rewinds | None = None,
        resume: ResumeAdvisor | None = None,
        tick_ms: int | None = None,
        also: Sequence[TopicInput] = (),
    ) -> None:
        self._config = dict(config)
        self._also = {t.topic: t for t in also}
        self._tick_ms = tick_ms
        self._rewinds = rewinds or Rewinds()
        self._resume = resume
        self._topic = topic
        self._batch_ms = batch_ms
        self._batch_max = batch_max
        self._until_end = until_end
        self._stop = stop or StopSignal()

    def list_parts(self) -> list[str]:
        own = [str(p) for p in topic_partitions(self._config, self._topic)]
        return own + [
            f"{topic}:{p}" for topic in self._also for p in topic_partitions(self._config, topic)
        ]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _PartitionReader:
        topic, _, number = for_part.rpartition(":")
        partition = int(number)
        spec = (
            self._also[topic]
            if topic
            else TopicInput(self._topic, self._resume, self._rewinds, self._tick_ms)
        )
        start = resume_state
        if spec.resume is not None:
            start = spec.resume(spec.topic, partition, resume_state)
        return _PartitionReader(
            self._config,
            spec.topic,
            partition,
            start,
            self._batch_ms,
            self._batch_max,
            self._until_end,
            self._stop,
            spec.rewinds,
            spec.tick_ms,
        )
