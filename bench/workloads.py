"""The workload shapes the throughput benchmarks run, each a deterministic record stream.

Throughput depends on the stream's shape far more than on its size: how many
events come from players the job has never seen (a cache miss costs a Redis
read, a new member costs Redis a tree insert), how many of them can change a
board at all (a ``best`` board ignores a score below the player's best), and
how far event times spread (each day and week is another board, each dedupe
bucket another hash). So every benchmark states its shape, and the headline
shows the worst next to the best:

``zipf``
    The project's generator as ``lb produce`` runs it: 1M player ids drawn
    with Zipf s=1.1 (a few players post most events, ~10% of events from a
    player seen for the first time), lognormal scores, record times advancing
    like a live stream at 100,000/s.
``new-players``
    A launch day: Zipf s=0.68 over 1M ids (~48% of 1M events come from a
    player seen for the first time), uniform scores (a new best is common),
    record times advancing like a live stream.
``history``
    A replayed archive: the same players as ``zipf``, but record and event
    times spread over 30 days and the log in random order, so a batch
    touches many daily and weekly boards and many dedupe buckets.

Every shape has 1% duplicates and 1% bad records, so the exactly-once and
dead-letter paths run in every measurement.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from domain.signing import Keyring
from producer.loadgen import GeneratedRecord, LoadConfig, LoadGenerator
from schemas.codec import ScoreEventCodec

DAY_MS = 86_400_000
#: Event-time rate of the live shapes (``lb produce --rate 0``'s spacing).
LIVE_RATE = 100_000.0
HISTORY_DAYS = 30


@dataclass(frozen=True)
class Workload:
    """A named shape: the generator's settings and whether the log is shuffled."""

    name: str
    summary: str
    zipf_s: float
    score_dist: str
    #: Event-time span of the whole stream in days (0: advancing at ``LIVE_RATE``).
    span_days: int = 0

    def config(
        self, start_ms: int, events: int, players: int, seed: int, dup: float, bad: float
    ) -> LoadConfig:
        """The generator's settings for ``events`` records starting at ``start_ms``."""
        rate = LIVE_RATE if not self.span_days else events / (self.span_days * DAY_MS / 1000)
        return LoadConfig(
            start_ms=start_ms if not self.span_days else start_ms - self.span_days * DAY_MS,
            rate=rate,
            seed=seed,
            players=players,
            zipf_s=self.zipf_s,
            games=("g1",),
            score_dist=self.score_dist,
            dup_ratio=dup,
            bad_ratio=bad,
        )

    def records(
        self,
        keyring: Keyring,
        codec: ScoreEventCodec,
        start_ms: int,
        events: int,
        players: int,
        seed: int = 20260504,
        dup: float = 0.01,
        bad: float = 0.01,
    ) -> Iterator[GeneratedRecord]:
        """The stream, in the order it is produced."""
        generator = LoadGenerator(
            self.config(start_ms, events, players, seed, dup, bad), keyring, codec
        )
        if not self.span_days:
            yield from generator.records(events)
            return
        # A replayed archive: every record keeps its own times, the log order is random.
        shuffled = list(generator.records(events))
        random.Random(seed).shuffle(shuffled)
        yield from shuffled


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("zipf", "Zipf s=1.1, lognormal scores, live", 1.1, "lognormal"),
        Workload(
            "new-players", "Zipf s=0.68 (~48% new players), uniform scores, live", 0.68, "uniform"
        ),
        Workload(
            "history",
            f"Zipf s=1.1, lognormal scores, {HISTORY_DAYS} days in random order",
            1.1,
            "lognormal",
            span_days=HISTORY_DAYS,
        ),
    )
}


def shape(name: str) -> Workload:
    """The workload called ``name`` (``KeyError`` lists the choices)."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None


__all__ = ["WORKLOADS", "GeneratedRecord", "Workload", "shape"]
