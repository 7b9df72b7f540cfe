"""``lb up``, ``lb down``, ``lb status``: the local Kafka broker and Redis."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from config.clients import probe_kafka, probe_redis
from config.settings import Settings
from domain.errors import LeaderboardError
from infra import services

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


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    doc = services.up(
        _dirs(),
        kafka_port=args.kafka_port,
        redis_port=args.redis_port,
        cluster=args.cluster,
        cluster_base_port=args.cluster_port,
    )
    doc["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(doc) if args.json else _human(doc))
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = services.down(_dirs())
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
    print(json.dumps(doc) if args.json else _human(doc))
    healthy = all(v for k, v in doc.items() if k.endswith("_up"))
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
    if "seconds" in doc:
        lines.append(f"ready in {doc['seconds']}s")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``up``, ``down`` and ``status``."""
    up = subparsers.add_parser("up", help="start the local Kafka broker and Redis (idempotent)")
    up.add_argument("--cluster", action="store_true", help="also start a 3-master Redis Cluster")
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
    up.add_argument("--json", action="store_true", help="print a JSON document")
    up.set_defaults(handler=_up)

    down = subparsers.add_parser("down", help="stop every local service lb up started")
    down.add_argument("--json", action="store_true", help="print a JSON document")
    down.set_defaults(handler=_down)

    status = subparsers.add_parser(
        "status", help="where the services listen and whether they answer"
    )
    status.add_argument("--json", action="store_true", help="print a JSON document")
    status.set_defaults(handler=_status)
