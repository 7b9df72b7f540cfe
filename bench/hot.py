"""Accuracy of the activity heavy hitters against exact counts (``domain.heavy_hitters``).

Usage::

    .venv/bin/python -m bench.hot --events 1000000 10000000 --players 1000000

A seeded Zipf stream (exponent 1.1 over ``--players`` ids, bots included: the
heaviest ids) is counted exactly (``numpy.bincount``) and by the sketches with
the default settings. Reported per size: whether the exact top 10 are all
reported, the largest top-10 estimate error against the stated bound, and the
count-min error over every player's estimate against ``relative_error * N``.
No Redis or Kafka: this measures the sketches, not the services.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from domain.heavy_hitters import ActivityCounts, HotSettings


def measure(events: int, players: int, seed: int = 7, sample: int = 20_000) -> dict[str, Any]:
    """One size: the sketches' answers compared with exact counts."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.1, events) - 1) % players
    exact = np.bincount(ids, minlength=players)
    names = [f"p{i}" for i in range(players)]
    counts = ActivityCounts(HotSettings())
    started = time.perf_counter()
    for chunk in np.array_split(ids, max(1, events // 1_000_000)):
        counts.add_all([names[i] for i in chunk.tolist()])
    seconds = time.perf_counter() - started
    top_exact = [int(i) for i in np.argsort(-exact, kind="stable")[:10]]
    reported = {h.item: h for h in counts.top(1000)}
    recall = sum(1 for i in top_exact if names[i] in reported) / 10
    top_errors = [
        abs(reported[names[i]].estimate - int(exact[i])) for i in top_exact if names[i] in reported
    ]
    picks = rng.choice(players, size=min(sample, players), replace=False)
    cms_errors = np.array([counts.estimate(names[i])[0] - int(exact[i]) for i in picks])
    bound = counts.settings.relative_error * events
    return {
        "events": events,
        "players": players,
        "top10Recall": recall,
        "top10MaxError": max(top_errors, default=0),
        "frequentBound": counts.maximum_error,
        "cmsUndercounts": int((cms_errors < 0).sum()),
        "cmsMeanError": round(float(cms_errors.mean()), 1),
        "cmsP99Error": int(np.quantile(cms_errors, 0.99)),
        "cmsMaxError": int(cms_errors.max()),
        "cmsBound": int(bound),
        "cmsWithinBound": round(float((cms_errors <= bound).mean()), 4),
        "sketchBytes": len(counts.encode()),
        "usPerEvent": round(1e6 * seconds / events, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--players", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    for events in args.events:
        print(json.dumps(measure(events, args.players)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
