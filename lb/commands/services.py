"""``lb up``, ``lb down``, ``lb status``, ``lb monitoring``: local services and their watchers.

``lb status`` also lists every running job and API process registered under
``<LB_STATE_DIR>/run/`` with its metrics address, and for a job its
readiness, per-partition lag and rates (two scrapes ``--interval`` apart).
``lb up --monitoring`` (or ``lb monitoring up``) adds Debian's Prometheus on
loopback, scraping those processes with the shipped alert rules.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import time
from collections.abc import Callable
from typing import Any

from config.clients import probe_kafka, probe_redis
from config.settings import Settings
from domain.errors import LeaderboardError
from infra import replicated, services
from telemetry import prometheus, scrape

#: How long ``lb status`` waits for a service that ``lb up`` did not record.
STATUS_TIMEOUT_S = 2.0


def _dirs() -> services.ServiceDirs:
    settings = Settings.from_env()
    return services.ServiceDirs(state_dir=settings.state_dir, cache_dir=settings.cache_dir)


def _answers(probe: Callable[[], object]) -> bool:
    try:
        probe()
    except LeaderboardError:
        return False
    return True


def configured_status(settings: Settings) -> dict[str, object]:
    """The services the settings point at, when ``lb up`` recorded none in this state dir.

    With a custom ``LB_STATE_DIR`` (or services started elsewhere) the settings
    still name a broker and a Redis; saying "nothing recorded" while both
    answer would send a user to ``lb up`` for nothing.
    """
    return {
        "kafka": settings.kafka_bootstrap,
        "kafka_up": _answers(lambda: probe_kafka(settings, timeout_s=STATUS_TIMEOUT_S)),
        "redis": settings.redis_display_url(),
        "redis_up": _answers(lambda: probe_redis(settings, timeout_s=STATUS_TIMEOUT_S)),
        "recorded": False,
    }


def _loopback(text: str) -> str:
    """``--replicated-from``: an IPv4 loopback address with room for the nine servers."""
    try:
        first = ipaddress.IPv4Address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from exc
    last = int(first) + replicated.BROKERS + replicated.REDIS_NODES - 1
    lowest, highest = ipaddress.IPv4Address("127.0.0.2"), ipaddress.IPv4Address("127.255.255.254")
    if not lowest <= first or last > int(highest):
        raise argparse.ArgumentTypeError(
            f"{text} is not a loopback address with 8 more after it (127.0.0.2 to 127.255.255.246)"
        )
    return str(first)


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    dirs = _dirs()
    if not args.secure_only:
        services.up(
            dirs,
            kafka_port=args.kafka_port,
            redis_port=args.redis_port,
            cluster=args.cluster,
            cluster_base_port=args.cluster_port,
            replicated_from=args.replicated_from if args.replicated else None,
        )
    if args.secure or args.secure_only:
        services.up_secure(
            dirs, kafka_port=args.secure_kafka_port, redis_port=args.secure_redis_port
        )
    doc = services.status(dirs)
    if args.monitoring:
        settings = Settings.from_env()
        doc.update(prometheus.up(settings.state_dir, settings.prometheus_port))
    doc["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(doc) if args.json else _human(doc))
    return 0


def _down(args: argparse.Namespace) -> int:
    dirs = _dirs()
    if args.secure:
        stopped = services.down_secure(dirs)
    else:
        stopped = (["prometheus"] if prometheus.down(dirs.state_dir) else []) + services.down(dirs)
    print(
        json.dumps({"stopped": stopped})
        if args.json
        else f"stopped: {', '.join(stopped) or 'nothing'}"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    dirs = services.ServiceDirs(state_dir=settings.state_dir, cache_dir=settings.cache_dir)
    doc: dict[str, object] = services.status(dirs) or configured_status(settings)
    if not args.json and doc.get("recorded") is False:
        print(f"no services recorded in {settings.state_dir}; the configured ones:")
    healthy = all(v for k, v in doc.items() if k.endswith("_up"))
    doc.update(prometheus.status(settings.state_dir))
    doc.update(scrape.processes(settings.state_dir, args.interval))
    print(json.dumps(doc) if args.json else _human(doc))
    return 0 if healthy and doc else 1


def _human(doc: dict[str, object]) -> str:
    if not doc:
        return "no services recorded (run `lb up`)"
    lines = []
    for name in ("kafka", "redis", "redis_cluster"):
        if name in doc:
            state = "up" if doc.get(f"{name}_up") else "DOWN"
            where = doc[name]
            shown = ", ".join(map(str, where)) if isinstance(where, list) else where
            lines.append(f"{name:14} {state:5} {shown}")
    if "replicated" in doc:
        lines += _replicated_lines(doc["replicated"])  # type: ignore[arg-type]
    if "secure" in doc:
        lines += _secure_lines(doc["secure"])  # type: ignore[arg-type]
    if "prometheus" in doc:
        state = "up" if doc.get("prometheus_up") else "DOWN"
        lines.append(f"{'prometheus':14} {state:5} {doc['prometheus']}")
    lines += [_job_line(job) for job in doc.get("jobs", [])]  # type: ignore[attr-defined]
    for api in doc.get("api", []):  # type: ignore[attr-defined]
        state = "ready" if api.get("ready") else "NOT READY"
        lines.append(f"{'api':14} {state:5} {api['url']} (metrics {api['metrics']})")
    if "seconds" in doc:
        lines.append(f"ready in {doc['seconds']}s")
    return "\n".join(lines)


def _replicated_lines(doc: dict[str, Any]) -> list[str]:
    """The replicated set: brokers, each partition's leader and ISR, Redis roles."""
    brokers = doc["brokers"]
    live = sum(1 for b in brokers if b["up"])
    lines = [
        f"{'replicated':14} {'up' if doc['up'] else 'DOWN':5} kafka {doc['bootstrap']} "
        f"({live}/{len(brokers)} brokers up); redis cluster {doc['redis_url']}",
    ]
    for topic, parts in doc["topics"].items():
        shown = "; ".join(
            f"p{p['partition']} leader {p['leader']} isr {','.join(map(str, p['isr']))}"
            for p in parts
        )
        lines.append(f"  {topic}: {shown}")
    for node in doc["redis_nodes"]:
        if not node.get("role"):
            role = "DOWN"
        elif node["role"] == "master":
            role = f"master ({node['replicas']} replica(s))"
        else:
            role = f"replica of {node['master']} (link {node['link']})"
        lines.append(f"  redis {node['address']} {role}")
    lines.append(
        f"  use: LB_KAFKA_BOOTSTRAP={doc['bootstrap']} LB_REDIS_URL={doc['redis_url']} "
        "LB_REDIS_CLUSTER=1"
    )
    return lines


