"""Bytewax output: refused records -> the dead-letter topic, each exactly once.

Delivery guarantee: **exactly once per source record**, across crashes,
restarts and a standby's takeover, for every reader that reads committed
records only (``isolation.level=read_committed``: librdkafka's default, so
``lb dlq``, the tests and every Python reader; the Java client must set it).

Each source partition's letters go through a transactional producer of its
own, ``transactional.id = lb-dlq.<namespace>.<dead-letter topic>.<source
partition>``, one transaction per batch. When a process first has letters of
a partition it initialises that producer, which fences every earlier writer
of the same id: a crashed process's open transaction, or a deposed
deployment's (paused, or cut off from the network) is aborted, and that
producer's next commit fails, which stops that job (:class:`Deposed`).
Only then does it read where the partition's letters end
(:func:`sinks.dead_letter_tail.last_letter`), so the letters it skips as
written before are final, and no earlier writer can add one afterwards.

A source partition's letters go, in order, to the dead-letter partition of
the same number (modulo the dead-letter partition count; ``lb run`` creates
as many as the source has, so the tail read is one short window).

The value is the original bytes, untouched; headers carry ``error.code``,
``error.detail``, ``source.topic``, ``source.partition``, ``source.offset``
and ``source.timestamp`` (:class:`domain.outcomes.DeadLetterHeader`; the code
is a :class:`domain.outcomes.DeadLetterCode`).

Outages: while the broker is down or restarting, the sink retries the
transaction's commit (and an aborted transaction as a whole) for
``LB_KAFKA_RETRY_S``, logging while it waits (the worker reads nothing more
meanwhile: backpressure), and fails loudly only when the letters could not be
committed within that time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import KafkaError, KafkaException, Producer

from adapters.kafka import QUIET_KAFKA_LOGGER, ErrorLog, header_map, topic_partitions
from domain.errors import Deposed, RetryBudgetExceeded, ServiceError
from domain.outcomes import DeadLetterHeader as Header
from domain.records import CheckedBatch, DeadLetter
from sinks import outcomes
from sinks.dead_letter_tail import last_letter
from sinks.retry import give_up, step_down
from telemetry import hooks

__all__ = ["DeadLetterSink", "header_map", "letter_headers", "transactional_id"]

log = logging.getLogger(__name__)

#: Partitions whose transactions a worker commits at once (each waits on the broker).
COMMIT_THREADS = 8

#: While a commit waits for the broker, a log line at most this often.
WAIT_LOG_S = 5.0

#: Errors meaning another writer of the same transactional id took over.
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


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


def transactional_id(namespace: str, dlq_topic: str, source_partition: int) -> str:
    """The one transactional id every deployment of ``namespace`` uses for a partition."""
    return f"lb-dlq.{namespace}.{dlq_topic}.{source_partition}"


class _Aborted(Exception):
    """The broker aborted the open transaction (e.g. it timed out during an outage)."""


class _Writer:
    """One source partition's letters, through its own transactional producer.

    ``done`` is the highest source offset already in the topic; letters at or
    below it were written before a restart or takeover and are skipped.
    """

    def __init__(self, producer: Producer, done: int, timeout_s: float, topic: str) -> None:
        self.producer = producer
        self.done = done
        self._timeout_s = timeout_s
        self._topic = topic

    def write(self, letters: Sequence[DeadLetter], partitions: int) -> list[DeadLetter]:
        """Commit the letters beyond ``done`` in one transaction; those letters."""
        fresh = [letter for letter in letters if letter.record.offset > self.done]
        if not fresh:
            return fresh
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                self.producer.begin_transaction()
                for letter in fresh:
                    _produce(self.producer, self._topic, letter, partitions)
            except KafkaException as exc:  # a fenced producer refuses a new transaction
                raise _failure(_kafka_error(exc), self._topic) from exc
            try:
                _commit(self.producer, deadline, self._topic)
                break
            except _Aborted:
                continue  # the same letters again, in a new transaction
        self.done = fresh[-1].record.offset
        return fresh


def _produce(producer: Producer, topic: str, letter: DeadLetter, partitions: int) -> None:
    kwargs: dict[str, Any] = {
        "value": letter.record.value,
        "key": letter.record.key,
        "headers": letter_headers(letter),
        "partition": letter.partition % partitions,
    }
    if letter.record.timestamp_ms >= 0:
        kwargs["timestamp"] = letter.record.timestamp_ms
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


def _kafka_error(exc: KafkaException) -> KafkaError:
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        raise ServiceError(f"dead-letter producer: {exc}") from exc
    return err


def _fenced(topic: str) -> Deposed:
    """Another deployment's producer of ``topic``'s letters fenced this one's: stop.

    One message whichever call met the fence (a delivery, a commit, an abort),
    so an operator reading the log, and a test, see why the job stopped.
    """
    return Deposed(f"deposed: another deployment fenced this one's dead-letter writer of {topic!r}")


def _failure(err: KafkaError, topic: str) -> Exception:
    """What a non-retriable producer error means for the job."""
    if err.code() in _FENCED:
        return _fenced(topic)
    return ServiceError(f"dead-letter delivery to {topic!r} failed: {err.str()}")


def _commit(producer: Producer, deadline: float, topic: str) -> None:
    """Commit the open transaction, retrying what the broker lets us retry.

    Raises :class:`Deposed` when another writer fenced this one,
    :class:`_Aborted` after aborting a transaction the broker will not
    commit, and :class:`RetryBudgetExceeded` past ``deadline``.
    """
    started = time.monotonic()
    while True:
        try:
            producer.commit_transaction(WAIT_LOG_S)
            if time.monotonic() - started > WAIT_LOG_S:
                log.warning(
                    "Kafka committed the waiting dead letters after %.1fs",
                    time.monotonic() - started,
                )
            return
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err.code() in _FENCED:
                raise _fenced(topic) from exc
            if time.monotonic() > deadline:
                raise RetryBudgetExceeded(
                    f"dead-letter delivery to {topic!r} failed within LB_KAFKA_RETRY_S: {err.str()}"
                ) from exc
            if err.fatal() or not (err.retriable() or err.txn_requires_abort()):
                raise ServiceError(
                    f"dead-letter delivery to {topic!r} failed: {err.str()}"
                ) from exc
            log.warning(
                "waiting for Kafka to commit dead letters (%.0fs so far): %s",
                time.monotonic() - started,
                err.str(),
            )
            if err.txn_requires_abort():
                _abort(producer, deadline, topic)
                raise _Aborted from exc


def _abort(producer: Producer, deadline: float, topic: str) -> None:
    while True:
        try:
            producer.abort_transaction(WAIT_LOG_S)
            return
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err.code() in _FENCED:
                raise _fenced(topic) from exc
            if err.fatal() or not err.retriable() or time.monotonic() > deadline:
                raise RetryBudgetExceeded(
                    f"aborting a dead-letter transaction on {topic!r} failed: {err.str()}"
                ) from exc


class _DeadLetterPartition(StatelessSinkPartition[CheckedBatch]):
    """A worker's letters: a :class:`_Writer` per source partition, made when first needed."""

    def __init__(
        self,
        open_writer: Callable[[int], _Writer],
        partitions: int,
        fence: Callable[[], int] | None = None,
    ) -> None:
        self._open_writer = open_writer
        self._partitions = partitions
        self._fence = fence
        self._writers: dict[int, _Writer] = {}
        self._pool: ThreadPoolExecutor | None = None

    def write_batch(self, items: Sequence[CheckedBatch]) -> None:
        """Commit every batch's letters; Kafka down past ``LB_KAFKA_RETRY_S`` ends the job."""
        try:
            self._write(items)
        except RetryBudgetExceeded as exc:
            give_up(exc)
        except Deposed as exc:
            step_down(exc)

    def _write(self, items: Sequence[CheckedBatch]) -> None:
        letters: dict[int, list[DeadLetter]] = {}
        for batch in items:  # a partition's letters in order, whatever batches they came in
            if batch.dead:
                letters.setdefault(batch.partition, []).extend(batch.dead)
        if not letters:
            return
        if self._fence is not None:
            self._fence()  # a deposed deployment writes no letter (raises Deposed)
        if len(letters) == 1:
            written = [self._write_partition(next(iter(letters.items())))]
        else:  # one commit round trip for all partitions, not one after another
            if self._pool is None:
                self._pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="lb-dlq")
            written = list(self._pool.map(self._write_partition, letters.items()))
        outcomes.add_dead_letters([letter.code for fresh in written for letter in fresh])

    def _write_partition(self, item: tuple[int, list[DeadLetter]]) -> list[DeadLetter]:
        partition, letters = item
        writer = self._writers.get(partition)
        if writer is None:
            writer = self._writers[partition] = self._open_writer(partition)
        return writer.write(letters, self._partitions)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for writer in self._writers.values():
            writer.producer.flush(10)


