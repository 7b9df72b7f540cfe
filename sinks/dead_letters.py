"""Bytewax output: refused records -> the dead-letter topic, each exactly once.

Delivery guarantee: **exactly once per source record** as long as the
dead-letter topic has at least as many partitions as the source (``lb run``
creates it so). A source partition's letters go, in order, to the dead-letter
partition of the same number, through an idempotent producer; on start the
sink reads the tail of each dead-letter partition and skips letters whose
source offset is not beyond the last one already there. With fewer
dead-letter partitions it degrades to at-least-once (the headers
``source.partition`` and ``source.offset`` still identify duplicates).

The value is the original bytes, untouched; headers carry ``error.code``,
``error.detail``, ``source.topic``, ``source.partition``, ``source.offset``
and ``source.timestamp`` (:class:`domain.outcomes.DeadLetterHeader`; the code
is a :class:`domain.outcomes.DeadLetterCode`).

Outages: while the broker is down or restarting, librdkafka keeps the letters
and retries their delivery for ``LB_KAFKA_RETRY_S`` (its
``message.timeout.ms``); the sink waits for the acknowledgements, logging
while it waits (the worker reads nothing more meanwhile: backpressure), and
fails loudly only when a letter could not be delivered within that time.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from config.clients import QUIET_KAFKA_LOGGER
from domain.errors import Deposed, RetryBudgetExceeded, ServiceError
from domain.outcomes import DeadLetterHeader as Header
from domain.records import CheckedBatch, DeadLetter
from sinks import outcomes
from sinks.retry import give_up, step_down
from sources.kafka_source import ErrorLog, topic_partitions

log = logging.getLogger(__name__)

#: How many trailing records of each dead-letter partition are read at start.
TAIL_RECORDS = 2000

#: While letters wait for acknowledgement, a log line at most this often.
WAIT_LOG_S = 5.0


def letter_headers(letter: DeadLetter) -> list[tuple[str, bytes]]:
    """The dead-letter headers of SPEC.md (``error.*`` and ``source.*``)."""
    return [
        (Header.CODE.value, letter.code.encode()),
        (Header.DETAIL.value, letter.detail.encode("utf-8", "replace")[:2000]),
        (Header.TOPIC.value, letter.topic.encode()),
        (Header.PARTITION.value, str(letter.partition).encode()),
        (Header.OFFSET.value, str(letter.record.offset).encode()),
        (Header.TIMESTAMP.value, str(letter.record.timestamp_ms).encode()),
    ]


def header_map(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Headers of a dead letter as text (for readers and tests)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or []}


def applied_offsets(
    config: Mapping[str, str], dlq_topic: str, source_topic: str, timeout_s: float = 60.0
) -> dict[int, int]:
    """Highest source offset already dead-lettered, per source partition.

    With at least as many dead-letter partitions as source partitions, the
    last record of dead-letter partition ``p`` holds the newest letter of source
    partition ``p``, so one record per partition is read; otherwise the last
    ``TAIL_RECORDS`` of each. All partitions are read together.
    """
    dlq_parts = topic_partitions(config, dlq_topic)
    exact = len(dlq_parts) >= len(topic_partitions(config, source_topic))
    depth = 1 if exact else TAIL_RECORDS
    consumer = Consumer(
        {
            **config,
            "group.id": f"lb-dlq-tail-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "log_level": 3,
            "logger": QUIET_KAFKA_LOGGER,
        }
    )
    found: dict[int, int] = {}
    try:
        ends: dict[int, int] = {}
        assignment = []
        for partition in dlq_parts:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(dlq_topic, partition), timeout=30
            )
            if high > low:
                ends[partition] = high
                assignment.append(TopicPartition(dlq_topic, partition, max(low, high - depth)))
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise ServiceError(f"timed out reading the tail of {dlq_topic!r}")
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                offset = msg.offset() or 0
                if offset + 1 >= ends.get(msg.partition() or 0, 0):
                    ends.pop(msg.partition() or 0, None)
                h = header_map(msg.headers())  # type: ignore[arg-type]
                if h.get(Header.TOPIC) != source_topic:
                    continue
                part, off = int(h[Header.PARTITION]), int(h[Header.OFFSET])
                found[part] = max(found.get(part, -1), off)
    except KafkaException as exc:
        raise ServiceError(f"cannot read the tail of {dlq_topic!r}: {exc}") from exc
    finally:
        consumer.close()
    return found


class _DeadLetterPartition(StatelessSinkPartition[CheckedBatch]):
    def __init__(
        self,
        producer: Producer,
        topic: str,
        partitions: int,
        already: dict[int, int],
        delivery_timeout_s: float,
        fence: Callable[[], int] | None = None,
    ) -> None:
        self._producer = producer
        self._fence = fence
        self._topic = topic
        self._partitions = partitions
        self._already = already
        self._timeout_s = delivery_timeout_s
        self._failures: list[str] = []

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self._failures.append(str(err))

    def write_batch(self, items: Sequence[CheckedBatch]) -> None:
        """Write every batch's letters; Kafka down past ``LB_KAFKA_RETRY_S`` ends the job."""
        try:
            self._write(items)
        except RetryBudgetExceeded as exc:
            give_up(exc)
        except Deposed as exc:
            step_down(exc)

    def _write(self, items: Sequence[CheckedBatch]) -> None:
        if self._fence is not None and any(batch.dead for batch in items):
            self._fence()  # a deposed deployment writes no letter (raises Deposed)
        sent: list[str] = []
        for batch in items:
            done = self._already.get(batch.partition, -1)
            for letter in batch.dead:
                if letter.record.offset <= done:
                    continue  # written before a restart
                self._produce(letter)
                sent.append(letter.code)
            if batch.dead:
                self._already[batch.partition] = max(done, batch.dead[-1].record.offset)
        if sent:
            self._await_delivery()
            outcomes.add_dead_letters(sent)

    def _await_delivery(self) -> None:
        """Block until Kafka acknowledged every letter; fail once librdkafka gave up.

        Returning only after the acknowledgements is what keeps Bytewax from
        snapshotting source offsets past letters that were never written.
        librdkafka expires a letter after ``delivery_timeout_s`` (its
        ``message.timeout.ms``) and reports it through ``_delivered``; the
        extra slice here only covers that report arriving late.
        """
        started = time.monotonic()
        remaining = self._producer.flush(WAIT_LOG_S)
        while remaining and not self._failures:
            waited = time.monotonic() - started
            if waited > self._timeout_s + WAIT_LOG_S:
                break
            log.warning(
                "waiting for Kafka to acknowledge %d dead letters (%.0fs so far)", remaining, waited
            )
            remaining = self._producer.flush(WAIT_LOG_S)
        if self._failures or remaining:
            raise RetryBudgetExceeded(
                f"dead-letter delivery to {self._topic!r} failed within "
                f"LB_KAFKA_RETRY_S={self._timeout_s:g}s ({remaining} undelivered): "
                f"{self._failures[:3]}"
            )
        if time.monotonic() - started > WAIT_LOG_S:
            log.warning(
                "Kafka acknowledged the waiting dead letters after %.1fs",
                time.monotonic() - started,
            )

    def _produce(self, letter: DeadLetter) -> None:
        kwargs: dict[str, Any] = {
            "value": letter.record.value,
            "key": letter.record.key,
            "headers": letter_headers(letter),
            "partition": letter.partition % self._partitions,
            "on_delivery": self._delivered,
        }
        if letter.record.timestamp_ms >= 0:
            kwargs["timestamp"] = letter.record.timestamp_ms
        while True:
            try:
                self._producer.produce(self._topic, **kwargs)
                return
            except BufferError:
                self._producer.poll(0.1)

    def close(self) -> None:
        self._producer.flush(60)


