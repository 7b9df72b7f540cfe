"""The error, size and time figures of docs/PERCENTILES.md, from seeded synthetic boards.

``lb sketches measure`` runs :func:`measure`: every player's sketch percentile
against the exact one, in process, and with ``--redis`` a whole board written,
published and checked through a real Redis in a throwaway namespace.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import numpy as np
import numpy.typing as npt

from adapters.redis import RedisClient
from config.settings import Settings
from domain.games import GameCatalog, GameConfig
from domain.ranking import percentile as exact_percentile
from domain.sketches import build, rank_error, sketch_key
from domain.windows import WindowKind, window_for
from readers import redis_client
from readers.sketches import SketchCache, approximate_percentile

Ints = npt.NDArray[np.int64]


def now_ms() -> int:
    """The wall clock in epoch milliseconds (read here, at the edge)."""
    return time.time_ns() // 1_000_000


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
    client: RedisClient, keys: list[str], config: GameConfig, values: Ints, ids: Ints, rng: Any
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
    from jobs.sketch_publisher import SketchPublisher

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


def measure(args: argparse.Namespace) -> int:
    """``lb sketches measure``: print the figures (a table per board size, or JSON)."""
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
