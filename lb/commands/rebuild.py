"""``lb rebuild``: replay the whole log into fresh keys and swap them in, beside ``lb run``.

The default needs no stop: every game is replayed from the start of the log
into a staging namespace (``<LB_NAMESPACE>~rebuild``), the replay catches up
with the live head, and each board group is cut over atomically with its
watermarks (:mod:`jobs.backfill`, the same mechanism as ``lb backfill``). The
running job notices the new watermarks and carries on from them: no update is
lost or applied twice, and a reader sees the old group or the new one.
``--processes N`` replays the partitions with N processes (each a share of
whole partitions) up to the end offsets seen at the start; the rest, to the
live head, is followed by one.

``--offline`` keeps the old way: stop ``lb run`` first; the replay runs as
Bytewax processes (``--processes``/``--workers``) up to the end offsets seen
at its start, without a recovery store and without writing dead letters, then
every group is swapped (:mod:`jobs.namespace_swap`). Restarted afterwards,
the job resumes from its recovery store and skips what the rebuild applied.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from adapters.kafka import records_in_topic
from config.clients import game_catalog, redis_client
from config.settings import Settings
from domain.backfill_plan import staging_namespace as _staging
from domain.backoff import Backoff
from domain.errors import ConfigError
from domain.signing import parse_keyring
from jobs.namespace_swap import drop_namespace, swap_namespace
from jobs.profile_replay import rebuild_profiles, topic_exists, validator_of
from lb.commands.backfill import add_common_flags, run_backfill
from lb.commands.run import add_scaling_flags, launch
from lb.progress_bar import Bar
from sinks.teams.store import resync_teams
from telemetry import derive, scrape, server

FLOW_ID = "rebuild"


def staging_namespace(live: str) -> str:
    """Where a rebuild writes before the swap."""
    return _staging(live, "rebuild")


def _records_in_topic(settings: Settings) -> int:
    """Records the rebuild replays: every partition's end minus its start offset."""
    return records_in_topic(settings.kafka_config(), settings.topic, timeout_s=10)


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


def _offline(args: argparse.Namespace) -> int:
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
    resync_teams(client, settings.namespace, game_catalog(settings).team_games())
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


def _rebuild(args: argparse.Namespace) -> int:
    if args.offline:
        return _offline(args)
    if args.workers != 1:
        raise ConfigError("--workers applies to --offline only (stop lb run first)")
    settings = Settings.from_env()
    code = run_backfill(
        settings,
        topic=settings.topic,
        games=(),
        start=None,
        until=None,
        dry_run=args.dry_run,
        quiet=args.quiet,
        keep_hours=24.0,
        strict_for_s=args.strict_for,
        kind="rebuild",
        key=(),
        processes=args.processes,
    )
    if code == 0 and not args.dry_run:
        _rebuild_profiles(settings)
    return code


def _rebuild_profiles(settings: Settings) -> None:
    """The profile buckets, replayed from the profiles topic and swapped in bucket by bucket."""
    config = settings.kafka_config()
    if not topic_exists(config, settings.profiles_topic):
        return
    records = rebuild_profiles(
        redis_client(settings),
        config,
        settings.profiles_topic,
        settings.namespace,
        validator_of(parse_keyring(settings.hmac_keys.reveal())),
        Backoff(budget_s=settings.redis_retry_s),
    )
    print(
        f"lb rebuild: profiles: {records:,} records of {settings.profiles_topic} replayed "
        "and swapped in",
        file=sys.stderr,
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb rebuild``."""
    rebuild = subparsers.add_parser(
        "rebuild",
        help="replay Kafka into fresh keys and cut them over atomically, beside lb run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_scaling_flags(
        rebuild,
        "print the plan (games, partitions, offset ranges, record counts) as JSON and write "
        "nothing; with --offline: the bytewax.run commands",
    )
    rebuild.add_argument(
        "--offline",
        action="store_true",
        help="the old way: Bytewax processes, swap at the end; stop lb run first",
    )
    add_common_flags(rebuild, dry_run=False)
    rebuild.set_defaults(handler=_rebuild)
