"""What a backfill or a zero-downtime rebuild replays, and how it cuts over.

``lb backfill`` and ``lb rebuild`` replay part of the log into a staging
namespace while ``lb run`` keeps writing the live keys, then cut the staged
board groups over. Two modes, chosen by whether the range is bounded:

* **replace** (no ``--from``/``--until``): every record of the chosen games
  from the start of the log is replayed, the replay keeps reading until it is
  at the live head, and each board group is swapped whole (boards, dedupe
  ids, counters *and* watermarks) in one atomic call. The new watermarks say
  "every record up to here was applied", so the live job carries on from
  them: what it applies next is exactly what the replay had not read.
* **fill** (a bounded range): the range alone cannot give the state of a
  board the live job maintains (the all-time board holds the whole log), so
  only boards the live group does *not* have are moved in: windows that
  expired, or that a configuration never had. The live job never wrote
  them, so no live update can be lost by moving them in; the live group's
  watermarks, counters and other boards stay untouched.

This module is pure: parsing the options, the plan, the progress line and
the staging namespace's name. Kafka and Redis are :mod:`jobs.backfill`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from domain.errors import ConfigError

REPLACE = "replace"
FILL = "fill"


class Mode(StrEnum):
    """How staged groups reach the live keys (see the module docstring)."""

    REPLACE = REPLACE
    FILL = FILL


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of the range: a time (Kafka's offsets-for-times) or explicit offsets."""

    at_ms: int | None = None
    offsets: Mapping[int, int] = field(default_factory=dict)

    @property
    def is_time(self) -> bool:
        return self.at_ms is not None


def parse_bound(text: str, option: str) -> Bound:
    """``2026-05-04T00:00:00Z`` / ``2026-05-04`` (UTC) or ``0:1200,1:900`` (partition:offset).

    A time without a zone is UTC. Raises :class:`ConfigError` naming ``option``.
    """
    text = text.strip()
    if not text:
        raise ConfigError(f"{option} is empty: give an ISO time or partition:offset[,...]")
    if ":" in text and "-" not in text:
        offsets: dict[int, int] = {}
        for part in text.split(","):
            left, sep, right = part.strip().partition(":")
            try:
                partition, offset = int(left), int(right)
            except ValueError:
                raise ConfigError(f"{option} {text!r}: {part!r} is not partition:offset") from None
            if not sep or partition < 0 or offset < 0:
                raise ConfigError(f"{option} {text!r}: {part!r} is not partition:offset")
            if partition in offsets:
                raise ConfigError(f"{option} {text!r}: partition {partition} named twice")
            offsets[partition] = offset
        return Bound(offsets=offsets)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{option} {text!r} is neither an ISO time (2026-05-04T00:00:00Z) "
            "nor partition:offset[,...]"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Bound(at_ms=int(moment.timestamp() * 1000))


def mode_of(start: Bound | None, until: Bound | None) -> Mode:
    """Replace when the whole log is replayed, fill when the range is bounded."""
    return Mode.REPLACE if start is None and until is None else Mode.FILL


def resolve_range(
    low: Mapping[int, int],
    high: Mapping[int, int],
    start: Mapping[int, int] | None,
    until: Mapping[int, int] | None,
) -> dict[int, tuple[int, int]]:
    """Per partition ``(first, end)``: replay offsets ``first <= o < end``.

    ``low``/``high`` are the partitions' earliest and end offsets now; ``start``
    and ``until`` are the resolved bounds (offsets-for-times answers, or the
    user's offsets), each clamped into ``[low, high]``; a partition they do
    not name starts at ``low`` and ends at ``high``.
    """
    unknown = sorted((set(start or {}) | set(until or {})) - set(high))
    if unknown:
        raise ConfigError(
            f"partition {unknown[0]} does not exist (the topic has {len(high)} partitions)"
        )
    out: dict[int, tuple[int, int]] = {}
    for p in sorted(high):
        lo, hi = low.get(p, 0), high[p]
        first = min(max((start or {}).get(p, lo), lo), hi)
        end = min(max((until or {}).get(p, hi), first), hi)
        out[p] = (first, end)
    return out


@dataclass(frozen=True)
class BackfillPlan:
    """What one run replays and how it cuts over (printed by ``--dry-run``)."""

    topic: str
    games: tuple[str, ...]  # empty: every game
    mode: Mode
    ranges: Mapping[int, tuple[int, int]]
    #: Replace mode: keep reading past ``ranges`` until the live head.
    follow: bool
    #: Fill mode: only these window ids are moved in (empty: every missing board).
    windows: tuple[str, ...] = ()

    @property
    def records(self) -> int:
        """Records in the ranges (all games: Kafka cannot count one game's)."""
        return sum(end - first for first, end in self.ranges.values())

    @property
    def partition_counts(self) -> dict[str, int]:
        """The topic's partition count (a tournament's seats are split over them)."""
        return {self.topic: len(self.ranges)}

    def wants(self, tag: str) -> bool:
        """Whether a board group (``game`` or ``game/shard``) is part of this run."""
        return not self.games or tag.split("/", 1)[0] in self.games

    def describe(self) -> dict[str, object]:
        """The plan as JSON-ready data."""
        return {
            "topic": self.topic,
            "games": list(self.games) or "all",
            "mode": str(self.mode),
            "partitions": {
                str(p): {"from": first, "until": end, "records": end - first}
                for p, (first, end) in sorted(self.ranges.items())
            },
            "records": self.records,
            "follows_live_head": self.follow,
            "windows": list(self.windows) or "every board the live keys lack"
            if self.mode is Mode.FILL
            else "every board",
        }


