"""``lb run``: a thin wrapper over ``python -m bytewax.run flows.scoreboard:build()``.

It checks the settings, the games (LB_GAMES) and the keys (LB_HMAC_KEYS)
first, then that Redis and Kafka answer and the input topic exists; only then
it creates the dead-letter topic with as many
partitions as the input (what makes dead letters exactly-once), initialises
the Bytewax recovery store for this topic and flow under ``LB_STATE_DIR``,
then execs Bytewax: with ``--processes N`` it starts N cooperating processes
(``-i 0..N-1 -a host:port;...``) on loopback, forwards SIGINT/SIGTERM to them
and waits. Every flag maps onto a ``bytewax.run`` flag; see ``--dry-run``.

One ``lb run`` per topic and state directory: a second one on the same
LB_TOPIC and LB_STATE_DIR is refused with a line naming the running one
(pid, since when, metrics URL), because both would share one recovery store.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace

from config.clients import redis_client
from config.settings import Settings, parse_addresses
from domain.errors import ConfigError
from domain.lease import LeaseState, Role, Timings, describe
from flows import lease, preflight
from flows.scoreboard import FLOW_ID
from infra.launch import (
    JobProcesses,
    child_env,
    ensure_dead_letter_topic,
    ensure_profile_topics,
    ensure_recovery_store,
    job_commands,
)
from lb import run_lock
from lb.argtypes import positive_int
from schemas.decode_verify import resolve_engine
from sinks.redis_lease import peek
from telemetry import derive, logs


def launch(
    args: argparse.Namespace,
    flow_call: str,
    flow: str,
    watch: Callable[[], None] | None = None,
) -> int:
    """Check, then start the Bytewax process(es) of ``flow_call`` and wait for them.

    Settings, games and keys are checked before anything else; ``--dry-run``
    stops there and prints the commands, touching no service and no file.
    Otherwise Redis and Kafka are asked once (a mistake costs seconds, not the
    retry budget) before the dead-letter topic and the recovery store are made.
    ``watch`` is called about twice a second while the processes run (a progress bar).
    """
    settings = Settings.from_env()
    config = preflight.job_config(settings)
    engine = resolve_engine(settings.decoder)
    # lb run alone joins a cluster of hosts (--addresses / LB_ADDRESSES); a
    # rebuild or backfill always runs its own processes on this host.
    if hasattr(args, "process_id"):
        settings = _cluster(args, settings)
    else:
        settings = replace(settings, addresses=(), process_id=None)
    processes = max(1, args.processes or 1)
    recovery = None if args.no_recovery else str(settings.recovery_dir(flow))
    if args.dry_run:
        for argv in job_commands(flow_call, recovery, settings, processes, args.workers):
            print(shlex.join(argv))
        return 0
    job = JobProcesses()
    job.catch_stop_signals()
    topics = preflight.check_services(settings, need_dead_letter_topic=False)
    partitions = topics[settings.topic]
    if args.command == "run":  # the live job: one per topic and state directory
        lock = run_lock.hold(settings, flow)  # noqa: F841 - held until this process ends
    commands = job_commands(flow_call, recovery, settings, processes, args.workers)
    # Another deployment writing the projection: said on the start line, or refused
    # (LB_STANDBY=refuse) before anything is created. A staging namespace has no lease.
    standby = _standby(settings, commands) if "namespace=" not in flow_call else ""
    ensure_dead_letter_topic(settings, partitions, topics)
    ensure_profile_topics(settings, partitions, topics)
    if recovery is not None:
        ensure_recovery_store(settings, flow)
    games = preflight.describe_games(config.catalog, settings.games_file)
    _announce(args, settings, (games, engine, partitions, processes), flow_call, standby)
    job.start(commands, child_env(settings))
    return job.wait(watch)


def _key_ids(settings: Settings) -> str:
    """The key ids the job accepts (never a secret)."""
    ids = ", ".join(part.split(":", 1)[0] for part in settings.hmac_keys.reveal().split(","))
    return f"{ids} (the built-in development key)" if settings.uses_dev_keys else ids


def _cluster(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings with ``--addresses``/``--process-id`` applied (they win over the env).

    ``--processes`` starts every process of a cluster on this host;
    ``--addresses`` joins one of a cluster spread over hosts: both at once is a
    mistake (one line, exit 2), as is an address list without this host's index.
    """
    addresses = settings.addresses
    if args.addresses is not None:
        addresses = parse_addresses(args.addresses)
    process_id = args.process_id if args.process_id is not None else settings.process_id
    if args.processes is not None and (addresses or args.process_id is not None):
        where = "--addresses" if args.addresses is not None else "LB_ADDRESSES"
        raise ConfigError(
            f"--processes and {where} both say how many processes run: --processes N starts "
            "all of them on this host, --addresses (with --process-id) one per host"
        )
    if args.process_id is not None and not addresses:
        raise ConfigError("--process-id needs --addresses (or LB_ADDRESSES): the cluster's hosts")
    if args.addresses is not None and process_id is None:
        raise ConfigError(
            "--addresses needs --process-id (or LB_PROCESS_ID): which of them this host runs"
        )
    if process_id is not None and not 0 <= process_id < len(addresses):
        which = "--process-id" if args.process_id is not None else "LB_PROCESS_ID"
        raise ConfigError(
            f"{which} {process_id} is out of range: the cluster has {len(addresses)} "
            f"process(es), so 0..{len(addresses) - 1}"
        )
    return replace(settings, addresses=addresses, process_id=process_id)


