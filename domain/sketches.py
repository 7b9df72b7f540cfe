"""Approximate percentiles beyond the exact tier: one KLL sketch per board.

A board's exact tier (``GameConfig.exact_tier``) gets exact ranks; every player
below it gets ``rank: null`` and a percentile estimated from an Apache
DataSketches KLL sketch of the board's *current* scores. This module is the
pure half of that: sizing a sketch from an accuracy target, building one from
scores (or from the composites a board stores), merging shard sketches,
answering "what share of the board is strictly below this score", and the
byte format published to Redis. The I/O halves are
``jobs.sketch_publisher`` (build and publish) and ``readers.sketches``
(read and answer); the design and the measured figures are in
``docs/PERCENTILES.md``.

**Current values only.** A sketch cannot forget an item, so feeding it every
score event would count a player once per improvement and skew every
percentile towards old, lower values. The publisher therefore rebuilds each
sketch from the board itself (one value per player, the value it holds now)
and replaces the published one; this module never sees events.

**The sketch is over scores, not composites.** Percentile means "share of the
board's players with a strictly lower *score*" (``domain.ranking.percentile``),
so the tie-break slot is dropped (:func:`scores_from_composites`) before a
value enters the sketch, and :meth:`PublishedSketch.percentile` asks for the
sketch's exclusive rank of the score.

**Error.** KLL's error is additive in rank: with probability 99% every rank
the sketch answers is within ``rank_error(k)`` of the exact one, whatever the
number of players and the score distribution. ``DEFAULT_K = 1000`` gives
0.28% for one query and 0.36% for all queries at once (0.36 percentile
points), under the 0.5-point target with room for the two-decimal truncation;
its size stays about 24 KB at any number of players.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt
from datasketches import kll_doubles_sketch

from domain.errors import EncodingError
from domain.games import GameConfig
from domain.keys import GroupKeys, shard_tag
from domain.ranking import percentile as exact_percentile
from domain.scoring import MAX_EXACT, TieCodec
from domain.windows import Window, WindowKind, window_for

__all__ = [
    "DEFAULT_K",
    "DEFAULT_SETTLE_MS",
    "HEADER_SIZE",
    "MAX_K",
    "MIN_K",
    "PublishedSketch",
    "SketchHeader",
    "build",
    "k_for_rank_error",
    "lower_count",
    "merge",
    "new_sketch",
    "parse_header",
    "percentile",
    "rank_error",
    "scores_from_composites",
    "sketch_key",
    "windows_to_publish",
]

#: KLL's size/accuracy parameter: all-ranks error 0.36% (99% confidence), ~24 KB.
DEFAULT_K = 1000
#: The range DataSketches accepts for KLL's ``k``.
MIN_K, MAX_K = 8, 65535
#: How long after a windowed board stops accepting late events it is still
#: republished, so its last changes reach the sketch (several publish intervals).
DEFAULT_SETTLE_MS = 15 * 60 * 1000

#: Values are fed to the sketch in arrays of this many (bounds the memory of
#: :func:`build` over an iterator, whatever the number of players).
_BATCH = 65_536

MAGIC = b"LBSK"
FORMAT_VERSION = 1
#: Sketch family byte of the format; only KLL over doubles exists today.
KIND_KLL_DOUBLES = 1
#: magic, version, kind, reserved, built_at_ms, n, shards, k, window-id length.
_HEADER = struct.Struct(">4sBBHqQIHH")
#: Bytes of the fixed header: a reader can ``GETRANGE key 0 HEADER_SIZE-1`` to see
#: whether the published sketch changed without fetching it.
HEADER_SIZE = _HEADER.size

Scores = npt.NDArray[np.float64]


# --- sizing -----------------------------------------------------------------------------


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not MIN_K <= k <= MAX_K:
        raise EncodingError(f"KLL k must be an integer within {MIN_K}..{MAX_K}, got {k!r}")
    return k


def rank_error(k: int, *, all_ranks: bool = True) -> float:
    """KLL's normalized rank error at ``k`` (0-1), at 99% confidence.

    ``all_ranks`` is the bound that holds for every query of one sketch at
    once (DataSketches' "double-sided"/PMF bound); otherwise the bound for one
    rank query. Independent of the number of values and their distribution.
    """
    return float(kll_doubles_sketch.get_normalized_rank_error(_check_k(k), all_ranks))


def k_for_rank_error(target: float, *, all_ranks: bool = True) -> int:
    """The smallest ``k`` whose :func:`rank_error` is at most ``target`` (0-1)."""
    if not rank_error(MAX_K, all_ranks=all_ranks) <= target < 1:
        raise EncodingError(f"no KLL k reaches a rank error of {target!r}")
    low, high = MIN_K, MAX_K  # the error falls as k grows
    while low < high:
        mid = (low + high) // 2
        if rank_error(mid, all_ranks=all_ranks) <= target:
            high = mid
        else:
            low = mid + 1
    return low


# --- building ---------------------------------------------------------------------------


def new_sketch(k: int = DEFAULT_K) -> Any:
    """An empty KLL sketch of doubles (exact for every integer score below ``2**53``)."""
    return kll_doubles_sketch(_check_k(k))


def scores_from_composites(composites: npt.ArrayLike, codec: TieCodec) -> Scores:
    """The scores of board values (composites), vectorised: ``composite // slots``.

    The same checks as :meth:`TieCodec.split`: a value that is not an integer
    in ``[0, 2**53)`` or decodes above the codec's ``max_score`` is refused
    rather than sketched, since it means a foreign or corrupt board.
    """
    values = np.asarray(composites, dtype=np.float64)
    if values.size == 0:
        return np.empty(0, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise EncodingError("board values must be finite composites")
    integers = values.astype(np.int64)
    if not np.array_equal(integers, values):
        raise EncodingError("board values must be integer composites")
    if integers.min() < 0 or integers.max() >= MAX_EXACT:
        raise EncodingError("board values must lie in [0, 2**53)")
    scores = integers // codec.slots
    if int(scores.max()) > codec.max_score:
        raise EncodingError(
            f"a board value decodes to score {int(scores.max())} above {codec.max_score}"
        )
    return scores.astype(np.float64)


def _batches(scores: Iterable[int | float] | npt.ArrayLike) -> Iterable[Scores]:
    if isinstance(scores, np.ndarray):
        yield np.asarray(scores, dtype=np.float64)
        return
    iterator = iter(scores)  # type: ignore[arg-type]
    while batch := list(islice(iterator, _BATCH)):
        yield np.asarray(batch, dtype=np.float64)


def build(scores: Iterable[int | float] | npt.ArrayLike, k: int = DEFAULT_K) -> Any:
    """A sketch of ``scores``: one value per player, the player's *current* score.

    Accepts an array or any iterable (consumed in fixed-size batches, so the
    memory used does not grow with the number of players). Scores must be
    whole numbers in ``[0, 2**53)``, as the boards hold.
    """
    sketch = new_sketch(k)
    for batch in _batches(scores):
        if batch.size == 0:
            continue
        if not np.all(np.isfinite(batch)) or not np.array_equal(np.floor(batch), batch):
            raise EncodingError("scores must be whole numbers")
        if batch.min() < 0 or batch.max() >= MAX_EXACT:
            raise EncodingError("scores must lie in [0, 2**53)")
        sketch.update(batch)
    return sketch


def merge(sketches: Iterable[Any], k: int | None = None) -> Any:
    """One sketch of the union of the inputs (e.g. the shards of one board).

    KLL merging keeps the error guarantee of the smallest ``k`` involved, so
    shard sketches built independently (by other processes, in any order) and
    merged answer like one sketch of every shard's values. ``k`` defaults to
    the smallest input ``k`` (``DEFAULT_K`` when there is no input).
    """
    parts = list(sketches)
    size = k if k is not None else min((int(s.k) for s in parts), default=DEFAULT_K)
    merged = new_sketch(size)
    for part in parts:
        merged.merge(part)
    return merged


# --- answering --------------------------------------------------------------------------


def lower_count(sketch: Any, score: int) -> int:
    """Estimated number of sketched values strictly below ``score`` (0..n)."""
    n = int(sketch.n)
    if n == 0:
        return 0
    share = float(sketch.get_rank(float(score), False))  # exclusive: values < score
    return min(n, max(0, round(share * n)))


def percentile(sketch: Any, score: int) -> float | None:
    """Estimated share (0-100) of the board with a strictly lower score; None if empty.

    Truncated to two decimals by the same rule as the exact percentile
    (:func:`domain.ranking.percentile`), so a board small enough for the
    sketch to be exact (``n <= k``) gives exactly the exact answer.
    """
    n = int(sketch.n)
    if n == 0:
        return None
    return exact_percentile(lower_count(sketch, score), n)


# --- publishing -------------------------------------------------------------------------


def sketch_key(namespace: str, game_id: str, window_id: str) -> str:
    """``<ns>:{<game>}:meta:sketch:<window id>``: in the game's own (unsharded) hash tag.

    One key per board, sharded or not: the sketch of a sharded game is the
    merge of its shards' sketches, so it belongs to no one shard.
    """
    return f"{GroupKeys(namespace, shard_tag(game_id, None)).prefix}meta:sketch:{window_id}"


@dataclass(frozen=True, slots=True)
class SketchHeader:
    """The fixed-size start of a published value: enough to tell whether it changed."""

    version: int
    kind: int
    built_at_ms: int
    n: int
    shards: int
    k: int


def parse_header(data: bytes) -> SketchHeader:
    """The header of a published value (only its first :data:`HEADER_SIZE` bytes are read)."""
    if len(data) < HEADER_SIZE:
        raise EncodingError(f"published sketch is {len(data)} bytes, shorter than its header")
    magic, version, kind, _reserved, built_at_ms, n, shards, k, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise EncodingError("not a published sketch (bad magic)")
    if version != FORMAT_VERSION or kind != KIND_KLL_DOUBLES:
        raise EncodingError(f"published sketch format {version}/{kind} is not supported")
    return SketchHeader(version, kind, built_at_ms, n, shards, k)


@dataclass(frozen=True, slots=True)
class PublishedSketch:
    """One board's sketch and what a reader needs to know about it.

    ``built_at_ms`` is when the publisher started reading the board (passed in
    by the caller; this module never reads a clock); ``shards`` how many
    shard sketches were merged into it.
    """

    window_id: str
    built_at_ms: int
    shards: int
    sketch: Any

    @property
    def n(self) -> int:
        """Players on the board when it was read."""
        return int(self.sketch.n)

    @property
    def k(self) -> int:
        return int(self.sketch.k)

    def percentile(self, score: int) -> float | None:
        """See :func:`percentile`."""
        return percentile(self.sketch, score)

    def rank_error(self, *, all_ranks: bool = True) -> float:
        """The 99%-confidence rank error bound of this sketch (0-1; 0 when exact)."""
        if not self.sketch.is_estimation_mode():
            return 0.0
        return rank_error(self.k, all_ranks=all_ranks)

    def encode(self) -> bytes:
        """The value stored in Redis: a 32-byte header, the window id, the sketch.

        ==========  =====  ========================================================
        offset      bytes  content (integers big-endian)
        ==========  =====  ========================================================
        0           4      magic ``LBSK``
        4           1      format version (1)
        5           1      sketch kind (1 = KLL of doubles)
        6           2      reserved, 0
        8           8      ``built_at_ms`` (signed)
        16          8      ``n``, players sketched
        24          4      shards merged
        28          2      KLL ``k``
        30          2      length L of the window id
        32          L      window id, UTF-8 (``alltime``, ``weekly:2026-W18``, ...)
        32 + L      rest   the DataSketches serialization of the KLL sketch
        ==========  =====  ========================================================
        """
        window = self.window_id.encode()
        header = _HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            KIND_KLL_DOUBLES,
            0,
            self.built_at_ms,
            self.n,
            self.shards,
            self.k,
            len(window),
        )
        return header + window + bytes(self.sketch.serialize())

    @classmethod
    def decode(cls, data: bytes) -> PublishedSketch:
        """The inverse of :meth:`encode`; :class:`EncodingError` for anything else."""
        header = parse_header(data)
        (length,) = struct.unpack_from(">H", data, HEADER_SIZE - 2)
        body = HEADER_SIZE + length
        if len(data) < body:
            raise EncodingError("published sketch is corrupt: truncated window id")
        try:
            window_id = data[HEADER_SIZE:body].decode()
            sketch = kll_doubles_sketch.deserialize(bytes(data[body:]))
        except (UnicodeDecodeError, RuntimeError, ValueError, IndexError) as exc:
            raise EncodingError(f"published sketch is corrupt: {exc}") from exc
        if int(sketch.n) != header.n or int(sketch.k) != header.k:
            raise EncodingError("published sketch is corrupt: header and body disagree")
        return cls(window_id, header.built_at_ms, header.shards, sketch)


def windows_to_publish(
    config: GameConfig, now_ms: int, settle_ms: int = DEFAULT_SETTLE_MS
) -> list[Window]:
    """The boards of a game whose sketch may be out of date at ``now_ms``.

    The current window of every kind the game keeps; the next one when an
    event allowed by ``future_skew`` may already have reached it; and earlier
    ones still taking late events (``end + lateness``) or that stopped less
    than ``settle_ms`` ago, so their final state is published once more. A
    board that was never written is skipped by the publisher (it has no
    players).
    """
    out: list[Window] = []
    cal = config.calendar
    ranges = [season.window for season in config.seasons]
    ranges += [tournament.window for tournament in config.tournaments]
    for ranged in ranges:
        # A season's (tournament's) board while it takes events, and once more after it settles.
        assert ranged.start_ms is not None and ranged.end_ms is not None
        if ranged.start_ms <= now_ms + config.future_skew_ms and (
            ranged.end_ms + config.lateness_ms + settle_ms > now_ms
        ):
            out.append(ranged)
    for kind in config.windows:
        current = window_for(kind, now_ms, cal)
        if kind is WindowKind.ALLTIME or current.start_ms is None or current.end_ms is None:
            out.append(current)
            continue
        if current.end_ms <= now_ms + config.future_skew_ms:
            out.append(window_for(kind, current.end_ms, cal))
        out.append(current)
        earlier = window_for(kind, current.start_ms - 1, cal)
        while (
            earlier.end_ms is not None
            and earlier.start_ms is not None
            and earlier.end_ms + config.lateness_ms + settle_ms > now_ms
        ):
            out.append(earlier)
            earlier = window_for(kind, earlier.start_ms - 1, cal)
    return out
