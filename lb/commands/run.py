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
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from config.clients import quiet_kafka_config, redis_client
from config.settings import Settings, child_environment, parse_addresses
from domain.errors import ConfigError, ServiceError
from domain.lease import LeaseState, Role, Timings, describe
from flows import lease, preflight
from flows.scoreboard import FLOW_ID
from lb import run_lock
from lb.argtypes import positive_int
from schemas.decode_verify import resolve_engine
from sinks.redis_lease import peek
from telemetry import derive, logs

RECOVERY_PARTITIONS = 4

#: How often ``launch`` calls its ``watch`` while the processes run.
WATCH_EVERY_S = 0.5


def ensure_dead_letter_topic(settings: Settings, partitions: int, topics: dict[str, int]) -> None:
    """Create ``LB_DLQ_TOPIC`` with the input's partition count when it is missing."""
    if settings.dlq_topic in topics:
        return
    admin = AdminClient(quiet_kafka_config(settings))
    future = admin.create_topics([NewTopic(settings.dlq_topic, num_partitions=partitions)])[
        settings.dlq_topic
    ]
    try:
        future.result(timeout=30)
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise ServiceError(f"cannot create {settings.dlq_topic!r}: {exc}") from exc


def ensure_recovery_store(settings: Settings, flow: str) -> str:
    """The recovery directory of (flow, topic), initialised on first use."""
    path = settings.recovery_dir(flow)
    if not path.exists() or not any(path.iterdir()):
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "bytewax.recovery", str(path), str(RECOVERY_PARTITIONS)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ServiceError(f"cannot initialise recovery store {path}: {done.stderr[-2000:]}")
    return str(path)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def bytewax_argv(
    import_str: str,
    recovery_dir: str | None,
    snapshot_s: int,
    workers: int,
    process_id: int | None = None,
    addresses: list[str] | None = None,
) -> list[str]:
    """The ``python -m bytewax.run`` command line for one process."""
    argv = [sys.executable, "-m", "bytewax.run", import_str]
    if recovery_dir is not None:
        argv += ["-r", recovery_dir, "-s", str(snapshot_s), "-b", "0"]
    else:
        argv += ["-s", str(snapshot_s)]
    if process_id is not None and addresses:
        argv += ["-i", str(process_id), "-a", ";".join(addresses)]
    if workers > 1 or process_id is None:
        argv += ["-w", str(workers)]
    return argv


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
        for argv in _commands(flow_call, recovery, settings, processes, args.workers):
            print(shlex.join(argv))
        return 0
    children: list[subprocess.Popen[bytes]] = []
    stopping = False
    spawning = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if spawning:
            return  # reaches every child once they are all started (below)
        if not children:
            # Asked to stop before the job started (still checking the services):
            # nothing runs yet, so stopping now is the clean stop (exit 0).
            raise SystemExit(0)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    topics = preflight.check_services(settings, need_dead_letter_topic=False)
    partitions = topics[settings.topic]
    if args.command == "run":  # the live job: one per topic and state directory
        lock = run_lock.hold(settings, flow)  # noqa: F841 - held until this process ends
    commands = _commands(flow_call, recovery, settings, processes, args.workers)
    # Another deployment writing the projection: said on the start line, or refused
    # (LB_STANDBY=refuse) before anything is created. A staging namespace has no lease.
    standby = _standby(settings, commands) if "namespace=" not in flow_call else ""
    ensure_dead_letter_topic(settings, partitions, topics)
    if recovery is not None:
        ensure_recovery_store(settings, flow)
    games = preflight.describe_games(config.catalog, settings.games_file)
    _announce(args, settings, (games, engine, partitions, processes), flow_call, standby)
    # A stop signal arriving while the children are being started waits until
    # they are all recorded, then reaches every one of them (none is orphaned).
    spawning = True
    env = _child_env(settings)
    for argv in commands:
        children.append(subprocess.Popen(argv, env=env))
    spawning = False
    if stopping:
        forward(signal.SIGTERM, None)
    while watch is not None and any(child.poll() is None for child in children):
        watch()
        time.sleep(WATCH_EVERY_S)
    codes = [child.wait() for child in children]
    if stopping:
        # A child still starting up when asked to stop ends by the signal itself.
        codes = [0 if code == -signal.SIGTERM else code for code in codes]
    return next((code for code in codes if code != 0), 0)


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


def _child_env(settings: Settings) -> dict[str, str] | None:
    """A cluster named by hand is one deployment on every host (``flows.lease``): say so."""
    if settings.process_id is None:
        return None
    cluster = ";".join(settings.addresses)
    return child_environment({"LB_ADDRESSES": cluster, "LB_PROCESS_ID": str(settings.process_id)})


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


def _commands(
    flow_call: str, recovery: str | None, settings: Settings, processes: int, workers: int
) -> list[list[str]]:
    """One ``bytewax.run`` command line per process (only this host's with ``--addresses``)."""
    if settings.process_id is not None:
        return [
            bytewax_argv(
                flow_call,
                recovery,
                settings.snapshot_interval_s,
                workers,
                settings.process_id,
                list(settings.addresses),
            )
        ]
    if processes == 1:
        return [bytewax_argv(flow_call, recovery, settings.snapshot_interval_s, workers)]
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(processes)]
    return [
        bytewax_argv(flow_call, recovery, settings.snapshot_interval_s, workers, i, addresses)
        for i in range(processes)
    ]


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
