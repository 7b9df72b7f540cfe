"""Writing score records to Kafka, and making sure their topic exists.

Delivery guarantee: at-least-once into the log, without producer-made
duplicates. The producer is idempotent (``enable.idempotence=true``,
``acks=all``), so the broker drops the copies its own retries would create;
duplicates can still arise from an application re-sending a record after a
restart, which is why the job deduplicates by eventId. :meth:`ScoreProducer.flush`
is the commit point: it returns only when every record produced so far is
acknowledged by all in-sync replicas, and raises otherwise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicCollection

# NewTopic's documented home is confluent_kafka.admin; its stubs do not re-export it.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from domain.errors import ConfigError, ServiceError
from domain.events import ScoreEvent
from schemas.codec import ScoreEventCodec

#: Settings the delivery guarantee rests on; ``extra_config`` may not weaken them.
REQUIRED_CONFIG: Mapping[str, str] = {"enable.idempotence": "true", "acks": "all"}
_EQUIVALENT = {"acks": {"all", "-1"}, "enable.idempotence": {"true", "True", "1"}}

#: Throughput defaults, overridable through ``extra_config``: wait up to 10 ms to
#: fill 1 MB / 10K-message batches, compress them with lz4 (cheap, and score
#: events compress well), and buffer up to 500K records so a short broker
#: hiccup does not stall a 100K events/s producer.
THROUGHPUT_CONFIG: Mapping[str, str] = {
    "linger.ms": "10",
    "batch.size": "1000000",
    "batch.num.messages": "10000",
    "compression.type": "lz4",
    "queue.buffering.max.messages": "500000",
    "queue.buffering.max.kbytes": "1048576",
}

#: Told one record's outcome: ``None`` once acknowledged, else the error's name and text.
DeliveryReport = Callable[[str | None], None]

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_POLL_EVERY = 1024  # serve delivery reports this often (they also free queue space)
_BUFFER_FULL_WAIT_S = 0.05


def _client_config(bootstrap: str, extra_config: Mapping[str, str]) -> dict[str, Any]:
    """Explicit bootstrap plus passthrough properties (security.protocol, sasl.*, ...)."""
    if not bootstrap:
        raise ConfigError("Kafka bootstrap servers must not be empty")
    other = extra_config.get("bootstrap.servers")
    if other is not None and other != bootstrap:
        raise ConfigError("extra_config sets bootstrap.servers differently from bootstrap")
    return {**dict(extra_config), "bootstrap.servers": bootstrap}


def _error_text(exc: BaseException) -> str:
    """A KafkaException's error name and reason (never message payloads or config)."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return f"{type(exc).__name__}: {exc}"


