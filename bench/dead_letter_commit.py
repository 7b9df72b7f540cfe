"""What exactly-once dead letters cost: a batch's letters committed in transactions.

The dead-letter sink (``sinks/dead_letters.py``) sends each source partition's
letters through a transactional producer of its own and commits once a batch,
so a standby can fence a deposed writer. This measures, in one run and
alternating, the time to get one batch's letters acknowledged that way and
with one idempotent producer and a flush (what a sink without fencing would
do), for a batch with letters in ``--partitions`` source partitions.

Usage (the services up: ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.dead_letter_commit                    # 4 and 16 partitions
    .venv/bin/python -m bench.dead_letter_commit --partitions 8 --batches 100

Progress on stderr, a JSON summary on stdout; writes no doc section. Its
topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from confluent_kafka import Producer

from bench.common import Scratch, base_settings, emit, log, machine, run_id
from domain.records import CheckedBatch, DeadLetter, SourceRecord
from sinks.dead_letters import DeadLetterSink, letter_headers

#: Letters per source partition in each batch.
LETTERS = 5


def _batch(topic: str, partition: int, first: int) -> CheckedBatch:
    dead = tuple(
        DeadLetter(topic, partition, SourceRecord(o, 1, b"k", b"v" * 100), "SCHEMA", "bench")
        for o in range(first, first + LETTERS)
    )
    return CheckedBatch(topic, partition, (), dead, first + LETTERS - 1)


def measure(scratch: Scratch, partitions: int, batches: int) -> dict[str, Any]:
    """Milliseconds per batch, transactional and idempotent, alternating batch by batch."""
    config = scratch.settings.kafka_config()
    topic = scratch.topic(f"bench-dlq-{run_id()}", partitions)
    dlq = scratch.topic(f"{topic}.dlq", partitions)
    sink = DeadLetterSink(config, dlq, topic, 60.0, namespace=topic).build("dlq", 0, 1)
    sink.write_batch([_batch(topic, p, 0) for p in range(partitions)])  # open the writers
    plain = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    txn: list[float] = []
    idem: list[float] = []
    for i in range(batches):
        items = [_batch(topic, p, LETTERS * (i + 1)) for p in range(partitions)]
        started = time.perf_counter()
        sink.write_batch(items)
        txn.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        for item in items:
            for letter in item.dead:
                headers: list[tuple[str, str | bytes | None]] = [*letter_headers(letter)]
                plain.produce(
                    dlq,
                    value=letter.record.value,
                    key=letter.record.key,
                    partition=item.partition,
                    headers=headers,
                )
        if plain.flush(60) != 0:
            raise RuntimeError("the idempotent producer left letters undelivered")
        idem.append((time.perf_counter() - started) * 1000)
    sink.close()
    return {
        "partitions": partitions,
        "batches": batches,
        "letters_per_partition": LETTERS,
        "transactional_ms": round(statistics.median(txn), 2),
        "idempotent_ms": round(statistics.median(idem), 2),
        "ratio": round(statistics.median(txn) / statistics.median(idem), 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure each partition count; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.dead_letter_commit", description=__doc__)
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args(argv)
    if min(args.partitions) <= 0 or args.batches <= 0:
        parser.error("--partitions and --batches must be positive")
    rows = []
    with Scratch(base_settings(), "bench-dlq") as scratch:
        for partitions in args.partitions:
            row = measure(scratch, partitions, args.batches)
            log(f"{partitions} partitions: {row}")
            rows.append(row)
    emit({"machine": machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
