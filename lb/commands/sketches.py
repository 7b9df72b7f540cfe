"""``lb sketches publish | show | measure``: the percentile sketches of the boards.

``publish`` rebuilds every board's KLL sketch from the board's current values
and stores it in Redis (``jobs.sketch_publisher``), once (``--once``, the
default) or every ``--every`` seconds until Ctrl-C / SIGTERM. ``show`` prints
what is published for one board and, with ``--score``, the percentile a reader
would answer. ``measure`` prints the error and size figures of
``docs/PERCENTILES.md`` from seeded synthetic boards (in-process; with
``--redis`` also through a real Redis in a throwaway namespace); the
measurement itself is benchmark code, in ``bench.percentiles``.

This is an edge: the settings are read from the environment and the clock is
read here, once per round, and passed in.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt

from adapters.redis import RedisClient
from config.settings import Settings
from domain.errors import ConfigError, LeaderboardError
from domain.games import GameCatalog, GameConfig
from domain.sketches import DEFAULT_K, DEFAULT_SETTLE_MS
from jobs.sketch_publisher import Publication, SketchPublisher
from lb.commands.read import WINDOW_HELP, emit, now_ms
from readers import game_catalog, redis_client
from readers.games import games_with_boards
from readers.sketches import SketchCache, approximate_percentile, published_sketch

Ints = npt.NDArray[np.int64]


# --- publish ----------------------------------------------------------------------------


def _games(
    args: argparse.Namespace, client: RedisClient, catalog: GameCatalog, namespace: str
) -> list[str]:
    """The games named by --game, else every game with boards (found again each round)."""
    if args.game:
        return list(dict.fromkeys(args.game))
    return games_with_boards(client, namespace, catalog)


def _report(publications: list[Publication], as_json: bool) -> None:
    for p in publications:
        if as_json:
            emit(p.as_json())
        elif p.n:
            print(
                f"{p.game_id} {p.window_id}: {p.n:,} players over {p.shards} shard(s), "
                f"{p.size_bytes:,} bytes, scan {p.scan_s:.2f} s, store {p.store_s:.3f} s"
            )
        else:
            print(f"{p.game_id} {p.window_id}: no players (no sketch)")
    sys.stdout.flush()


def _publish(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    catalog = game_catalog(settings)
    client = redis_client(settings, socket_timeout=30.0)
    publisher = SketchPublisher(
        client, catalog, settings.namespace, k=args.k, settle_ms=args.settle_seconds * 1000
    )
    for game in args.game or ():
        publisher.game(game)  # an unknown game is refused now, not once per round
    if args.every is not None and args.every <= 0:
        raise ConfigError(f"--every must be a positive number of seconds, got {args.every}")
    if args.every is None:
        games = _games(args, client, catalog, settings.namespace)
        if not games:
            print(
                "lb sketches publish: no game has boards yet; nothing to publish", file=sys.stderr
            )
        _report(publisher.publish(games, now_ms()), args.json)
        return 0
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    while not stop.is_set():
        started = time.monotonic()
        try:
            games = _games(args, client, catalog, settings.namespace)
            _report(publisher.publish(games, now_ms()), args.json)
        except LeaderboardError as exc:  # keep publishing through a Redis hiccup
            print(f"lb sketches publish: {exc}", file=sys.stderr, flush=True)
        stop.wait(max(0.0, args.every - (time.monotonic() - started)))
    return 0


# --- show -------------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    catalog = game_catalog(settings)
    config = catalog.lookup(args.game)
    if config is None:
        raise ConfigError(f"game {args.game!r} is not served by the game catalog")
    now = now_ms()
    window = config.parse_window(args.window, now)
    client = redis_client(settings)
    cache = SketchCache(fresh_s=0)
    published = published_sketch(client, settings.namespace, args.game, window, cache=cache)
    if published is None:
        doc: dict[str, Any] = {"game": args.game, "window": window.id, "published": False}
        if args.json:
            emit(doc)
        else:
            print(f"{args.game} {window.id}: no sketch published")
        return 1
    sketch = published.sketch
    codec = config.codec(window)
    # The sketch holds stored scores (max_score - score on a lowest-wins board).
    low, high = (
        (sketch.get_max_value(), sketch.get_min_value())
        if codec.ascending
        else (sketch.get_min_value(), sketch.get_max_value())
    )

    def quantile(q: float) -> int:
        return codec.stored(int(sketch.get_quantile(1 - q if codec.ascending else q)))

    doc = {
        "game": args.game,
        "window": window.id,
        "published": True,
        "n": published.n,
        "k": published.k,
        "shards": published.shards,
        "builtAtMs": published.built_at_ms,
        "ageSeconds": round((now - published.built_at_ms) / 1000, 1),
        "bytes": len(published.encode()),
        "rankErrorPoints": round(100 * published.rank_error(), 3),
        "minScore": codec.stored(int(low)),
        "maxScore": codec.stored(int(high)),
        "quantiles": {f"p{q}": quantile(q / 100) for q in (10, 25, 50, 75, 90, 99)},
    }
    if args.score is not None:
        doc["score"] = args.score
        doc["percentile"] = approximate_percentile(
            client, settings.namespace, args.game, config, window, args.score, cache=cache
        )
    if args.json:
        emit(doc)
        return 0
    built = datetime.fromtimestamp(published.built_at_ms / 1000, UTC).isoformat()
    print(
        f"{args.game} {window.id}: {doc['n']:,} players, k={doc['k']}, {doc['shards']} shard(s), "
        f"{doc['bytes']:,} bytes, built {built} ({doc['ageSeconds']} s ago), "
        f"error within ±{doc['rankErrorPoints']} points (99%)"
    )
    print("  score quantiles: " + ", ".join(f"{q} {v}" for q, v in doc["quantiles"].items()))
    if args.score is not None:
        print(f"  score {args.score}: above about {doc['percentile']}% of players")
    return 0


def _measure(args: argparse.Namespace) -> int:
    from bench.percentiles import measure  # numpy work, only for this subcommand

    return measure(args)


# --- registration -----------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb sketches`` and its subcommands."""
    sketches = subparsers.add_parser(
        "sketches",
        help="publish and inspect the percentile sketches of the boards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = sketches.add_subparsers(dest="action", required=True, metavar="ACTION")

    publish = sub.add_parser(
        "publish",
        help="rebuild every board's sketch from its current values and store it",
        description="Rebuild the KLL sketch of every board of the games (current window, "
        "the next one when future-skewed events may reach it, and earlier ones still "
        "taking late events) from the boards' current values, and store each with one "
        "SET under <ns>:{<game>}:meta:sketch:<window id>.",
    )
    when = publish.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one round, then exit (default)")
    when.add_argument(
        "--every", type=float, metavar="S", help="a round every S seconds until Ctrl-C/SIGTERM"
    )
    publish.add_argument(
        "--game",
        action="append",
        metavar="G",
        help="a game to publish (repeatable; default: every game with boards in Redis, "
        "including those served by [default] or the built-in defaults)",
    )
    publish.add_argument(
        "--k", type=int, default=DEFAULT_K, help=f"KLL k, size vs accuracy (default {DEFAULT_K})"
    )
    publish.add_argument(
        "--settle-seconds",
        type=int,
        default=DEFAULT_SETTLE_MS // 1000,
        help="keep republishing a closed daily/weekly board this long after its lateness "
        f"grace (default {DEFAULT_SETTLE_MS // 1000})",
    )
    publish.add_argument("--json", action="store_true", help="one JSON line per board")
    publish.set_defaults(handler=_publish)

    show = sub.add_parser("show", help="what is published for one board")
    show.add_argument("game", help="game id, e.g. g1")
    show.add_argument("--window", default="alltime", help=WINDOW_HELP)
    show.add_argument(
        "--score", type=int, default=None, help="also estimate this score's percentile"
    )
    show.add_argument("--json", action="store_true", help="print a JSON document")
    show.set_defaults(handler=_show)

    measure = sub.add_parser(
        "measure",
        help="error/size/time figures of docs/PERCENTILES.md from seeded synthetic boards",
    )
    measure.add_argument(
        "--players", type=int, nargs="+", default=[1_000_000], help="board sizes (default 1M)"
    )
    measure.add_argument("--rounds", type=int, default=3, help="improvement rounds (default 3)")
    measure.add_argument(
        "--seed", type=int, default=20261122, help="random seed of the synthetic boards"
    )
    measure.add_argument("--k", type=int, default=DEFAULT_K, help="KLL k, size vs accuracy")
    measure.add_argument(
        "--exact-tier",
        type=int,
        default=GameConfig().exact_tier,
        help="players ranked exactly; errors are reported beyond it",
    )
    measure.add_argument("--compare", action="store_true", help="also KLL k=200 and REQ")
    measure.add_argument(
        "--redis", action="store_true", help="also write, publish and check through Redis"
    )
    measure.add_argument("--shards", type=int, nargs="+", default=[1], help="with --redis")
    measure.add_argument("--sample", type=int, default=5000, help="players checked by ZCOUNT")
    measure.add_argument("--json", action="store_true", help="one JSON document")
    measure.set_defaults(handler=_measure)
