"""Kafka as this project uses it: partitions, offsets, reading ranges to their end, headers, errors.

One place for what every reader of the log needs (the job's source, the
dead-letter sink's tail read, ``lb dlq``, the replays, the benchmarks and the
tests): a topic's partitions (a missing topic is one clear error), its start
and end offsets, the records of ``[start, end)`` per partition read until each
partition reached its end (an empty poll never ends a partition: after a broker
restart the first fetch can take seconds), the text of record headers, and a
client error log that throttles per kind. :class:`LogReader` reads offset
ranges of the score topic as record batches, for every replay.

librdkafka's own log lines go to :data:`QUIET_KAFKA_LOGGER` and nowhere else:
the same errors reach each client's ``error_cb`` or its exceptions.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from domain.backfill_plan import Bound
from domain.errors import MissingTopic, ServiceError
from domain.records import RecordBatch, SourceRecord

#: librdkafka's own log lines (one per failed connection attempt, hundreds a
#: minute while a broker is down) go here and nowhere else: the same errors reach
#: each client's ``error_cb`` (logged at most every few seconds per kind) or its
#: exceptions, so nothing is lost but the flood.
QUIET_KAFKA_LOGGER = logging.getLogger("lb.librdkafka")
QUIET_KAFKA_LOGGER.propagate = False
QUIET_KAFKA_LOGGER.addHandler(logging.NullHandler())

log = logging.getLogger(__name__)

#: Same-kind Kafka errors are logged at most this often (a broker outage
#: produces one per reconnect attempt).
ERROR_LOG_S = 10.0

#: Errors librdkafka recovers from by itself (reconnect, metadata refresh):
#: the broker is restarting or unreachable, or a partition's leader moves.
TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
    }
)

#: ``{partition: offset}``.
Offsets = dict[int, int]


def is_transient(err: KafkaError) -> bool:
    """True for an error the consumer recovers from on its own (log it, keep going)."""
    if err.fatal():
        return False
    return bool(err.retriable()) or err.code() in TRANSIENT_CODES


class ErrorLog:
    """Logs Kafka client errors, each kind at most once per ``every_s``.

    Also a client's ``error_cb``: without one, client-level errors such as
    "all brokers down" are invisible, and an operator could not tell an idle
    topic from an unreachable broker. ``counted`` (a telemetry hook) sees
    every error's name, throttled or not; the lines go to ``logger`` (the
    client owner's, so a log line names the part of the job it concerns).
    """

    def __init__(
        self,
        where: str,
        every_s: float = ERROR_LOG_S,
        counted: Callable[[str], None] | None = None,
        logger: logging.Logger = log,
    ) -> None:
        self._where = where
        self._every_s = every_s
        self._counted = counted
        self._log = logger
        self._last: dict[int, float] = {}

    def __call__(self, err: KafkaError) -> None:
        if self._counted is not None:
            self._counted(err.name())
        now = time.monotonic()
        last = self._last.get(err.code())
        if last is not None and now - last < self._every_s:
            return
        self._last[err.code()] = now
        self._log.warning(
            "Kafka %s (%s; retrying on its own): %s", self._where, err.name(), err.str()
        )


def reading_consumer(
    config: Mapping[str, Any], group: str | None = None, extra: Mapping[str, Any] | None = None
) -> Consumer:
    """A quiet consumer that never commits on its own (``group``: a fresh one by default)."""
    return Consumer(
        {
            "log_level": 3,
            "logger": QUIET_KAFKA_LOGGER,
            **config,
            "group.id": group or f"lb-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **(extra or {}),
        }
    )


def _partitions_of(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise ServiceError(f"cannot reach Kafka for topic {topic!r}: {exc}") from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error if info is not None else "unknown topic"
        raise MissingTopic(f"topic {topic!r} is not available: {reason}")
    return sorted(info.partitions)


def topic_partitions(config: Mapping[str, Any], topic: str, timeout_s: float = 30.0) -> list[int]:
    """Partition ids of ``topic``; a missing topic is :class:`MissingTopic`, not an empty list."""
    consumer = reading_consumer(config, "lb-metadata")
    try:
        return _partitions_of(consumer, topic, timeout_s)
    finally:
        consumer.close()


def watermarks(
    consumer: Consumer, topic: str, partitions: Sequence[int], timeout_s: float = 30.0
) -> tuple[Offsets, Offsets]:
    """Each partition's earliest and end offsets (the next offset to be written), now."""
    low: Offsets = {}
    high: Offsets = {}
    try:
        for p in partitions:
            low[p], high[p] = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s
            )
    except KafkaException as exc:
        raise ServiceError(f"cannot read the offsets of {topic!r}: {exc}") from exc
    return low, high