def staging_namespace(live: str, kind: str, key: Sequence[str] = ()) -> str:
    """Where a run stages its groups.

    Stable for the same command, so a rerun after a crash finds (and drops)
    what the killed run left.
    """
    if not key:
        return f"{live}~{kind}"
    digest = hashlib.sha1("\0".join(key).encode()).hexdigest()[:10]  # a name, not a secret
    return f"{live}~{kind}-{digest}"


def _pace(done: int, total: int, elapsed_s: float) -> tuple[float, int, str]:
    """Rate per second, what is left, and the ETA text (``?`` before any rate)."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    left = max(total - done, 0)
    return rate, left, f"{left / rate:.0f}s" if rate > 0 else "?"


def progress_line(what: str, done: int, total: int, elapsed_s: float) -> str:
    """``lb backfill: 1,200,000/3,000,000 records (85,000/s), 1,800,000 left, ETA 21s``."""
    rate, left, eta = _pace(done, total, elapsed_s)
    return f"{what}: {done:,}/{total:,} records ({rate:,.0f}/s), {left:,} left, ETA {eta}"


def load_line(what: str, records: int, sent: int, total: int, elapsed_s: float) -> str:
    """Every record replayed, the fold going into Redis.

    ``lb rebuild: 10,000,000 records replayed; loading into Redis: 12,000,000/31,000,000
    entries (400,000/s), ETA 48s``: a replay that folds in memory writes its keys at
    the end (the dedupe ids, counters and metadata, then the board members), for a
    minute or more at 10M players, while its record count stands still.
    """
    rate, _, eta = _pace(sent, total, elapsed_s)
    return (
        f"{what}: {records:,} records replayed; loading into Redis: "
        f"{sent:,}/{total:,} entries ({rate:,.0f}/s), ETA {eta}"
    )


@dataclass(frozen=True)
class Loading:
    """A fold going into Redis: entries sent and to send, seconds since it started."""

    sent: int
    total: int
    elapsed_s: float


def status_line(
    what: str,
    records: int,
    planned: int,
    elapsed_s: float,
    loading: Loading | None = None,
    waited_s: float | None = None,
    strict_for_s: float = 0.0,
) -> str:
    """The line a replay prints now, the most specific first.

    At the live head (``waited_s`` there, for the cut-overs, up to
    ``strict_for_s``); loading a fold once every planned record is folded,
    whether or not its processes read on past the plan; past the plan (the
    records written since it was made); else the records against the plan.
    """
    if waited_s is not None:
        return (
            f"{what}: {records:,} records replayed, at the live head: cutting over, waiting "
            f"for the live job to pass the new watermarks ({waited_s:.0f}s of up to "
            f"{strict_for_s:g}s, then behind it)"
        )
    if loading is not None and records >= planned and loading.sent < loading.total:
        return load_line(what, records, loading.sent, loading.total, loading.elapsed_s)
    if records > planned:
        return (
            f"{what}: {records:,} records replayed, {planned:,} planned and "
            f"{records - planned:,} written since; catching up with the live head"
        )
    return progress_line(what, records, planned, elapsed_s)


def loaded_line(what: str, records: int, entries: int, seconds: float) -> str:
    """``lb rebuild: 10,000,000 records replayed; 31,000,000 entries ... loaded ... in 72s``."""
    return (
        f"{what}: {records:,} records replayed; {entries:,} entries (board members and "
        f"hash fields) loaded into Redis in {seconds:.0f}s"
    )


#: Records left behind the live head under which a replay process stops following
#: it (its fold then loads): the parent's catch-up, through Redis, reads the rest.
FOLLOW_MIN_RECORDS = 2_000
#: Times a replay process reads up to the head at most; each pass reads what
#: arrived during the one before, so they shrink fast.
FOLLOW_PASSES = 5


def behind(ends: Mapping[int, int], heads: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Per partition of ``ends`` (next offsets to read), its ``(first, last)`` up to the head.

    Partitions at their head are left out; so are those ``heads`` does not name.
    """
    return {p: (end, heads[p] - 1) for p, end in ends.items() if heads.get(p, end) > end}


def through_offsets(ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """The last offset of each partition the replay has read (``end - 1``)."""
    return {p: end - 1 for p, (_, end) in ranges.items()}


def expiry_floor(expire_at_s: Mapping[str, int], floor_s: int) -> dict[str, int]:
    """Expiries no earlier than ``floor_s``.

    A window rebuilt for an audit is usually past its retention, and an
    EXPIREAT in the past would delete it at once.
    """
    return {key: max(at, floor_s) for key, at in expire_at_s.items()}


def split_ranges(
    ranges: Mapping[int, tuple[int, int]], workers: int
) -> list[dict[int, tuple[int, int]]]:
    """Partitions dealt to at most ``workers`` replayers, records balanced.

    A partition is never split: its records must be applied in order by one
    writer (the planner's single-writer rule, docs/DESIGN.md). Largest first,
    each to the least loaded part (ties to the lower part), so the busiest
    part exceeds an even share by at most one partition's records, and
    partitions with nothing to replay add no process. Parts are returned
    non-empty, in order of their first partition.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, not {workers}")
    busy = {p: span for p, span in ranges.items() if span[1] > span[0]}
    parts: list[dict[int, tuple[int, int]]] = [{} for _ in range(max(1, min(workers, len(busy))))]
    loads = [0] * len(parts)
    for partition, span in sorted(busy.items(), key=lambda kv: (kv[1][0] - kv[1][1], kv[0])):
        least = min(range(len(parts)), key=lambda i: (loads[i], i))
        parts[least][partition] = span
        loads[least] += span[1] - span[0]
    parts[0].update((p, span) for p, span in ranges.items() if p not in busy)
    return sorted((part for part in parts if part), key=min)
