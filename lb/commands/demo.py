"""``lb demo``: the whole pipeline on this machine, with the live top-10 on screen.

Brings the local services up, starts the streaming job (``lb run``), produces a
synthetic stream of signed events (Zipf players, log-normal scores, a few
duplicates and bad records) at a steady rate, and shows the all-time top-10
of the demo game with the job's rate, lag and dead letters: a live table
redrawn in place on a terminal, plain text every 10 s otherwise. Stops
by itself after ``--seconds`` (or on Ctrl-C) and stops the job cleanly.

It uses LB_TOPIC and LB_NAMESPACE like every command, so its boards add up
across runs (and with anything else produced there): give it its own, e.g.
``LB_TOPIC=demo2 LB_NAMESPACE=demo2 lb demo``, for a board of this run only.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from config.clients import game_catalog, redis_client
from config.settings import Settings
from domain.signing import parse_keyring
from infra import services
from lb import live_view
from producer.loadgen import LoadConfig, LoadGenerator
from producer.score_producer import ScoreProducer, ensure_topic
from readers.boards import BoardReader
from schemas.codec import ScoreEventCodec

GAME = "demo"


def _frame(
    reader: BoardReader,
    watcher: live_view.JobWatcher,
    topic: str,
    produced: int,
    started: float,
) -> live_view.Frame:
    """The all-time top-10 of the demo game and the job's rate, lag and dead letters."""
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    page = reader.top(GAME, "alltime", 10, 0, now_ms=now_ms)
    elapsed = time.monotonic() - started
    return live_view.frame(
        f"all-time top 10 of {GAME!r} after {elapsed:5.1f}s, {produced:,} events produced",
        page["entries"],
        watcher.look(topic),
    )


def _demo(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    dirs = services.ServiceDirs(state_dir=settings.state_dir, cache_dir=settings.cache_dir)
    print("starting Kafka and Redis ...", flush=True)
    services.up(dirs)
    settings = Settings.from_env()  # ports are now recorded
    catalog = game_catalog(settings)
    ensure_topic(
        settings.kafka_bootstrap, settings.topic, 8, settings.kafka_extra, {"retention.ms": "-1"}
    )
    print(
        f"topic {settings.topic}, namespace {settings.namespace}: boards add up across demo "
        "runs, so players of earlier runs may lead the top-10 (a fresh board: LB_TOPIC=demo2 "
        "LB_NAMESPACE=demo2 lb demo)",
        flush=True,
    )
    job = subprocess.Popen([sys.executable, "-m", "lb.cli", "run"])
    client = redis_client(settings)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    generator = LoadGenerator(
        LoadConfig(
            start_ms=now_ms,
            rate=args.rate,
            seed=now_ms,
            players=args.players,
            games=(GAME,),
            dup_ratio=0.01,
            bad_ratio=0.005,
        ),
        parse_keyring(settings.hmac_keys.reveal()),
        ScoreEventCodec.from_registry(),
    )
    reader = BoardReader(client, catalog, settings.namespace)
    watcher = live_view.JobWatcher(settings.state_dir)
    produced = 0

    def frames() -> Iterator[live_view.Frame]:
        nonlocal produced
        started = time.monotonic()
        next_look = started + 1.0
        with ScoreProducer(
            settings.kafka_bootstrap, settings.topic, settings.kafka_extra
        ) as producer:
            for record in generator.records(int(args.rate * args.seconds)):
                producer.produce_record(record.key, record.value, record.timestamp_ms)
                produced += 1
                due = started + produced / args.rate
                while (ahead := due - time.monotonic()) > 0:
                    producer.poll(ahead)
                if time.monotonic() >= next_look:
                    next_look += 1.0
                    yield _frame(reader, watcher, settings.topic, produced, started)
        yield _frame(reader, watcher, settings.topic, produced, started)

    try:
        live_view.show(frames())
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)
    print(f"\nproduced {produced:,} events; the job stopped with exit code {job.returncode}")
    print(f"read more: lb top {GAME} --window alltime --limit 10 --json")
    return 0 if job.returncode == 0 else 1


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb demo``."""
    demo = subparsers.add_parser(
        "demo",
        help="services + job + synthetic stream, printing the live top-10",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--seconds", type=float, default=30.0, help="how long to produce")
    demo.add_argument("--rate", type=float, default=2000.0, help="events per second")
    demo.add_argument("--players", type=int, default=50_000, help="distinct players (Zipf)")
    demo.set_defaults(handler=_demo)
