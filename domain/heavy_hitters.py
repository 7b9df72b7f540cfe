"""Activity heavy hitters: who (and which game) sends the most events, in bounded memory.

Counting every player's events exactly costs memory per player; spotting bots
and trending games only needs the heaviest few. Two DataSketches do it:

* ``frequent_strings_sketch`` (Misra-Gries / Space-Saving family) keeps at most
  ``0.75 * 2**lg_max_k`` counters. Every item's estimate is within
  ``maximum_error`` of its true count, which is at most ``epsilon * N``
  (``epsilon = 3.5 / 2**lg_max_k``); every item with more than that many events
  is reported (``NO_FALSE_NEGATIVES``). The bound is reported with every answer.
* ``count_min_sketch`` answers "how many events did *this* player send" for any
  player, heavy or not: never below the truth, and above it by at most
  ``relative_error * N`` with probability ``confidence``. Its size comes from
  those two targets (``suggest_num_buckets`` / ``suggest_num_hashes``).

Sketches are kept as bytes (they are published to Redis and cached), and two
sketches of the same settings merge, so per-partition counts can be combined.
This module is pure: the caller feeds it player ids (``add``), so a count built
from the same records is the same every time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from datasketches import count_min_sketch, frequent_items_error_type, frequent_strings_sketch

from domain.errors import EncodingError
from domain.events import EventKind
from domain.records import CheckedBatch
from domain.windows import Window

__all__ = ["ActivityCounts", "HotItem", "HotSettings", "count_activity", "hot_key"]

_MAGIC = b"LBHH1"


def hot_key(namespace: str, game_id: str, window_id: str) -> str:
    """``<ns>:{<game>}:hot:<window id>``: the published activity counts of one board period.

    A hash: ``players`` and ``games`` (encoded :class:`ActivityCounts`),
    ``builtAtMs``. The game's own hash tag, next to its boards.
    """
    return f"{namespace}:{{{game_id}}}:hot:{window_id}"


@dataclass(frozen=True, slots=True)
class HotSettings:
    """Sizes from accuracy targets (the defaults: ~0.34% of N, 0.1% of N at 99%)."""

    lg_max_k: int = 10
    relative_error: float = 0.001
    confidence: float = 0.99
    seed: int = 9001

    def __post_init__(self) -> None:
        if not 3 <= self.lg_max_k <= 21:
            raise EncodingError(f"lg_max_k must be 3..21, got {self.lg_max_k}")
        if not 0 < self.relative_error < 1 or not 0 < self.confidence < 1:
            raise EncodingError("relative_error and confidence must lie in (0, 1)")

    @property
    def epsilon(self) -> float:
        """The frequent-items error bound as a share of all events (``3.5 / k``)."""
        return float(frequent_strings_sketch.get_epsilon_for_lg_size(self.lg_max_k))

    @property
    def buckets(self) -> int:
        return int(count_min_sketch.suggest_num_buckets(self.relative_error))

    @property
    def hashes(self) -> int:
        return int(count_min_sketch.suggest_num_hashes(self.confidence))


@dataclass(frozen=True, slots=True)
class HotItem:
    """One heavy hitter: its estimate and the range its true count lies in."""

    item: str
    estimate: int
    lower_bound: int
    upper_bound: int


class ActivityCounts:
    """Event counts per item (a playerId or a gameId) of one board period."""

    def __init__(self, settings: HotSettings = HotSettings()) -> None:
        self.settings = settings
        self._frequent: Any = frequent_strings_sketch(settings.lg_max_k)
        self._cms: Any = count_min_sketch(settings.hashes, settings.buckets, settings.seed)

    def add(self, item: str, count: int = 1) -> None:
        """Count ``count`` events of ``item``."""
        self._frequent.update(item, count)
        self._cms.update(item, count)

    def add_all(self, items: Iterable[str]) -> None:
        """Count one event per element of ``items`` (a batch, in one call)."""
        frequent, cms = self._frequent, self._cms
        for item in items:
            frequent.update(item)
            cms.update(item)

    def merge(self, other: ActivityCounts) -> None:
        """Add ``other``'s counts (same settings: the count-min tables must line up)."""
        if other.settings != self.settings:
            raise EncodingError("cannot merge activity counts built with other settings")
        self._frequent.merge(other._frequent)
        self._cms.merge(other._cms)

    @property
    def total(self) -> int:
        """How many events were counted."""
        return int(self._cms.total_weight)

    @property
    def maximum_error(self) -> int:
        """How far any heavy hitter's estimate may be from its true count (absolute).

        The sketch's a-priori bound ``epsilon * total``, rounded up: guaranteed,
        whatever the stream.
        """
        bound = frequent_strings_sketch.get_apriori_error(
            self.settings.lg_max_k, int(self._frequent.total_weight)
        )
        return math.ceil(float(bound))

    def top(self, limit: int = 10) -> list[HotItem]:
        """The heaviest items, most events first (ties by item, so answers are stable).

        Every item with more than :attr:`maximum_error` events is among the
        candidates, so a heavy bot cannot be missed, only over-counted by at
        most that much.
        """
        rows = self._frequent.get_frequent_items(frequent_items_error_type.NO_FALSE_NEGATIVES)
        items = [HotItem(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]
        items.sort(key=lambda h: (-h.estimate, h.item))
        return items[: max(0, limit)]

    def estimate(self, item: str) -> tuple[int, int]:
        """``(estimate, lower bound)`` of ``item``'s count from the count-min sketch.

        The estimate never undercounts; it overcounts by at most
        ``relative_error * total`` with probability ``confidence``.
        """
        return int(self._cms.get_estimate(item)), int(self._cms.get_lower_bound(item))

    def encode(self) -> bytes:
        """Bytes for Redis: a header with the settings, then both sketches."""
        s = self.settings
        frequent = self._frequent.serialize()
        cms = self._cms.serialize()
        header = (
            f"{s.lg_max_k},{s.relative_error!r},{s.confidence!r},{s.seed},{len(frequent)}\n"
        ).encode()
        return _MAGIC + header + bytes(frequent) + bytes(cms)

    @classmethod
    def decode(cls, blob: bytes) -> ActivityCounts:
        """The counts :meth:`encode` wrote; :class:`EncodingError` for anything else."""
        if not blob.startswith(_MAGIC) or b"\n" not in blob:
            raise EncodingError("not an activity sketch")
        header, body = blob[len(_MAGIC) :].split(b"\n", 1)
        try:
            lg, rel, conf, seed, size = header.decode().split(",")
            settings = HotSettings(int(lg), float(rel), float(conf), int(seed))
            out = cls(settings)
            out._frequent = frequent_strings_sketch.deserialize(body[: int(size)])
            out._cms = count_min_sketch.deserialize(body[int(size) :])
        except (ValueError, RuntimeError) as exc:
            raise EncodingError(f"activity sketch is corrupt: {exc}") from exc
        return out


def count_activity(
    batches: Iterable[CheckedBatch], game_id: str, window: Window
) -> tuple[ActivityCounts, ActivityCounts]:
    """Events per player of ``game_id`` and per game, of the events whose time is in ``window``.

    Counts accepted ``SCORE`` records (validated like the job validates them,
    so forged or malformed records never count); a retried copy of an event
    counts again, since a client that resends is activity too. The same
    batches give the same counts: the answer is a function of the log.
    """
    players, games = ActivityCounts(), ActivityCounts()
    low = window.start_ms if window.start_ms is not None else -(2**63)
    high = window.end_ms if window.end_ms is not None else 2**63
    for batch in batches:
        for rec in batch.accepted:
            event = rec.event
            if event.kind is not EventKind.SCORE or not low <= event.ts_ms < high:
                continue
            games.add(event.game_id)
            if event.game_id == game_id:
                players.add(event.player_id)
    return players, games
