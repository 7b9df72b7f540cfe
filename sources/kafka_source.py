"""Bytewax input: one partition of the score topic -> time-bounded record batches.

Each Kafka partition is one Bytewax source partition with its own consumer,
assigned (not subscribed), so Bytewax owns partition placement and recovery.
Items are whole :class:`RecordBatch` objects closed ``batch_ms`` after their
first record (or at ``batch_max`` records): every downstream step works per
batch, which is what lets a Python flow reach 100K events/s.

Delivery: the snapshot is the offset after the last *emitted* record, so on
resume Bytewax replays from the last snapshot (at-least-once input). The
board and dead-letter sinks turn that into exactly-once effects with offset
watermarks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from domain.batching import MicroBatcher
from domain.errors import ServiceError
from domain.records import RecordBatch, SourceRecord

#: How long an idle partition sleeps between polls (bounds the added latency).
IDLE_POLL = timedelta(milliseconds=5)


class StopSignal:
    """Set from a signal handler; sources then flush and end cleanly."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


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
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._stop = stop
        self._consumer = Consumer(
            {
                **config,
                "group.id": f"lb-{topic}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
                "queued.max.messages.kbytes": 65536,
                "log_level": 3,
            }
        )
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

    def next_batch(self) -> list[RecordBatch]:
        now = _now_ms()
        if self._batcher.room and not self._reached_end():
            fresh: list[SourceRecord] = []
            for msg in self._consumer.consume(num_messages=self._batcher.room, timeout=0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal() or not err.retriable():
                        raise ServiceError(
                            f"Kafka error on {self._topic}[{self._partition}]: {err}"
                        )
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
            return [RecordBatch(self._topic, self._partition, records)]
        if finishing and not len(self._batcher):
            raise StopIteration
        deadline = self._batcher.deadline_ms
        if deadline is not None:
            self._awake = datetime.now(UTC) + timedelta(milliseconds=max(0, deadline - now))
        else:
            self._awake = datetime.now(UTC) + IDLE_POLL
        return []

    def _reached_end(self) -> bool:
        return self._end is not None and self._pending_next >= self._end

    def next_awake(self) -> datetime | None:
        return self._awake

    def snapshot(self) -> int:
        return self._next

    def close(self) -> None:
        self._consumer.close()


class ScoreTopicSource(FixedPartitionedSource[RecordBatch, int]):
    """Every partition of ``topic``, read in time-bounded batches."""

    def __init__(
        self,
        config: Mapping[str, str],
        topic: str,
        *,
        batch_ms: int,
        batch_max: int,
        until_end: bool = False,
        stop: StopSignal | None = None,
    ) -> None:
        self._config = dict(config)
        self._topic = topic
        self._batch_ms = batch_ms
        self._batch_max = batch_max
        self._until_end = until_end
        self._stop = stop or StopSignal()

    def list_parts(self) -> list[str]:
        return [str(p) for p in topic_partitions(self._config, self._topic)]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _PartitionReader:
        return _PartitionReader(
            self._config,
            self._topic,
            int(for_part),
            resume_state,
            self._batch_ms,
            self._batch_max,
            self._until_end,
            self._stop,
        )


def topic_partitions(config: Mapping[str, str], topic: str, timeout_s: float = 30.0) -> list[int]:
    """Partition ids of ``topic``; a missing topic is a clear error, not an empty list."""
    consumer = Consumer({**config, "group.id": "lb-metadata", "log_level": 3})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s)
    except Exception as exc:
        raise ServiceError(f"cannot reach Kafka for topic {topic!r}: {exc}") from exc
    finally:
        consumer.close()
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error if info is not None else "unknown topic"
        raise ServiceError(f"topic {topic!r} is not available: {reason}")
    return sorted(info.partitions)
