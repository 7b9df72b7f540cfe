"""``lb backfill``: replay part of the log into staging keys and cut them over, beside ``lb run``.

Without ``--from``/``--until`` the chosen games (``--game G``, repeatable;
default every game) are replayed from the start of the log, the replay
catches up with the live head, and each board group is replaced atomically,
watermarks included: the running job carries on from them, so no update is
lost or applied twice and readers never see a partial board. Use it after a
scoring fix, or when a game's configuration gained a window (restart
``lb run`` with the new LB_GAMES first, then backfill the game).

With ``--from``/``--until`` (an ISO time, found with Kafka's offsets-for-times,
or ``partition:offset,...``; ``--until`` is exclusive) only that range is
replayed and only boards the live keys lack are moved in (an expired window
rebuilt for an audit, kept ``--keep-hours``); nothing the live job maintains
is touched. ``--topic T`` replays another topic with the same schema.

Other games' keys are never touched. Progress (rate, records left, ETA) goes
to stderr; ``--dry-run`` prints the plan and writes nothing; Ctrl-C or SIGTERM
drops the staging keys and leaves the live keys of every group not yet cut
over untouched. A rerun after a crash first drops what the crashed run left.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import time
from types import FrameType

from adapters.kafka import LogReader
from config.clients import game_catalog, probe_kafka, quiet_kafka_config, redis_client
from config.heap import tune_for_streaming
from config.settings import Settings
from domain.backfill_plan import BackfillPlan, Bound, parse_bound, staging_namespace
from domain.errors import ConfigError, QueryError
from domain.windows import window_from_id
from jobs.backfill import Backfill, make_plan, plan_notes
from jobs.replay_workers import replay_tools
from sinks.teams.store import resync_teams


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_backfill(
    settings: Settings,
    *,
    topic: str,
    games: tuple[str, ...],
    start: Bound | None,
    until: Bound | None,
    windows: tuple[str, ...] = (),
    dry_run: bool,
    quiet: bool,
    keep_hours: float,
    strict_for_s: float,
    kind: str,
    key: tuple[str, ...],
    processes: int = 1,
) -> int:
    """Shared by ``lb backfill`` and ``lb rebuild``: plan, print or run, print the report."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise ConfigError(f"--processes must be within 1..{MAX_PROCESSES}, not {processes}")
    catalog = game_catalog(settings)
    for game in games:
        if catalog.lookup(game) is None:
            raise ConfigError(
                f"unknown game {game!r}: it is not in LB_GAMES and there is no [default] table"
            )
    client = None
    if not dry_run:
        client = redis_client(settings)
        client.ping()
    probe_kafka(settings)
    kafka = quiet_kafka_config(settings)
    offsets = LogReader(kafka, topic)
    plan: BackfillPlan = make_plan(offsets, topic, games, start, until, windows)
    for note in plan_notes(plan, start, until):
        print(f"lb {kind}: {note}", file=sys.stderr)
    if dry_run:
        print(json.dumps(plan.describe()))
        return 0
    replayer, log, validator = replay_tools(settings, topic, client)
    job = Backfill(
        replayer,
        log,
        validator,
        plan,
        live=settings.namespace,
        staging=staging_namespace(settings.namespace, kind, key),
        dedupe_horizon_ms=settings.dedupe_horizon_s * 1000,
        cache_players=settings.cache_players,
        now_s=time.time,
        keep_s=int(keep_hours * 3600),
        strict_for_s=strict_for_s,
        progress=None if quiet else sys.stderr,
        what=f"lb {kind}",
        workers=processes,
        tools=functools.partial(replay_tools, settings, topic),
        memory_members=settings.replay_memory_members,
    )
    signal.signal(signal.SIGTERM, _interrupt)  # drops the staging keys like Ctrl-C
    tune_for_streaming()
    report = job.run()
    # Boards moved in wholesale: the team boards follow them (sinks.teams.store).
    assert client is not None
    recomputed = resync_teams(client, settings.namespace, catalog.team_games())
    if recomputed and not quiet:
        print(f"lb {kind}: team boards recomputed on {recomputed} window(s)", file=sys.stderr)
    print(json.dumps({"namespace": settings.namespace, **report.as_dict()}))
    if report.relaxed and not quiet:
        print(
            f"lb {kind}: {len(report.relaxed)} group(s) cut over behind the live job "
            "(cut_over_relaxed): its log says 'Redis holds less of ... re-reading' for them; "
            "that is lb run catching up from the new watermarks, expected, not an incident",
            file=sys.stderr,
        )
    return 0


#: Replay processes at most (each holds a Kafka consumer and a Redis connection).
MAX_PROCESSES = 64


def _backfill(args: argparse.Namespace) -> int:
    start = None if args.start is None else parse_bound(args.start, "--from")
    until = None if args.until is None else parse_bound(args.until, "--until")
    if args.keep_hours <= 0:
        raise ConfigError(f"--keep-hours must be positive, not {args.keep_hours}")
    windows = tuple(args.window or ())
    if windows and start is None and until is None:
        raise ConfigError("--window needs --from or --until (a full replay replaces whole groups)")
    for window in windows:
        try:
            window_from_id(window)
        except QueryError as exc:
            raise ConfigError(f"--window: {exc}") from None
    settings = Settings.from_env()
    topic = args.topic or settings.topic
    games = tuple(sorted(set(args.game or ())))
    return run_backfill(
        settings,
        topic=topic,
        games=games,
        start=start,
        until=until,
        windows=windows,
        dry_run=args.dry_run,
        quiet=args.quiet,
        keep_hours=args.keep_hours,
        strict_for_s=args.strict_for,
        kind="backfill",
        key=(topic, *games, args.start or "", args.until or ""),
        processes=args.processes,
    )


def add_common_flags(parser: argparse.ArgumentParser, *, dry_run: bool = True) -> None:
    """Flags ``lb backfill`` and ``lb rebuild`` share (``lb rebuild`` has its own --dry-run)."""
    if dry_run:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="print the plan (games, ranges, record counts) as JSON and write nothing",
        )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--strict-for",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to wait at the live head for a cut-over the live job notices at once; "
        "then a group is cut over behind the live job, or at equal watermarks on an idle "
        "partition (default 5)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb backfill``."""
    backfill = subparsers.add_parser(
        "backfill",
        help="replay part of the log into staging keys and cut them over, beside lb run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    backfill.add_argument(
        "--game", action="append", metavar="G", help="only this game (repeatable; default: all)"
    )
    backfill.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        help="ISO time (UTC unless a zone is given) or partition:offset,... (inclusive)",
    )
    backfill.add_argument(
        "--until", metavar="WHEN", help="ISO time or partition:offset,... (exclusive)"
    )
    backfill.add_argument(
        "--window",
        action="append",
        metavar="W",
        help="with --from/--until: move only this board (alltime, daily:2026-05-04, "
        "weekly:2026-W18; repeatable)",
    )
    backfill.add_argument("--topic", metavar="T", help="replay this topic (default LB_TOPIC)")
    backfill.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="replay the planned range with N processes, each a share of the partitions "
        "(default 1; the live job shares the machine)",
    )
    backfill.add_argument(
        "--keep-hours",
        type=float,
        default=24.0,
        metavar="H",
        help="with --from/--until: keep moved-in windowed boards at least this long (default 24)",
    )
    add_common_flags(backfill)
    backfill.set_defaults(handler=_backfill)
