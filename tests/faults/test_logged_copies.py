"""The feeder's reconciliation: a record the producer wrote twice joins the oracle's list.

A broker restart can make librdkafka's idempotent producer send a batch the
broker already wrote again (an epoch bump), so the fault tests read the topic
back before they compute the oracle. This checks that reading on real Kafka
with a copy produced on purpose: the copy takes its original's expected
outcome and goes where the log has it, and a record nobody planned fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from tests.faults.harness import add_logged_copies
from tests.integration.streams import Planned


def _produce(bootstrap: str, topic: str, records: list[Planned]) -> list[tuple[int, int]]:
    """Produce in order to partition 0; the (partition, offset) each landed at."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    landed: list[tuple[int, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        landed.append((msg.partition(), msg.offset()))

    for rec in records:
        producer.produce(
            topic,
            key=rec.key,
            value=rec.value,
            timestamp=rec.record_ts,
            partition=0,
            on_delivery=delivered,
        )
        producer.flush(30)
    return landed


def _planned(n: int) -> list[Planned]:
    kinds = ["ok", "bad_signature", "ok", "duplicate", "ok"]
    return [
        Planned(f"p{i}".encode(), f"value {i}".encode(), 1_790_000_000_000 + i, kinds[i % 5])
        for i in range(n)
    ]


def test_a_copy_in_the_log_joins_the_records_after_its_original(
    kafka_bootstrap: str, topic: str
) -> None:
    records = _planned(5)
    for rec, (partition, offset) in zip(
        records, _produce(kafka_bootstrap, topic, records), strict=True
    ):
        rec.partition, rec.offset = partition, offset
    # the resend of records 1 and 2 after an epoch bump, then the stream goes on
    tail = _planned(7)[5:]
    landed = _produce(kafka_bootstrap, topic, [records[1], records[2], *tail])
    for rec, (partition, offset) in zip(tail, landed[2:], strict=True):
        rec.partition, rec.offset = partition, offset
    records.extend(tail)

    assert add_logged_copies(kafka_bootstrap, topic, records) == 2

    assert [(r.key, r.partition, r.offset) for r in records] == [
        (b"p0", 0, 0),
        (b"p1", 0, 1),
        (b"p2", 0, 2),
        (b"p3", 0, 3),
        (b"p4", 0, 4),
        (b"p1", 0, 5),
        (b"p2", 0, 6),
        (b"p5", 0, 7),
        (b"p6", 0, 8),
    ]
    assert [r.expected for r in records if r.key == b"p1"] == ["bad_signature"] * 2
    assert add_logged_copies(kafka_bootstrap, topic, records) == 0


def test_a_record_no_one_planned_fails_the_reconciliation(kafka_bootstrap: str, topic: str) -> None:
    records = _planned(2)
    for rec, (partition, offset) in zip(
        records, _produce(kafka_bootstrap, topic, records), strict=True
    ):
        rec.partition, rec.offset = partition, offset
    _produce(kafka_bootstrap, topic, [Planned(b"x", b"stranger", 1_790_000_000_000, "ok")])

    with pytest.raises(AssertionError, match=r"a record at \(0, 2\) that no one planned"):
        add_logged_copies(kafka_bootstrap, topic, records)
