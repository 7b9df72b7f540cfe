"""An idle partition's consumer asks the broker rarely, and still gets the next record.

Each Kafka partition the job reads has a consumer of its own, so how often an
idle one fetches multiplies by the partition count: at a 10 ms fetch wait a job
of 8 partitions kept the broker a third of a core busy while nothing arrived.
The count comes from librdkafka's own statistics of requests sent, on a real
broker; no timing is asserted (a slower machine only sends fewer).
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from sources.kafka_source import partition_consumer_config

IDLE_S = 4.0


def _fetches(stats: str) -> int:
    """Fetch requests sent so far, over every broker the consumer talks to."""
    brokers = json.loads(stats).get("brokers", {})
    return sum(int(b.get("req", {}).get("Fetch", 0)) for b in brokers.values())


def test_an_idle_partition_fetches_a_few_times_a_second_and_then_reads_the_next_record(
    kafka_bootstrap: str, topic: str
) -> None:
    seen: list[str] = []
    errors: list[KafkaError] = []
    config = partition_consumer_config({"bootstrap.servers": kafka_bootstrap}, topic, errors.append)
    consumer = Consumer({**config, "statistics.interval.ms": 500, "stats_cb": seen.append})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        started = time.monotonic()
        while time.monotonic() - started < IDLE_S:
            assert consumer.consume(num_messages=10, timeout=0.1) == []
        idle_s = time.monotonic() - started
        assert seen, "librdkafka reported no statistics"
        idle_fetches = _fetches(seen[-1])
        # 500 ms per fetch: about 2 a second, plus the first few while the
        # consumer finds its leader; at 10 ms it was about 100 a second.
        assert 1 <= idle_fetches <= 3 * idle_s + 5, (idle_fetches, idle_s)

        with_producer = Producer({"bootstrap.servers": kafka_bootstrap})
        with_producer.produce(topic, b"after the quiet", partition=0, key=b"p1")
        assert with_producer.flush(30) == 0
        got: list[Message] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = [m for m in consumer.consume(num_messages=10, timeout=0.2) if not m.error()]
        assert [m.value() for m in got] == [b"after the quiet"]
        assert errors == []
    finally:
        consumer.close()