class DeadLetterSink(DynamicSink[CheckedBatch]):
    """Writes each batch's dead letters; see the module docstring for the guarantee."""

    def __init__(
        self,
        config: Mapping[str, str],
        dlq_topic: str,
        source_topic: str,
        delivery_timeout_s: float = 300.0,
        fence: Callable[[], int] | None = None,
        namespace: str = "lb",
    ) -> None:
        """``fence``: the lease's epoch check (``flows.lease``); a deposed deployment stops.

        ``namespace`` names the transactional ids: deployments of one namespace
        fence each other's dead-letter writers; other namespaces are left alone.
        """
        self._config = dict(config)
        self._fence = fence
        self._topic = dlq_topic
        self._source = source_topic
        self._timeout_s = delivery_timeout_s
        self._namespace = namespace

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DeadLetterPartition:
        partitions = len(topic_partitions(self._config, self._topic))
        source_partitions = len(topic_partitions(self._config, self._source))
        if partitions < source_partitions:
            log.warning(
                "%s has %d partitions for %d source partitions: dead letters of several "
                "source partitions share one, which makes reading its tail at start slower",
                self._topic,
                partitions,
                source_partitions,
            )
        return _DeadLetterPartition(
            lambda p: self._open_writer(p, partitions), partitions, self._fence
        )

    def _open_writer(self, source_partition: int, partitions: int) -> _Writer:
        """Fence earlier writers of the partition, then read where its letters end."""
        producer = transactional_producer(
            self._config, transactional_id(self._namespace, self._topic, source_partition)
        )
        _init(producer, self._timeout_s, self._topic)
        done = last_letter(
            self._config,
            self._topic,
            source_partition % partitions,
            self._source,
            source_partition,
            self._timeout_s,
        )
        return _Writer(producer, done, self._timeout_s, self._topic)