def _announce(
    args: argparse.Namespace,
    settings: Settings,
    shape: tuple[str, str, int, int],
    flow_call: str,
    standby: str,
) -> None:
    """The start line: what is read, where it goes, how many processes, any standby.

    ``shape``: the games served, the decode engine, the topic's partitions, processes.
    """
    games, engine, partitions, processes = shape
    start_line = (
        f"lb {args.command}: {settings.topic} ({partitions} partitions) -> "
        f"{settings.redis_display_url()} namespace {settings.namespace}; games: "
        f"{games}; dead letters -> {settings.dlq_topic}; signing keys: {_key_ids(settings)}; "
        f"{_shape(settings, processes)} x {args.workers} worker(s); "
        f"decode + verify: {engine}"
        + ("; until the end offsets seen now" if "until_end=True" in flow_call else "")
        + standby
    )
    if settings.log_format == "json":
        logs.configure("json")
        logging.getLogger("flows").info(start_line)
    else:
        print(start_line, file=sys.stderr, flush=True)


def _shape(settings: Settings, processes: int) -> str:
    if settings.process_id is None:
        return f"{processes} process(es)"
    cluster = ";".join(settings.addresses)
    return f"process {settings.process_id} of {len(settings.addresses)} ({cluster})"


def _standby(settings: Settings, commands: list[list[str]]) -> str:
    """The start line's word on another deployment already writing this projection."""
    addresses = derive.cluster_args(commands[0])
    me = lease.deployment(settings, addresses)
    client = redis_client(settings)
    try:
        holder = peek(client, settings.namespace, settings.topic)
    finally:
        client.close()
    if holder is None or holder[0].id == me.id:
        return ""
    other = LeaseState(Role.STANDBY, other=holder[0])
    timings = Timings(settings.takeover_s)
    if settings.standby == "refuse":
        raise ConfigError(
            describe(replace(other, role=Role.REFUSED), settings.topic, settings.namespace, timings)
        )
    return "; " + describe(other, settings.topic, settings.namespace, timings)


def _run(args: argparse.Namespace) -> int:
    call = "build(until_end=True)" if args.until_end else "build()"
    return launch(args, f"flows.scoreboard:{call}", FLOW_ID)


#: What ``--dry-run`` does for ``lb run``.
DRY_RUN_HELP = (
    "check the settings, print the bytewax.run commands and exit; contacts no service and "
    "creates nothing"
)


def add_scaling_flags(parser: argparse.ArgumentParser, dry_run_help: str = DRY_RUN_HELP) -> None:
    """Flags shared by ``lb run`` and ``lb rebuild`` (each says what its ``--dry-run`` prints)."""
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="cooperating processes on this host (-i/-a)",
    )
    parser.add_argument("--workers", type=positive_int, default=1, help="workers per process (-w)")
    parser.add_argument(
        "--no-recovery", action="store_true", help="run without a recovery store (start over)"
    )
    parser.add_argument("--dry-run", action="store_true", help=dry_run_help)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb run``."""
    run = subparsers.add_parser(
        "run",
        help="the streaming job (tails forever; Ctrl-C or SIGTERM stops it cleanly)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--until-end",
        action="store_true",
        help="process up to the end offsets seen at start, then exit 0",
    )
    add_scaling_flags(run)
    run.add_argument(
        "--addresses",
        default=None,
        help="every process of a cluster spread over hosts, 'host:port;host:port;...' (the same "
        "list on every host; LB_ADDRESSES); this host runs only --process-id's",
    )
    run.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="which of --addresses this host runs, 0-based (LB_PROCESS_ID)",
    )
    # None: not given, so --addresses / LB_ADDRESSES may say how many processes run.
    run.set_defaults(handler=_run, processes=None)
