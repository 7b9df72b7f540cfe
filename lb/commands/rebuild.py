"""``lb rebuild``: replay the topic from its earliest offsets into fresh keys, then swap.

Steps: drop any leftover staging namespace (``<LB_NAMESPACE>~rebuild``); run
the same dataflow with ``until_end=True`` into that namespace, with no recovery
store (a rebuild always starts from the beginning) and without writing dead
letters (the live job already did); then swap each board group atomically
over the live keys (:mod:`sinks.namespace_swap`). Stop the live job first: a
job still writing the live keys during the swap would lose its writes since
the rebuild's end offsets. Restarted afterwards, it resumes from its recovery
store and skips what the rebuild already applied (offset watermarks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from config.clients import redis_client
from config.settings import Settings
from lb.commands.run import add_scaling_flags, launch
from lb.progress_bar import Bar
from sinks.namespace_swap import drop_namespace, swap_namespace
from telemetry import derive, scrape, server

FLOW_ID = "rebuild"


def staging_namespace(live: str) -> str:
    """Where a rebuild writes before the swap."""
    return f"{live}~rebuild"


def _records_in_topic(settings: Settings) -> int:
    """Records the rebuild replays: every partition's end minus its start offset."""
    from confluent_kafka import Consumer, TopicPartition

    from config.clients import QUIET_KAFKA_LOGGER
    from sources.kafka_source import topic_partitions

    config = settings.kafka_config()
    consumer = Consumer({**config, "group.id": "lb-rebuild-size", "logger": QUIET_KAFKA_LOGGER})
    try:
        total = 0
        for partition in topic_partitions(config, settings.topic):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(settings.topic, partition), timeout=10
            )
            total += max(0, high - low)
        return total
    finally:
        consumer.close()


def _show_progress(bar: Bar, settings: Settings, staging: str) -> None:
    """Records replayed so far: the total minus what the rebuild's processes still lag."""
    if not bar.active:
        return
    lag = 0
    seen = 0
    for entry in server.registered(settings.state_dir, "job"):
        if entry.get("namespace") != staging:
            continue
        found = scrape.samples(entry["address"])
        if found is not None:
            lag += int(derive.total(found, "lb_consumer_lag_records"))
            seen += len(found.get("lb_consumer_lag_records", {}))
    if seen:
        total = bar.total or 0
        bar.advance_to(max(0, total - lag), f"lag {lag:,}")


def _rebuild(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    staging = staging_namespace(settings.namespace)
    args.no_recovery = True
    call = f"build(until_end=True, namespace={json.dumps(staging)}, dead_letters=False)"
    if args.dry_run:  # prints the commands; touches nothing
        return launch(args, f"flows.scoreboard:{call}", FLOW_ID)
    client = redis_client(settings)
    started = time.monotonic()
    dropped = drop_namespace(client, staging)
    # Sizing the replay asks Kafka: only worth it when a bar is drawn (stderr is a terminal).
    bar = Bar("rebuild", _records_in_topic(settings) if sys.stderr.isatty() else None)
    try:
        code = launch(
            args,
            f"flows.scoreboard:{call}",
            FLOW_ID,
            watch=lambda: _show_progress(bar, settings, staging),
        )
        if code == 0 and bar.total is not None:
            bar.advance_to(bar.total, "done")
    finally:
        bar.close()
    if code != 0:
        return code
    swapped = swap_namespace(client, staging, settings.namespace)
    print(
        json.dumps(
            {
                "namespace": settings.namespace,
                "groups": len(swapped),
                "keys": sum(swapped.values()),
                "dropped_leftovers": dropped,
                "seconds": round(time.monotonic() - started, 2),
            }
        )
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb rebuild``."""
    rebuild = subparsers.add_parser(
        "rebuild",
        help="replay Kafka into fresh keys and swap them in atomically (stop lb run first)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_scaling_flags(rebuild)
    rebuild.set_defaults(handler=_rebuild)