def transactional_producer(config: Mapping[str, str], txn_id: str) -> Producer:
    """A dead-letter producer with transactional id ``txn_id`` (not yet initialised)."""
    return Producer(
        {
            **config,
            "transactional.id": txn_id,
            "acks": "all",
            "linger.ms": 5,
            # The broker aborts a transaction left open this long (e.g. by a
            # process that died mid-batch); it bounds each delivery attempt too.
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 60_000,
            "error_cb": ErrorLog(
                f"dead-letter producer {txn_id}", counted=hooks.kafka_error, logger=log
            ),
            "log_level": 3,
            "logger": QUIET_KAFKA_LOGGER,
        }
    )


def check_transactions(
    config: Mapping[str, str], namespace: str, dlq_topic: str, timeout_s: float
) -> None:
    """Start (and drop) one transactional producer before the flow runs.

    The broker creates its transaction log on first use, which takes seconds;
    done here, the first dead letter does not wait for it, and a principal
    that may not use transactional ids (Kafka ACLs) is told at start, in one
    line, instead of at the first dead letter.
    """
    producer = transactional_producer(config, f"{transactional_id(namespace, dlq_topic, 0)}.check")
    try:
        _init(producer, timeout_s, dlq_topic)
    except RetryBudgetExceeded as exc:
        raise ServiceError(str(exc)) from exc
    finally:
        producer.flush(0)


def _init(producer: Producer, timeout_s: float, topic: str) -> None:
    """``init_transactions`` (which fences earlier writers), retried through outages."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.init_transactions(min(30.0, timeout_s))
            return
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err.fatal() or not err.retriable() or time.monotonic() > deadline:
                raise RetryBudgetExceeded(
                    f"cannot start a transactional dead-letter producer for {topic!r}"
                    f" (Kafka ACLs must allow transactional ids lb-dlq.*): {err.str()}"
                ) from exc
            log.warning("waiting for Kafka to start a dead-letter transaction: %s", err.str())
