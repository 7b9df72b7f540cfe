"""Dead letters exactly once when a second writer takes a source partition over.

Two dead-letter sinks of one namespace play an old deployment (paused or cut
off, a letter in flight in an open transaction) and the standby that replaced
it. Against the real broker: the standby's start fences the old writer, whose
open transaction is aborted and whose next commit stops it (:class:`Deposed`);
the standby skips what was committed before and writes the rest; readers see
every letter once.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from domain.errors import Deposed
from domain.records import CheckedBatch, DeadLetter, SourceRecord
from sinks.dead_letters import DeadLetterSink, _commit, letter_headers
from tests.faults.harness import read_letters
from tests.integration.streams import read_dead_letters
from tests.poll import poll

pytestmark = pytest.mark.timeout(240)


def _batch(topic: str, partition: int, offsets: list[int]) -> CheckedBatch:
    dead = tuple(
        DeadLetter(
            topic, partition, SourceRecord(o, 1_700_000_000_000 + o, b"k", b"v"), "SCHEMA", "bad"
        )
        for o in offsets
    )
    return CheckedBatch(topic, partition, (), dead, offsets[-1])


def _sink(bootstrap: str, topic: str, namespace: str) -> DeadLetterSink:
    return DeadLetterSink(
        {"bootstrap.servers": bootstrap}, f"{topic}.dlq", topic, 30.0, namespace=namespace
    )


def test_a_standby_fences_the_old_writer_and_each_letter_lands_once(
    kafka_bootstrap: str, topic: str, namespace: str
) -> None:
    old = _sink(kafka_bootstrap, topic, namespace).build("dlq", 0, 1)
    old._write([_batch(topic, 0, [1, 3]), _batch(topic, 2, [4])])
    # The old deployment has letter 5 in flight: produced, its transaction not committed.
    zombie = old._writers[0]
    zombie.producer.begin_transaction()
    letter = _batch(topic, 0, [5]).dead[0]
    zombie.producer.produce(f"{topic}.dlq", b"v", b"k", 0, headers=letter_headers(letter))
    assert zombie.producer.flush(30) == 0  # on the broker, uncommitted

    new = _sink(kafka_bootstrap, topic, namespace).build("dlq", 0, 1)
    # The standby re-reads from the source watermarks: 3 again, then 5 and 7.
    new._write([_batch(topic, 0, [3, 5, 7]), _batch(topic, 2, [4, 6])])
    assert new._writers[0].done == 7 and new._writers[2].done == 6

    # Its commit after the takeover is refused, with the line the log shows
    # whichever call meets the fence ...
    with pytest.raises(Deposed, match=r"^deposed: another deployment fenced"):
        _commit(zombie.producer, time.monotonic() + 30, f"{topic}.dlq")
    with pytest.raises(Deposed, match=r"^deposed: "):  # ... and so is any later letter
        old._write([_batch(topic, 0, [9])])

    letters = read_letters(kafka_bootstrap, f"{topic}.dlq")
    assert Counter(letters) == Counter(
        {(0, 1): 1, (0, 3): 1, (0, 5): 1, (0, 7): 1, (2, 4): 1, (2, 6): 1}
    )


def test_another_namespace_is_not_fenced(kafka_bootstrap: str, topic: str, namespace: str) -> None:
    """Transactional ids carry the namespace: a rebuild into another one leaves the live job be."""
    live = _sink(kafka_bootstrap, topic, namespace).build("dlq", 0, 1)
    live._write([_batch(topic, 1, [2])])
    other = _sink(kafka_bootstrap, topic, f"{namespace}-rebuild").build("dlq", 0, 1)
    other._write([_batch(topic, 1, [2, 8])])  # 2 is in the topic already
    live._write([_batch(topic, 1, [9])])  # still writing: not fenced
    assert Counter(read_letters(kafka_bootstrap, f"{topic}.dlq")) == Counter(
        {(1, 2): 1, (1, 8): 1, (1, 9): 1}
    )


def test_fewer_dead_letter_partitions_widen_the_tail_read(
    kafka_bootstrap: str, namespace: str, request: pytest.FixtureRequest
) -> None:
    """One dead-letter partition for four source partitions: source partition 1's newest
    letter lies behind 300 of partition 0's, beyond the first window of the tail read."""
    name = f"fence-{namespace}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created = admin.create_topics(
        [NewTopic(name, num_partitions=4), NewTopic(f"{name}.dlq", num_partitions=1)]
    )
    for future in created.values():
        future.result(timeout=30)
    poll(
        "the new topics in the metadata",
        lambda: all(
            admin.list_topics(t, timeout=10).topics[t].error is None for t in (name, f"{name}.dlq")
        ),
        30,
    )
    try:
        first = _sink(kafka_bootstrap, name, namespace).build("dlq", 0, 1)
        first._write([_batch(name, 1, [10, 11])])
        first._write([_batch(name, 0, list(range(300)))])
        again = _sink(kafka_bootstrap, name, namespace).build("dlq", 0, 1)
        again._write([_batch(name, 1, [10, 11, 12])])
        assert again._writers[1].done == 12
        letters = read_dead_letters(kafka_bootstrap, f"{name}.dlq")
        assert len(letters) == 303
    finally:
        for future in admin.delete_topics([name, f"{name}.dlq"]).values():
            future.result(timeout=30)