def _secure_lines(doc: dict[str, Any]) -> list[str]:
    """The secured pair, and how to point every ``lb`` command at it (no password shown)."""
    kafka_state = "up" if doc["kafka_up"] else "DOWN"
    redis_state = "up" if doc["redis_up"] else "DOWN"
    return [
        f"{'secure kafka':14} {kafka_state:5} {doc['kafka']} (SASL_SSL, SCRAM-SHA-512)",
        f"{'secure redis':14} {redis_state:5} {doc['redis']} (TLS, ACL user)",
        f"  settings (passwords inside, mode 0600): {doc['env_file']}",
        *(f"    {key}={value}" for key, value in doc["settings"].items()),
        f"  use: set -a; . {doc['env_file']}; set +a",
    ]


def _job_line(job: dict[str, object]) -> str:
    """One line per job process, answering "is it keeping up?"."""
    where = f"job {job.get('process')} pid {job.get('pid')}"
    if not job.get("up"):
        return f"{where:14} DOWN  {job.get('metrics')}"
    rates: dict[str, float] = job.get("rates") or {}  # type: ignore[assignment]
    state = "ready" if job.get("ready") else "NOT READY"
    if job.get("lease") == "standby":  # waits on purpose: another deployment writes
        state = "standby"
    return (
        f"{where:14} {state:5} {job.get('topic')}: lag {job.get('lag_total', 0):,} records, "
        f"{rates.get('records_per_s', 0.0):,.0f} records/s "
        f"({'keeping up' if job.get('keeping_up') else 'FALLING BEHIND'}); {job.get('metrics')}"
    )


