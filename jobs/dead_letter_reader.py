"""Read the dead-letter topic back: for ``lb dlq`` (inspect) and its re-drive.

Letters are read from a start position per partition (the beginning, or where
a consumer group last committed) up to the end offsets seen when reading
starts, so a read always finishes even while the job keeps adding letters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from adapters.kafka import (
    consume_to_end,
    headers_of,
    reading_consumer,
    topic_partitions,
    watermarks,
)
from domain.errors import MissingTopic, ServiceError


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
    return reading_consumer(
        config, group, extra={"auto.offset.reset": "earliest", "fetch.wait.max.ms": 50}
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
        try:
            partitions = topic_partitions(config, topic, timeout_s)
        except MissingTopic as exc:
            raise MissingTopic(
                f"the dead-letter topic {topic!r} (LB_DLQ_TOPIC) does not exist"
            ) from exc
        low, ends = watermarks(consumer, topic, partitions, timeout_s)
        starts = dict(low)
        if from_committed:
            committed = consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
            )
            starts.update({tp.partition: max(low[tp.partition], tp.offset) for tp in committed})
        letters = [
            Letter(
                msg.partition() or 0,
                msg.offset() or 0,
                msg.timestamp()[1],
                msg.key(),
                msg.value(),
                headers_of(msg),
            )
            for msg in consume_to_end(consumer, topic, starts, ends, timeout_s)
        ]
    except KafkaException as exc:
        raise ServiceError(f"cannot read {topic!r}: {exc}") from exc
    finally:
        consumer.close()
    return letters, ends


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