def topic_offsets(
    config: Mapping[str, Any], topic: str, timeout_s: float = 30.0
) -> tuple[Offsets, Offsets]:
    """:func:`watermarks` of every partition of ``topic`` (a missing topic is an error)."""
    consumer = reading_consumer(config, "lb-metadata")
    try:
        return watermarks(consumer, topic, _partitions_of(consumer, topic, timeout_s), timeout_s)
    finally:
        consumer.close()


def records_in_topic(config: Mapping[str, Any], topic: str, timeout_s: float = 30.0) -> int:
    """Offsets the topic holds now: every partition's end minus its start offset.

    The record count of a topic written without transactions; a transactional
    one (the dead letters) also spends offsets on commit markers.
    """
    low, high = topic_offsets(config, topic, timeout_s)
    return sum(max(0, high[p] - low[p]) for p in high)


def consume_to_end(
    consumer: Consumer,
    topic: str,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    timeout_s: float,
) -> Iterator[Message]:
    """Every record of ``[starts[p], ends[p])`` of each partition, in order per partition.

    A partition is done when the consumer's *position* reaches its end (one
    with nothing to read is not read): transactional writers' commit markers
    (and aborted records) take offsets no committed reader is ever given, so
    the last record's offset says nothing; an empty poll never ends a
    partition either. Longer than ``timeout_s`` in all is a :class:`ServiceError`
    naming how far each unfinished partition got.
    """
    waiting = {p for p, end in ends.items() if starts.get(p, 0) < end}
    reached = {p: starts.get(p, 0) for p in waiting}
    consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in sorted(waiting)])
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            behind = ", ".join(f"[{p}] at {reached[p]} of {ends[p]}" for p in sorted(waiting))
            raise ServiceError(f"timed out reading {topic!r} to its end offsets: {behind}")
        for msg in consumer.consume(num_messages=1000, timeout=0.2):
            if msg.error() is None and (msg.offset() or 0) < ends.get(msg.partition() or 0, 0):
                yield msg
        for tp in consumer.position([TopicPartition(topic, p) for p in sorted(waiting)]):
            reached[tp.partition] = max(reached[tp.partition], tp.offset)
            if tp.offset >= ends[tp.partition]:
                waiting.discard(tp.partition)


def read_topic(config: Mapping[str, Any], topic: str, timeout_s: float = 90.0) -> list[Message]:
    """Every record ``topic`` holds now (up to the end offsets seen at the start)."""
    consumer = reading_consumer(config)
    try:
        low, high = topic_offsets(config, topic)
        return list(consume_to_end(consumer, topic, low, high, timeout_s))
    finally:
        consumer.close()


