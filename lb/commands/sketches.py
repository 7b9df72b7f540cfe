"""``lb sketches publish | show | measure``: the percentile sketches of the boards.

``publish`` rebuilds every board's KLL sketch from the board's current values
and stores it in Redis (``sinks.sketch_publisher``), once (``--once``, the
default) or every ``--every`` seconds until Ctrl-C / SIGTERM. ``show`` prints
what is published for one board and, with ``--score``, the percentile a reader
would answer. ``measure`` prints the error and size figures of
``docs/PERCENTILES.md`` from seeded synthetic boards (in-process; with
``--redis`` also through a real Redis in a throwaway namespace).

This is an edge: the settings are read from the environment and the clock is
read here, once per round, and passed in.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt

from config.settings import Settings
from domain.errors import ConfigError, LeaderboardError
from domain.games import GameCatalog, GameConfig
from domain.ranking import percentile as exact_percentile
from domain.sketches import DEFAULT_K, DEFAULT_SETTLE_MS, build, rank_error, sketch_key
from domain.windows import WindowKind, window_for
from lb.commands.read import WINDOW_HELP, emit, now_ms
from readers import game_catalog, redis_client
from readers.games import games_with_boards
from readers.sketches import SketchCache, approximate_percentile, published_sketch
from sinks.sketch_publisher import Publication, SketchPublisher

Ints = npt.NDArray[np.int64]


# --- publish ----------------------------------------------------------------------------


def _games(
    args: argparse.Namespace, client: Any, catalog: GameCatalog, namespace: str
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


# --- measure ----------------------------------------------------------------------------


def synthetic_board(
    players: int, rounds: int, seed: int, max_score: int
) -> tuple[Ints, list[tuple[Ints, Ints]]]:
    """Seeded scores of ``players`` who each improved up to ``rounds`` times.

    Log-normal first scores (median ~1,100, like ``lb produce``); in each round
    70% of the players improve by a random 1-60%. Returns the current scores
    and every posting in order, as ``(player indices, values)`` per round:
    replaying them as overwrites gives the current board, and sketching them
    all is the insert-only mistake.
    """
    rng = np.random.default_rng(seed)
    current = np.minimum(np.floor(rng.lognormal(7.0, 1.5, players)), max_score).astype(np.int64)
    history = [(np.arange(players), current.copy())]
    for _ in range(rounds):
        movers = np.flatnonzero(rng.random(players) < 0.7)
        gain = np.floor(current[movers] * rng.uniform(0.01, 0.6, movers.size)).astype(np.int64)
        current[movers] = np.minimum(current[movers] + gain + 1, max_score)
        history.append((movers, current[movers].copy()))
    return current, history


def exact_percentiles(current: Ints, scores: Ints) -> npt.NDArray[np.float64]:
    """Exact percentile of each of ``scores`` on a board holding ``current``."""
    ordered = np.sort(current)
    lower = np.searchsorted(ordered, scores, side="left")
    return np.floor(10_000 * lower / ordered.size) / 100


def sketch_percentiles(
    sketch: Any, n: int, scores: Ints, *, rank: Any = None
) -> npt.NDArray[np.float64]:
    """The reader's answer (lower count rounded, then truncated) for each of ``scores``."""
    ranks = np.array(
        sketch.get_cdf(scores.astype(np.float64).tolist())[:-1] if rank is None else rank,
        dtype=np.float64,
    )
    lower = np.clip(np.rint(ranks * n), 0, n)
    return np.floor(10_000 * lower / n) / 100


def _row(
    label: str,
    k: Any,
    size: int,
    seconds: float,
    errors: npt.NDArray[np.float64],
    beyond: Any,
    top: Any,
) -> dict[str, Any]:
    return {
        "sketch": label,
        "k": k,
        "bytes": size,
        "buildSeconds": round(seconds, 3),
        "maxError": round(float(errors.max()), 3),
        "p99Error": round(float(np.quantile(errors, 0.99)), 3),
        "meanError": round(float(errors.mean()), 4),
        "maxErrorBeyondTier": None if beyond is None else round(float(errors[beyond].max()), 3),
        "maxErrorTop1Percent": round(float(errors[top].max()), 3),
    }


