"""``lb produce``: write generated, signed score events to the score-events topic.

The edge of the load generator: it reads the settings and the clock (the
default start time, the pacing), creates the topic if needed and hands the
generator's records to an idempotent producer, each with the Kafka timestamp
the generator intended, so a run with the same ``--seed`` and ``--start-ts``
writes the same records and the job judges them the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TextIO

from config.clients import game_catalog, probe_kafka, quiet_kafka_extra
from config.settings import Settings
from domain.errors import ConfigError, ServiceError
from domain.games import GameConfig
from domain.signing import parse_keyring
from lb.argtypes import non_negative_float, non_negative_int, positive_float, positive_int, ratio
from lb.progress_bar import Bar
from producer.loadgen import EXPECTED_VALUES, MAX_PLAYERS, LoadConfig, LoadGenerator
from producer.score_producer import ScoreProducer, ensure_topic
from schemas.codec import ScoreEventCodec

#: Timestamp spacing when producing as fast as possible (``--rate 0``).
DEFAULT_TS_RATE = 100_000.0
#: Kafka is the source of truth (Redis is rebuilt from it), so a topic this
#: command creates keeps its records forever; existing topics are not changed.
TOPIC_CONFIG = {"retention.ms": "-1"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PROGRESS_INTERVAL_S = 0.25
_FLUSH_TIMEOUT_S = 120.0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``produce``."""
    parser = subparsers.add_parser(
        "produce",
        help="write generated signed score events (and chosen bad records) to Kafka",
        description="Generate a deterministic stream of signed score events and produce it "
        "to LB_TOPIC (created if missing). Prints a JSON summary with counts by expected "
        "outcome: ok, duplicate, or the dead-letter code the job must assign.",
    )
    parser.add_argument("--count", type=non_negative_int, default=10_000, help="records to write")
    parser.add_argument(
        "--rate",
        type=non_negative_float,
        default=0.0,
        help="records per second to pace at (0 = as fast as possible)",
    )
    parser.add_argument(
        "--ts-rate",
        type=positive_float,
        default=None,
        help="records per second of event time for the timestamps (default: --rate, or "
        f"{DEFAULT_TS_RATE:g} when --rate is 0)",
    )
    parser.add_argument(
        "--players",
        type=positive_int,
        default=100_000,
        help=f"distinct players (<= {MAX_PLAYERS})",
    )
    parser.add_argument("--games", default="g1", help="comma-separated game ids (default g1)")
    parser.add_argument(
        "--zipf", type=non_negative_float, default=1.1, help="Zipf exponent of player activity"
    )
    parser.add_argument(
        "--dist",
        choices=("lognormal", "uniform"),
        default="lognormal",
        help="distribution of the scores",
    )
    parser.add_argument(
        "--max-score",
        type=positive_int,
        default=None,
        help="highest valid score generated (default: the lowest max_score of the games "
        "in LB_GAMES, 10000000 with the built-in defaults; higher is refused)",
    )
    parser.add_argument("--dup-ratio", type=ratio, default=0.0, help="exact re-sends")
    parser.add_argument("--bad-ratio", type=ratio, default=0.0, help="dead-letter records")
    parser.add_argument("--retract-ratio", type=ratio, default=0.0, help="RETRACT events")
    parser.add_argument(
        "--unknown-games",
        default="",
        help="comma-separated game ids the job does not know (enables UNKNOWN_GAME records)",
    )
    parser.add_argument(
        "--future-skew-s",
        type=non_negative_int,
        default=None,
        help="the job's allowed future skew; FUTURE records exceed it (default: the "
        "largest future_skew_seconds of the games in LB_GAMES, 300 with the built-in defaults)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: the start time in ms)"
    )
    parser.add_argument(
        "--partitions", type=positive_int, default=8, help="partitions if the topic is created"
    )
    parser.add_argument(
        "--start-ts",
        default=None,
        help="event time of the first record: ISO 8601 (naive = UTC) or epoch ms (default: now)",
    )
    parser.add_argument(
        "--metadata",
        default=None,
        help="metadata every valid SCORE event carries, written as schema v2 (default: none, v1); "
        "at most the metadata_max_bytes of every game of --games",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Produce ``--count`` records; JSON summary on stdout, progress on stderr."""
    settings = Settings.from_env()
    start_ms = _start_ms(args.start_ts)
    config = _load_config(args, settings, start_ms)
    keyring = parse_keyring(settings.hmac_keys.reveal())
    generator = LoadGenerator(config, keyring, ScoreEventCodec.from_registry())
    if settings.uses_dev_keys and not args.quiet:
        print(
            "lb produce: LB_HMAC_KEYS is unset: signing with the insecure built-in development "
            "key dev1; the job accepts these events only while its LB_HMAC_KEYS is unset too "
            "or lists dev1",
            file=sys.stderr,
        )

    probe_kafka(settings)  # an unreachable broker: one line in seconds
    topic = ensure_topic(
        settings.kafka_bootstrap,
        settings.topic,
        args.partitions,
        quiet_kafka_extra(settings),
        TOPIC_CONFIG,
    )
    if topic.warning and not args.quiet:
        print(f"lb produce: {topic.warning}", file=sys.stderr)

    producer = ScoreProducer(settings.kafka_bootstrap, settings.topic, quiet_kafka_extra(settings))
    expected, seconds, error = _send(args, generator, producer)
    summary = {
        "topic": topic.name,
        "partitions": topic.partitions,
        "topic_created": topic.created,
        "produced": producer.produced,
        "delivered": producer.delivered,
        "failed": producer.failed,
        "seconds": round(seconds, 3),
        "rate": round(producer.produced / seconds) if seconds > 0 else None,
        "seed": config.seed,
        "start_ms": start_ms,
        "expected": {name: expected[name] for name in EXPECTED_VALUES if expected[name]},
    }
    if error is not None:
        summary["error"] = error
    print(json.dumps(summary))
    if error is not None:
        raise ServiceError(error)
    return 0


def _load_config(args: argparse.Namespace, settings: Settings, start_ms: int) -> LoadConfig:
    """What to generate: the flags, checked against the games' rules in LB_GAMES."""
    rules = _game_rules(settings, _ids(args.games), _ids(args.unknown_games))
    lowest = min(rule.max_score for rule in rules.values())
    if args.max_score is not None and args.max_score > lowest:
        raise ConfigError(
            f"--max-score {args.max_score} is above the max_score {lowest} a game of --games "
            "has in LB_GAMES: those events would be dead-lettered BOUNDS"
        )
    skew_ms = max(rule.future_skew_ms for rule in rules.values())
    if args.metadata is not None:
        try:
            size = len(args.metadata.encode())
        except UnicodeEncodeError:
            raise ConfigError("--metadata is not valid UTF-8 text") from None
        limit = min(rule.metadata_max_bytes for rule in rules.values())
        if size > limit:
            raise ConfigError(
                f"--metadata is {size} UTF-8 bytes, above the metadata_max_bytes {limit} a game "
                "of --games has: those events would be dead-lettered METADATA_TOO_LARGE"
            )
    return LoadConfig(
        start_ms=start_ms,
        rate=args.ts_rate or args.rate or DEFAULT_TS_RATE,
        seed=start_ms if args.seed is None else args.seed,
        players=args.players,
        zipf_s=args.zipf,
        games=_ids(args.games),
        score_dist=args.dist,
        max_score=lowest if args.max_score is None else args.max_score,
        job_max_score=max(rule.max_score for rule in rules.values()),
        retract_ratio=args.retract_ratio,
        dup_ratio=args.dup_ratio,
        bad_ratio=args.bad_ratio,
        unknown_games=_ids(args.unknown_games),
        future_skew_ms=skew_ms if args.future_skew_s is None else args.future_skew_s * 1000,
        metadata=args.metadata,
    )


def _send(
    args: argparse.Namespace, generator: LoadGenerator, producer: ScoreProducer
) -> tuple[Counter[str], float, str | None]:
    """Produce the records at ``--rate``: expected outcomes, seconds, a delivery error."""
    expected: Counter[str] = Counter()
    show_progress = not args.quiet and sys.stderr.isatty()
    progress = _Progress(sys.stderr if show_progress else None, args.count)
    started = time.monotonic()
    error: str | None = None
    with producer:
        # Check the clock every few ms of target time, not per record.
        check_every = max(1, int(args.rate / 200)) if args.rate else 1024
        for index, record in enumerate(generator.records(args.count)):
            producer.produce_record(record.key, record.value, record.timestamp_ms)
            expected[record.expected] += 1
            if index % check_every == 0:
                if args.rate:
                    due = started + (index + 1) / args.rate
                    # poll() returns early once it served a delivery report: loop.
                    while (ahead := due - time.monotonic()) > 0:
                        producer.poll(ahead)
                progress.update(time.monotonic() - started, producer)
        try:
            producer.flush(_FLUSH_TIMEOUT_S)
        except ServiceError as exc:
            error = str(exc)
    seconds = time.monotonic() - started
    progress.finish(seconds, producer)
    return expected, seconds, error


def _game_rules(
    settings: Settings, games: tuple[str, ...], unknown: tuple[str, ...]
) -> dict[str, GameConfig]:
    """The job's rules for each of ``games`` (LB_GAMES), so the expected outcomes hold.

    A game the job does not serve would have every event dead-lettered, and a
    game passed as unknown that it does serve would have none: both are refused.
    """
    try:
        catalog = game_catalog(settings)
    except ConfigError as exc:
        raise ConfigError(f"LB_GAMES: {exc}") from exc
    rules = {game: catalog.lookup(game) for game in games}
    unserved = [game for game, rule in rules.items() if rule is None]
    if unserved:
        raise ConfigError(
            f"--games {','.join(unserved)}: not served by LB_GAMES (no table, no [default]); "
            "every event would be dead-lettered UNKNOWN_GAME (use --unknown-games for that)"
        )
    served = [game for game in unknown if catalog.lookup(game) is not None]
    if served:
        by = (
            "LB_GAMES"
            if settings.games_file is not None
            else "the built-in defaults, which serve every game while LB_GAMES is unset"
        )
        raise ConfigError(
            f"--unknown-games {','.join(served)}: served by {by}; UNKNOWN_GAME records need "
            "an LB_GAMES file without a [default] table"
        )
    return {game: rule for game, rule in rules.items() if rule is not None}


class _Progress:
    """A rich progress bar on stderr (a terminal only): produced of ``--count``, rate, ETA."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self._bar = Bar("produce", total, stream=stream, enabled=stream is not None)
        self._last = -_PROGRESS_INTERVAL_S

    def update(self, elapsed: float, producer: ScoreProducer) -> None:
        if elapsed - self._last < _PROGRESS_INTERVAL_S:
            return
        self._last = elapsed
        self._bar.advance_to(producer.produced, self._note(producer))

    def finish(self, elapsed: float, producer: ScoreProducer) -> None:
        self._bar.advance_to(producer.produced, self._note(producer))
        self._bar.close()

    @staticmethod
    def _note(producer: ScoreProducer) -> str:
        return f"{producer.delivered:,} delivered, {producer.failed:,} failed"


def _start_ms(raw: str | None) -> int:
    """Epoch ms of ``--start-ts``; the wall clock only when it is not given."""
    if raw is None:
        return (datetime.now(UTC) - _EPOCH) // timedelta(milliseconds=1)
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise ConfigError(f"--start-ts {raw!r} is neither ISO 8601 nor epoch ms") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)  # exact, unlike float seconds


def _ids(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())