class ScoreProducer:
    """An idempotent producer of score records to one topic.

    Not thread-safe (counters are plain ints); use one per thread. As a
    context manager it flushes on a normal exit, and on an exceptional exit
    makes a short best-effort flush without masking the original error.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        extra_config: Mapping[str, str] | None = None,
        *,
        close_timeout_s: float = 30.0,
    ) -> None:
        """Validate the configuration and create the client (no I/O until the first send)."""
        extra = dict(extra_config or {})
        if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise ConfigError(f"invalid Kafka topic name {topic!r}")
        for name, required in REQUIRED_CONFIG.items():
            if name in extra and str(extra[name]) not in _EQUIVALENT[name]:
                raise ConfigError(
                    f"{name}={extra[name]!r} would weaken delivery; the producer needs {required}"
                )
        config: dict[str, Any] = {
            **THROUGHPUT_CONFIG,
            **_client_config(bootstrap, extra),
            **REQUIRED_CONFIG,
            "error_cb": self._on_error,
        }
        try:
            self._producer = Producer(config)
        except KafkaException as exc:
            raise ConfigError(f"invalid producer configuration: {_error_text(exc)}") from exc
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid producer configuration: {exc}") from exc
        self.topic = topic
        self._close_timeout_s = close_timeout_s
        self._produced = 0
        self._delivered = 0
        self._failed = 0
        self._first_failure: str | None = None
        self._fatal: str | None = None

    # -- counters -------------------------------------------------------------

    @property
    def produced(self) -> int:
        """Records handed to the client so far."""
        return self._produced

    @property
    def delivered(self) -> int:
        """Records acknowledged by the broker (acks=all)."""
        return self._delivered

    @property
    def failed(self) -> int:
        """Records whose delivery finally failed (after the client's own retries)."""
        return self._failed

    @property
    def pending(self) -> int:
        """Records neither acknowledged nor failed yet."""
        return self._produced - self._delivered - self._failed

    # -- producing ------------------------------------------------------------

    def produce_record(
        self,
        key: bytes,
        value: bytes | None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryReport | None = None,
    ) -> None:
        """Queue one record; ``timestamp_ms`` None lets Kafka stamp it (CreateTime = now).

        A ``None`` value is a tombstone (a compacted topic then forgets the key).

        A full local queue is not an error: the call serves delivery reports
        (which frees space) and retries, so a producer faster than the broker
        is throttled rather than failed. Records that finally fail are counted
        and surface in :meth:`flush`. ``on_delivery`` is also told this
        record's outcome (``None`` or the error), from whichever thread polls.
        """
        if self._fatal is not None:
            raise ServiceError(f"Kafka producer for {self.topic!r} is unusable: {self._fatal}")
        producer = self._producer
        report = self._on_delivery if on_delivery is None else self._reporting(on_delivery)
        while True:
            try:
                if timestamp_ms is None:
                    producer.produce(self.topic, value, key, on_delivery=report)
                else:
                    producer.produce(
                        self.topic,
                        value,
                        key,
                        on_delivery=report,
                        timestamp=timestamp_ms,
                    )
                break
            except BufferError:
                producer.poll(_BUFFER_FULL_WAIT_S)
            except KafkaException as exc:
                raise ServiceError(f"cannot produce to {self.topic!r}: {_error_text(exc)}") from exc
        self._produced += 1
        if self._produced % _POLL_EVERY == 0:
            producer.poll(0)

    def produce_event(
        self,
        event: ScoreEvent,
        codec: ScoreEventCodec,
        timestamp_ms: int | None = None,
        schema_id: int | None = None,
        on_delivery: DeliveryReport | None = None,
    ) -> None:
        """Encode and queue one event, keyed by its playerId (one player, one partition).

        Without ``schema_id``: v1 for an event without metadata, v2 for one with it.
        """
        self.produce_record(
            event.player_id.encode(), codec.encode(event, schema_id), timestamp_ms, on_delivery
        )

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports, waiting up to ``timeout_s`` (also a polite way to pace)."""
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> None:
        """Wait until every queued record is delivered; ``ServiceError`` if any is not.

        Raises when records remain after ``timeout_s`` or when any delivery
        failed since this producer was created (failures are not forgotten by a
        later successful flush).
        """
        remaining = self._producer.flush(timeout_s)
        if self._fatal is not None:
            raise ServiceError(f"Kafka producer for {self.topic!r} is unusable: {self._fatal}")
        if remaining or self._failed:
            detail = f"; first failure: {self._first_failure}" if self._first_failure else ""
            raise ServiceError(
                f"producing to {self.topic!r}: {self._failed} of {self._produced} records failed "
                f"and {remaining} are still queued after a {timeout_s:g} s flush{detail}"
            )

    def __enter__(self) -> ScoreProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.flush(self._close_timeout_s)
        else:
            # Keep what can be delivered quickly; never hide the original error.
            self._producer.flush(min(self._close_timeout_s, 5.0))

    # -- callbacks (run inside poll/flush) ------------------------------------------

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self._delivered += 1
            return
        self._failed += 1
        if self._first_failure is None:
            self._first_failure = f"{error.name()}: {error.str()}"

    def _reporting(self, also: DeliveryReport) -> Callable[[KafkaError | None, Message], None]:
        def report(error: KafkaError | None, message: Message) -> None:
            self._on_delivery(error, message)
            also(None if error is None else f"{error.name()}: {error.str()}")

        return report

    def _on_error(self, error: KafkaError) -> None:
        # Transient errors (a broker restarting) are retried by librdkafka; a
        # fatal one (e.g. the idempotent sequence broken) ends this producer.
        if error.fatal() and self._fatal is None:
            self._fatal = f"{error.name()}: {error.str()}"


@dataclass(frozen=True, slots=True)
class TopicState:
    """What :func:`ensure_topic` found or made."""

    name: str
    partitions: int
    created: bool
    #: Set when the topic already existed with fewer partitions than asked for.
    #: Not fixed automatically: adding partitions remaps keys to partitions,
    #: which would break per-player ordering for records already written.
    warning: str | None = None


def ensure_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    extra_config: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    *,
    replication_factor: int = -1,
    timeout_s: float = 30.0,
) -> TopicState:
    """Create ``topic`` with ``partitions`` partitions unless it exists (idempotent).

    ``config`` holds topic-level settings (``retention.ms``, ...); the
    replication factor defaults to the broker's ``default.replication.factor``.
    An existing topic is left untouched whatever its settings; a partition
    count below the request is reported in :attr:`TopicState.warning`.
    """
    if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise ConfigError(f"invalid Kafka topic name {topic!r}")
    if partitions < 1:
        raise ConfigError(f"a topic needs at least one partition, got {partitions}")
    if replication_factor == 0 or replication_factor < -1:
        raise ConfigError("replication factor must be -1 (broker default) or >= 1")
    try:
        admin = AdminClient(_client_config(bootstrap, extra_config or {}))
    except KafkaException as exc:
        raise ConfigError(f"invalid admin client configuration: {_error_text(exc)}") from exc
    new_topic = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={str(k): str(v) for k, v in (config or {}).items()},
    )
    created = False
    try:
        futures = admin.create_topics(
            [new_topic], operation_timeout=timeout_s, request_timeout=timeout_s
        )
        futures[topic].result(timeout=timeout_s)
        created = True
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise ServiceError(f"cannot create topic {topic!r}: {_error_text(exc)}") from exc
    except FutureTimeoutError as exc:
        raise ServiceError(f"creating topic {topic!r} timed out after {timeout_s:g} s") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot create topic {topic!r}: {exc}") from exc
    actual = _partition_count(admin, topic, timeout_s)
    warning = None
    if actual < partitions:
        warning = (
            f"topic {topic!r} already exists with {actual} partitions, fewer than the "
            f"{partitions} asked for; left as is"
        )
    return TopicState(topic, actual, created, warning)


def _partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int:
    """Partitions of ``topic``, retried briefly: a new topic's metadata can lag its creation."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
            description = futures[topic].result(timeout=timeout_s)
            return len(description.partitions)
        except (KafkaException, FutureTimeoutError) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if not retriable or time.monotonic() >= deadline:
                raise ServiceError(f"cannot describe topic {topic!r}: {_error_text(exc)}") from exc
        time.sleep(0.2)