def _monitoring(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if args.action == "up":
        doc = prometheus.up(settings.state_dir, settings.prometheus_port)
    elif args.action == "down":
        doc = {"stopped": ["prometheus"] if prometheus.down(settings.state_dir) else []}
    else:
        doc = prometheus.status(settings.state_dir) or {"prometheus": None}
    print(json.dumps(doc) if args.json else _monitoring_line(args.action, doc))
    return 0 if args.action != "status" or doc.get("prometheus_up") else 1


def _monitoring_line(action: str, doc: dict[str, object]) -> str:
    """``lb monitoring``'s answer as one sentence (``--json`` keeps the document)."""
    if action == "down":
        return "prometheus: stopped" if doc.get("stopped") else "prometheus: was not running"
    if not doc.get("prometheus"):
        return "prometheus: not running (start it with lb monitoring up or lb up --monitoring)"
    state = "up" if doc.get("prometheus_up") else "DOWN (started here, not answering)"
    return f"prometheus: {state} at {doc['prometheus']}"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``up``, ``down`` and ``status``."""
    up = subparsers.add_parser("up", help="start the local Kafka broker and Redis (idempotent)")
    up.add_argument("--cluster", action="store_true", help="also start a 3-master Redis Cluster")
    up.add_argument(
        "--replicated",
        action="store_true",
        help="also start 3 KRaft brokers (replication factor 3, min.insync.replicas 2) and a "
        "Redis Cluster of 3 masters with a replica each, each on a loopback address of its own",
    )
    up.add_argument(
        "--replicated-from",
        default=replicated.DEFAULT_FIRST_ADDRESS,
        type=_loopback,
        metavar="ADDRESS",
        help="first loopback address of --replicated: brokers on it and the next two, Redis "
        f"on the six after (default {replicated.DEFAULT_FIRST_ADDRESS})",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="also start a Kafka broker on SASL_SSL (SCRAM-SHA-512) and a Redis on TLS with an "
        "ACL user, on ports of their own, with a local CA; prints the settings file to source",
    )
    up.add_argument(
        "--secure-only",
        action="store_true",
        help="start only the secured Kafka and Redis of --secure",
    )
    up.add_argument(
        "--secure-kafka-port",
        type=int,
        default=None,
        help="the secured Kafka's port, its controller on the next (default: as recorded, 29292)",
    )
    up.add_argument(
        "--secure-redis-port",
        type=int,
        default=None,
        help="the secured Redis' TLS port (default: as recorded, 26479)",
    )
    up.add_argument(
        "--kafka-port", type=int, default=None, help="Kafka's port (default: as recorded, 29092)"
    )
    up.add_argument(
        "--redis-port", type=int, default=None, help="Redis' port (default: as recorded, 26379)"
    )
    up.add_argument(
        "--cluster-port",
        type=int,
        default=None,
        help="first of the 3 cluster ports (default: as recorded, 17101)",
    )
    up.add_argument(
        "--monitoring",
        action="store_true",
        help="also start Prometheus on 127.0.0.1:LB_PROMETHEUS_PORT (default 29090), "
        "scraping every registered job and API process, with the alert rules",
    )
    up.add_argument("--json", action="store_true", help="print a JSON document")
    up.set_defaults(handler=_up)

    down = subparsers.add_parser("down", help="stop every local service lb up started")
    down.add_argument(
        "--secure", action="store_true", help="stop only the secured Kafka and Redis of --secure"
    )
    down.add_argument("--json", action="store_true", help="print a JSON document")
    down.set_defaults(handler=_down)

    status = subparsers.add_parser(
        "status", help="where the services listen and whether they answer"
    )
    status.add_argument("--json", action="store_true", help="print a JSON document")
    status.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between the two scrapes of each job that measure its rates (default 1)",
    )
    status.set_defaults(handler=_status)

    monitoring = subparsers.add_parser(
        "monitoring",
        help="Prometheus on loopback scraping the registered job and API processes",
        description=prometheus.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    monitoring.add_argument(
        "action",
        choices=("up", "down", "status"),
        help="up: start Prometheus (idempotent); down: stop it; status: where it listens",
    )
    monitoring.add_argument("--json", action="store_true", help="print a JSON document")
    monitoring.set_defaults(handler=_monitoring)