def header_map(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """A record's headers as text (undecodable bytes replaced)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or []}


def headers_of(msg: Message) -> dict[str, str]:
    """:func:`header_map` of a consumed record."""
    return header_map(msg.headers())  # type: ignore[arg-type]


class LogReader:
    """Reads offset ranges of a topic's partitions as record batches (every replay's input)."""

    def __init__(self, kafka_config: Mapping[str, Any], topic: str) -> None:
        self._config = dict(kafka_config)
        self._topic = topic

    @property
    def config(self) -> dict[str, Any]:
        """The Kafka client properties it reads with."""
        return dict(self._config)

    @property
    def topic(self) -> str:
        return self._topic

    def bounds(self) -> tuple[Offsets, Offsets]:
        """Each partition's earliest and end offsets, now."""
        return topic_offsets(self._config, self._topic)

    def ends(self) -> Offsets:
        """Each partition's end offset (the next offset to be written)."""
        return self.bounds()[1]

    def at(self, bound: Bound, high: Mapping[int, int]) -> Offsets:
        """Offsets of a bound: the user's, or the first record at or after its time.

        A partition with no record at or after that time is bound at its end (``high``).
        """
        if bound.at_ms is None:
            return dict(bound.offsets)
        at_ms = bound.at_ms
        consumer = reading_consumer(self._config)
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(self._topic, p, at_ms) for p in high], timeout=30
            )
        except KafkaException as exc:
            raise ServiceError(
                f"Kafka's offsets-for-times failed on {self._topic!r}: {exc}"
            ) from exc
        finally:
            consumer.close()
        # -1: no record at or after that time, so the bound is the partition's end.
        return {tp.partition: tp.offset if tp.offset >= 0 else high[tp.partition] for tp in found}

    def read(
        self, ranges: dict[int, tuple[int, int]], batch_max: int = 5_000
    ) -> Iterator[RecordBatch]:
        """Batches of every ``partition -> (first, last)`` range (``last`` inclusive)."""
        for batches in self.rounds(ranges, batch_max):
            yield from batches

    def rounds(
        self, ranges: Mapping[int, tuple[int, int]], batch_max: int = 5_000
    ) -> Iterator[list[RecordBatch]]:
        """Like :meth:`read`, a list per poll: at most one batch per partition.

        Batches of distinct partitions can share one read and one write round
        trip (:func:`jobs.replay.apply_round`).
        """
        todo = {p: span for p, span in ranges.items() if span[1] >= span[0]}
        if not todo:
            return
        consumer = reading_consumer(self._config, extra={"enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(self._topic, p, a) for p, (a, _) in todo.items()])
            idle_since = time.monotonic()
            while todo:
                buffers = self._poll(consumer, todo, batch_max)
                if buffers:
                    idle_since = time.monotonic()
                    yield [RecordBatch(self._topic, p, tuple(recs)) for p, recs in buffers.items()]
                if time.monotonic() - idle_since > 60:
                    raise ServiceError(f"no records from {self._topic!r} for 60 s")
        finally:
            consumer.close()

    def _poll(
        self, consumer: Consumer, todo: dict[int, tuple[int, int]], batch_max: int
    ) -> dict[int, list[SourceRecord]]:
        """One poll's records of the ranges still to read; ``todo`` loses the finished ones."""
        buffers: dict[int, list[SourceRecord]] = {}
        for msg in consumer.consume(num_messages=batch_max, timeout=0.5):
            err = msg.error()
            p = msg.partition() or 0
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    todo.pop(p, None)
                    continue
                raise ServiceError(f"Kafka error on {self._topic}[{p}]: {err}")
            offset = msg.offset() or 0
            span = todo.get(p)
            if span is None or offset > span[1]:
                todo.pop(p, None)
                continue
            buffers.setdefault(p, []).append(
                SourceRecord(offset, msg.timestamp()[1], msg.key(), msg.value())
            )
            if offset >= span[1]:
                todo.pop(p, None)
        return buffers


class Tail:
    """One consumer reading every partition from a start offset, on past its end (to the head).

    ``through()`` is, per partition, the last offset read (everything up to it
    was read, in order); ``at_end()`` says every partition was at its end when
    last polled (Kafka's partition EOF, or nothing left in the planned range).
    """

    def __init__(
        self, kafka_config: Mapping[str, str], topic: str, ranges: Mapping[int, tuple[int, int]]
    ) -> None:
        self._topic = topic
        self._last = {p: first - 1 for p, (first, _) in ranges.items()}
        # A partition whose planned range is empty and already at its end needs no EOF.
        self._eof = {p for p, (first, end) in ranges.items() if first >= end}
        self._consumer = reading_consumer(kafka_config, extra={"enable.partition.eof": True})
        self._consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in ranges.items()])

    #: Records per poll at most.
    BATCH_MAX = 5_000

    def poll(self, timeout_s: float = 0.05) -> list[RecordBatch]:
        """What is there now, as one batch per partition."""
        buffers: dict[int, list[SourceRecord]] = {}
        for msg in self._consumer.consume(num_messages=self.BATCH_MAX, timeout=timeout_s):
            err = msg.error()
            p = msg.partition() or 0
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add(p)
                    continue
                raise ServiceError(f"Kafka error on {self._topic}[{p}]: {err}")
            offset = msg.offset() or 0
            self._eof.discard(p)
            self._last[p] = offset
            buffers.setdefault(p, []).append(
                SourceRecord(offset, msg.timestamp()[1], msg.key(), msg.value())
            )
        return [RecordBatch(self._topic, p, tuple(recs)) for p, recs in buffers.items()]

    def past(self, ranges: Mapping[int, tuple[int, int]]) -> bool:
        """Whether every partition was read up to its planned end."""
        return all(self._last.get(p, -1) >= end - 1 for p, (_, end) in ranges.items())

    def at_end(self) -> bool:
        return self._eof >= set(self._last)

    def through(self) -> dict[int, int]:
        return dict(self._last)

    def close(self) -> None:
        self._consumer.close()