class DeadLetterSink(DynamicSink[CheckedBatch]):
    """Writes each batch's dead letters; see the module docstring for the guarantee."""

    def __init__(
        self,
        config: Mapping[str, str],
        dlq_topic: str,
        source_topic: str,
        delivery_timeout_s: float = 300.0,
        fence: Callable[[], int] | None = None,
    ) -> None:
        """``fence``: the lease's epoch check (``flows.lease``); a deposed deployment stops."""
        self._config = dict(config)
        self._fence = fence
        self._topic = dlq_topic
        self._source = source_topic
        self._timeout_s = delivery_timeout_s

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DeadLetterPartition:
        partitions = len(topic_partitions(self._config, self._topic))
        source_partitions = len(topic_partitions(self._config, self._source))
        if partitions < source_partitions:
            log.warning(
                "%s has %d partitions for %d source partitions: dead letters are "
                "at-least-once (dedupe by source.partition/source.offset headers)",
                self._topic,
                partitions,
                source_partitions,
            )
        already = applied_offsets(self._config, self._topic, self._source)
        producer = Producer(
            {
                **self._config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # librdkafka retries delivery across broker restarts for this long
                # (0 would mean for ever: the budget is at least one second).
                "message.timeout.ms": max(1, int(self._timeout_s * 1000)),
                "error_cb": ErrorLog(f"dead-letter producer {self._topic}"),
                "log_level": 3,
                "logger": QUIET_KAFKA_LOGGER,
            }
        )
        return _DeadLetterPartition(
            producer, self._topic, partitions, already, self._timeout_s, self._fence
        )
