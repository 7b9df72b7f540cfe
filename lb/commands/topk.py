"""``lb topk run``: keep the global top-K key of every sharded board fresh.

Every ``--every`` seconds (default 1) one pass of :class:`jobs.topk_merger.TopKMerger`
reads the first K + 1 members of every shard of every live window of every
sharded game, merges them and swaps the result into
``<ns>:{<game>}:top:<window id>`` atomically; readers serve offset pages with
``offset + limit <= K`` from that key. Games are rediscovered every 30 s.
The clock is read here, once per pass. Ctrl-C or SIGTERM stops it (exit 0);
a failed pass (Redis unreachable) is reported on stderr and retried at the
next tick. ``--once`` runs one pass and prints its report as JSON; its keys
live 300 s (``--ttl``), long enough for a pass from cron every few minutes.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from config.settings import Settings
from domain.errors import ConfigError, ServiceError
from domain.topk import DEFAULT_K
from jobs.topk_merger import DEFAULT_TTL_MS, TopKMerger
from lb.argtypes import positive_float
from lb.commands.read import now_ms
from readers import game_catalog, redis_client

#: How often the loop scans for newly sharded games.
REDISCOVER_S = 30.0
#: How often the loop prints a one-line summary.
SUMMARY_S = 60.0
#: Lifetime of the keys one ``--once`` pass writes (no next pass refreshes them).
ONCE_TTL_S = 300.0


def periodic(
    name: str,
    every_s: float,
    step: Callable[[int], dict[str, object]],
    summary_s: float = SUMMARY_S,
) -> int:
    """Run ``step(now_ms)`` every ``every_s`` seconds until SIGINT/SIGTERM; exit code.

    Ticks are fixed-rate (a pass starts every ``every_s`` seconds) and a tick
    missed because a pass ran long is skipped, not caught up. A
    :class:`ServiceError` of one pass is printed and the loop goes on.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    passes = failures = 0
    last: dict[str, object] = {}
    next_tick = next_summary = time.monotonic()
    next_summary += summary_s
    while not stop.is_set():
        try:
            last = step(now_ms())
            passes += 1
        except ServiceError as exc:
            failures += 1
            print(f"lb {name}: pass failed: {exc}", file=sys.stderr, flush=True)
        now = time.monotonic()
        if now >= next_summary:
            doc = {"passes": passes, "failures": failures, "last": last}
            print(json.dumps(doc), flush=True)
            next_summary = now + summary_s
        next_tick += every_s
        if next_tick < now:
            next_tick = now
        stop.wait(next_tick - now)
    return 0


def _topk_run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if args.k < 1 or (args.ttl is not None and args.ttl < 0):
        raise ConfigError(f"--k must be positive and --ttl >= 0, got {args.k} and {args.ttl}")
    if args.ttl is not None:
        ttl_s = args.ttl
    elif args.once:  # no next tick refreshes it: a cron-friendly lifetime, not 5 s
        ttl_s = ONCE_TTL_S
    else:
        ttl_s = max(DEFAULT_TTL_MS / 1000, 5 * args.every)
    merger = TopKMerger(
        redis_client(settings),
        game_catalog(settings),
        settings.namespace,
        k=args.k,
        ttl_ms=round(ttl_s * 1000),
    )
    if args.once:
        merger.discover()
        print(json.dumps({**merger.run_once(now_ms()).as_dict(), "ttlSeconds": ttl_s}))
        return 0
    next_discovery = 0.0

    def step(now: int) -> dict[str, object]:
        nonlocal next_discovery
        if time.monotonic() >= next_discovery:
            merger.discover()
            next_discovery = time.monotonic() + REDISCOVER_S
        return merger.run_once(now).as_dict()

    return periodic("topk", args.every, step)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb topk run``."""
    topk = subparsers.add_parser(
        "topk",
        help="the global top-K merger of sharded games",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = topk.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="merge the shards' top-K into one global key per board, periodically",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--every", type=positive_float, default=1.0, help="seconds between passes (default 1)"
    )
    run.add_argument(
        "--k",
        type=int,
        default=DEFAULT_K,
        help=f"deepest offset + limit served from the global key; it holds K + 1 members "
        f"(default {DEFAULT_K}, the deepest offset page of a sharded board)",
    )
    run.add_argument(
        "--ttl",
        type=float,
        default=None,
        help="seconds a global key outlives the last pass that wrote or refreshed it, so "
        "readers fall back to the shards when the merger stops (default max(5, 5 x every), "
        f"with --once {ONCE_TTL_S:g}; 0: only the board's own expiry)",
    )
    run.add_argument("--once", action="store_true", help="one pass, print its report, exit")
    run.set_defaults(handler=_topk_run)
