"""Read the dead-letter topic back: for ``lb dlq`` (inspect) and its re-drive.

Letters are read from a start position per partition (the beginning, or where
a consumer group last committed) up to the end offsets seen when reading
starts, so a read always finishes even while the job keeps adding letters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from domain.errors import ServiceError
from sinks.dead_letter_tail import header_map


@dataclass(frozen=True)
class Letter:
    """One dead letter: where it sits, the original record, and its headers."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]

    @property
    def code(self) -> str:
        """The dead-letter code (``error.code``)."""
        return self.headers.get("error.code", "?")


def _consumer(config: Mapping[str, Any], group: str) -> Consumer:
    return Consumer(
        {
            **config,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )


def read_letters(
    config: Mapping[str, Any],
    topic: str,
    *,
    group: str = "lb-dlq-reader",
    from_committed: bool = False,
    timeout_s: float = 60.0,
) -> tuple[list[Letter], dict[int, int]]:
    """Every letter from the start position to the current end, and those end offsets.

    ``from_committed`` starts each partition where ``group`` last committed
    (the beginning when it never did), which is how a re-drive remembers how
    far it got.
    """
    consumer = _consumer(config, group)
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s)
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            raise ServiceError(f"the dead-letter topic {topic!r} (LB_DLQ_TOPIC) does not exist")
        partitions = sorted(info.partitions)
        starts = {p: 0 for p in partitions}
        if from_committed:
            committed = consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
            )
            starts.update({tp.partition: tp.offset for tp in committed if tp.offset >= 0})
        ends: dict[int, int] = {}
        assignment = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            ends[p] = high
            start = max(low, starts[p])
            if start < high:
                assignment.append(TopicPartition(topic, p, start))
        letters = list(_consume(consumer, topic, assignment, ends, timeout_s))
    except KafkaException as exc:
        raise ServiceError(f"cannot read {topic!r}: {exc}") from exc
    finally:
        consumer.close()
    return letters, ends


def _consume(
    consumer: Consumer,
    topic: str,
    assignment: list[TopicPartition],
    ends: Mapping[int, int],
    timeout_s: float,
) -> Iterator[Letter]:
    """Letters of each assigned partition before its end offset.

    A partition is done when the consumer's *position* reaches its end: the
    job writes letters in transactions, whose commit markers (and aborted
    letters) take offsets no committed reader is ever given.
    """
    waiting = {tp.partition for tp in assignment}
    consumer.assign(assignment)
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise ServiceError(f"timed out reading {topic!r}")
        for msg in consumer.consume(num_messages=1000, timeout=0.2):
            if msg.error() is not None:
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset < ends[partition]:
                yield Letter(
                    partition,
                    offset,
                    msg.timestamp()[1],
                    msg.key(),
                    msg.value(),
                    header_map(msg.headers()),  # type: ignore[arg-type]
                )
        positions = consumer.position([TopicPartition(topic, p) for p in waiting])
        waiting -= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}


def count_letters(config: Mapping[str, Any], topic: str, timeout_s: float = 60.0) -> int:
    """How many letters ``topic`` holds (committed ones; offsets also count markers)."""
    letters, _ = read_letters(config, topic, group="lb-dlq-count", timeout_s=timeout_s)
    return len(letters)


def commit_ends(config: Mapping[str, Any], topic: str, group: str, ends: Mapping[int, int]) -> None:
    """Record in ``group`` that everything before ``ends`` was handled."""
    consumer = _consumer(config, group)
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False
        )
    except KafkaException as exc:
        raise ServiceError(f"cannot record the re-drive position of {topic!r}: {exc}") from exc
    finally:
        consumer.close()