def measure_in_process(
    players: int, rounds: int, seed: int, k: int, exact_tier: int, compare: bool
) -> dict[str, Any]:
    """Error of every player's sketch percentile against the exact one, one board."""
    from datasketches import kll_doubles_sketch, req_floats_sketch

    current, history = synthetic_board(players, rounds, seed, GameConfig().max_score)
    distinct, counts = np.unique(current, return_counts=True)
    exact = exact_percentiles(current, distinct)
    ordered_desc = np.sort(current)[::-1]
    beyond_mask = None
    if players > exact_tier:
        # Distinct scores held only by players ranked past the tier.
        beyond_mask = distinct < ordered_desc[exact_tier - 1]

    def errors_of(estimate: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.repeat(np.abs(estimate - exact), counts)  # one error per player

    beyond = None if beyond_mask is None else np.repeat(beyond_mask, counts)
    # Players whose score is at least the 1%-from-the-top player's (the top tail).
    top = np.repeat(distinct >= ordered_desc[max(0, players // 100 - 1)], counts)
    rows = []
    started = time.perf_counter()
    sketch = build(current, k)
    seconds = time.perf_counter() - started
    rows.append(
        _row(
            "KLL, current values",
            k,
            len(sketch.serialize()),
            seconds,
            errors_of(sketch_percentiles(sketch, players, distinct)),
            beyond,
            top,
        )
    )
    started = time.perf_counter()
    inserted = kll_doubles_sketch(k)
    for _, values in history:
        inserted.update(values.astype(np.float64))
    seconds = time.perf_counter() - started
    rows.append(
        _row(
            f"KLL, insert-only ({inserted.n:,} values)",
            k,
            len(inserted.serialize()),
            seconds,
            errors_of(sketch_percentiles(inserted, int(inserted.n), distinct)),
            beyond,
            top,
        )
    )
    if compare:
        for label, other in (
            ("KLL, current values", kll_doubles_sketch(200)),
            ("REQ high-rank, current values", req_floats_sketch(12, True)),
            ("REQ high-rank, current values", req_floats_sketch(40, True)),
        ):
            started = time.perf_counter()
            other.update(current.astype(np.float32))
            seconds = time.perf_counter() - started
            ranks = [other.get_rank(float(s), False) for s in distinct.tolist()]
            rows.append(
                _row(
                    label,
                    int(other.k),
                    len(other.serialize()),
                    seconds,
                    errors_of(sketch_percentiles(other, players, distinct, rank=ranks)),
                    beyond,
                    top,
                )
            )
    return {
        "players": players,
        "improvementRounds": rounds,
        "distinctScores": int(distinct.size),
        "exactTier": exact_tier,
        "boundPoints": {
            "oneQuery": round(100 * rank_error(k, all_ranks=False), 3),
            "allQueries": round(100 * rank_error(k), 3),
        },
        "rows": rows,
    }


def _write_board(
    client: Any, keys: list[str], config: GameConfig, values: Ints, ids: Ints, rng: Any
) -> None:
    """ZADD the composites of ``values`` for players ``p<ids>`` into their shard keys."""
    from domain.keys import shard_of

    codec = config.codec(window_for(WindowKind.ALLTIME, 0))
    slots = codec.slots
    composites = values * slots + (slots - 1 - rng.integers(0, slots, values.size))
    pipe = client.pipeline(transaction=False)
    batches: dict[str, list[Any]] = {key: [] for key in keys}
    for player, composite in zip(ids.tolist(), composites.tolist(), strict=True):
        name = f"p{player}"
        shard = shard_of(name, len(keys)) or 0
        batch = batches[keys[shard]]
        batch += (composite, name)
        if len(batch) >= 20_000:
            pipe.execute_command("ZADD", keys[shard], *batch)
            batch.clear()
            if len(pipe) >= 10:
                pipe.execute()
    for key, batch in batches.items():
        if batch:
            pipe.execute_command("ZADD", key, *batch)
    pipe.execute()


def measure_redis(
    settings: Settings, players: int, rounds: int, seed: int, k: int, shards: int, sample: int
) -> dict[str, Any]:
    """Publish a synthetic board through real Redis; time it; check a sample of players.

    Writes into a fresh namespace ``skm<random>`` and deletes exactly the keys
    it wrote (its shard boards and its sketch) afterwards.
    """
    from sinks.sketch_publisher import SketchPublisher

    game = "measure"
    config = GameConfig(shards=shards)
    catalog = GameCatalog({game: config}, None)
    namespace = f"skm{uuid.uuid4().hex[:12]}"
    client = redis_client(settings, socket_timeout=120.0)
    publisher = SketchPublisher(client, catalog, namespace, k=k)
    window = window_for(WindowKind.ALLTIME, 0)
    keys = publisher.board_keys(game, config, window)
    rng = np.random.default_rng(seed + 1)
    final, history = synthetic_board(players, rounds, seed, config.max_score)
    try:
        started = time.perf_counter()
        for ids, values in history:  # later rounds overwrite earlier values
            _write_board(client, keys, config, values, ids, rng)
        write_s = time.perf_counter() - started
        publication = publisher.publish_board(game, config, window, now_ms())
        codec = config.codec(window)
        chosen = rng.choice(players, size=min(sample, players), replace=False)
        pipe = client.pipeline(transaction=False)
        for i in chosen.tolist():
            floor = int(final[i]) * codec.slots
            for key in keys:
                pipe.zcount(key, "-inf", f"({floor}")
        counts = np.array(pipe.execute(), dtype=np.int64).reshape(len(chosen), len(keys)).sum(1)
        total = sum(int(client.zcard(key)) for key in keys)
        cache = SketchCache()
        worst = 0.0
        for i, lower in zip(chosen.tolist(), counts.tolist(), strict=True):
            approx = approximate_percentile(
                client, namespace, game, config, window, int(final[i]), cache=cache
            )
            assert approx is not None
            worst = max(worst, abs(approx - exact_percentile(lower, total)))
        return {
            "players": players,
            "shards": shards,
            "improvementRounds": rounds,
            "writeSeconds": round(write_s, 1),
            "publish": publication.as_json(),
            "scanSecondsPerMillion": round(publication.scan_s * 1e6 / max(1, players), 2),
            "sampledPlayers": len(chosen),
            "maxErrorVsZcount": round(worst, 3),
        }
    finally:
        client.unlink(*keys, sketch_key(namespace, game, window.id))


def _measure(args: argparse.Namespace) -> int:
    results = []
    for players in args.players:
        doc = measure_in_process(
            players, args.rounds, args.seed, args.k, args.exact_tier, args.compare
        )
        results.append(doc)
        if not args.json:
            print(
                f"\n{players:,} players, {args.rounds} improvement rounds, "
                f"{doc['distinctScores']:,} distinct scores; KLL k={args.k} bound "
                f"{doc['boundPoints']['oneQuery']} (one query) / "
                f"{doc['boundPoints']['allQueries']} (all queries) points at 99%"
            )
            print(
                "| sketch | k | bytes | build s | max error | p99 error | mean error "
                f"| max error beyond top {args.exact_tier:,} | max error in top 1% |"
            )
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for row in doc["rows"]:
                beyond = row["maxErrorBeyondTier"]
                print(
                    f"| {row['sketch']} | {row['k']} | {row['bytes']:,} | "
                    f"{row['buildSeconds']} | {row['maxError']} | {row['p99Error']} | "
                    f"{row['meanError']} | {'-' if beyond is None else beyond} | "
                    f"{row['maxErrorTop1Percent']} |"
                )
        if args.redis:
            settings = Settings.from_env()
            for shards in args.shards:
                red = measure_redis(
                    settings, players, args.rounds, args.seed, args.k, shards, args.sample
                )
                results.append(red)
                if not args.json:
                    pub = red["publish"]
                    print(
                        f"redis, {shards} shard(s): wrote {players:,} players + improvements "
                        f"in {red['writeSeconds']} s; publish scan {pub['scanSeconds']} s "
                        f"({red['scanSecondsPerMillion']} s per 1M), store "
                        f"{pub['storeSeconds']} s, {pub['bytes']:,} bytes; max error vs "
                        f"ZCOUNT over {red['sampledPlayers']:,} players: "
                        f"{red['maxErrorVsZcount']} points"
                    )
    if args.json:
        print(json.dumps(results))
    return 0


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
