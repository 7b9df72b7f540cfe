"""Where a source partition's dead letters end: the newest one already in the topic.

The dead-letter sink asks this once per source partition, right after its
transactional producer for that partition fenced any earlier writer (see
:mod:`sinks.dead_letters`), so what it reads is final: every transaction of
an earlier deployment is either committed (and read here) or aborted (and
skipped, the reader being ``read_committed``).

Transaction markers and aborted letters occupy offsets no reader is given,
so the scan ends at a *position*, not at the offset of a record it saw. It
reads backwards in growing windows from the partition's end: with as many
dead-letter partitions as source partitions the first window holds the
answer; with fewer, letters of several source partitions share a partition
and the scan widens until it finds one of this source partition or reaches
the beginning.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from adapters.kafka import QUIET_KAFKA_LOGGER, header_map
from domain.errors import RetryBudgetExceeded
from domain.outcomes import DeadLetterHeader as Header

#: Records of the first window read back from a partition's end (then x4 each time).
FIRST_WINDOW = 64


def last_letter(
    config: Mapping[str, str],
    dlq_topic: str,
    dlq_partition: int,
    source_topic: str,
    source_partition: int,
    timeout_s: float = 60.0,
) -> int:
    """Highest source offset of ``source_partition`` dead-lettered so far (-1: none).

    Waits out a broker that is down or electing a leader for ``timeout_s``
    (the job's ``LB_KAFKA_RETRY_S``), then raises :class:`RetryBudgetExceeded`.
    """
    consumer = Consumer(
        {
            **config,
            "group.id": f"lb-dlq-tail-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "log_level": 3,
            "logger": QUIET_KAFKA_LOGGER,
        }
    )
    deadline = time.monotonic() + timeout_s
    try:
        tp = TopicPartition(dlq_topic, dlq_partition)
        low, end = _watermarks(consumer, tp, deadline)
        window = FIRST_WINDOW
        while end > low:
            start = max(low, end - window)
            found = _newest_in(consumer, tp, start, end, (source_topic, source_partition), deadline)
            if found >= 0:
                return found
            end, window = start, window * 4
        return -1
    except KafkaException as exc:
        raise RetryBudgetExceeded(f"cannot read the tail of {dlq_topic!r}: {exc}") from exc
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """The partition's offsets, waiting out a leader election (a new topic, a lost broker)."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return low, high
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if (isinstance(err, KafkaError) and err.fatal()) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _newest_in(
    consumer: Consumer,
    tp: TopicPartition,
    start: int,
    end: int,
    source: tuple[str, int],
    deadline: float,
) -> int:
    """Highest ``source.offset`` of ``source``'s letters in ``[start, end)`` (-1: none)."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
    newest = -1
    while True:
        for msg in consumer.consume(num_messages=1000, timeout=0.2):
            if msg.error() is not None or (msg.offset() or 0) >= end:
                continue
            h = header_map(msg.headers())  # type: ignore[arg-type]
            if (h.get(Header.TOPIC), h.get(Header.PARTITION)) == (source[0], str(source[1])):
                newest = max(newest, int(h[Header.OFFSET]))
        (position,) = consumer.position([tp])
        if position.offset >= end:
            return newest
        if time.monotonic() > deadline:
            raise RetryBudgetExceeded(
                f"timed out reading {tp.topic!r}[{tp.partition}] up to offset {end} "
                f"(at {position.offset}; an open transaction of another writer?)"
            )
