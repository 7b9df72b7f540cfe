"""Pure ranking math of the read side: board order, ranks, percentiles, cursors.

Readers fetch raw ``(playerId, composite)`` pairs from Redis in batched round
trips; everything they then decide (which member comes next, what rank it has,
what share of the board is below a player, how to merge shards) lives here, as
plain functions a property test can compare against a brute-force oracle.

**Board order** is the order of ``ZREVRANGE``: composite descending, and at
equal composite the greater playerId first (Redis compares members byte-wise;
for UTF-8 text that is the same as comparing the ``str`` code points, which is
what :func:`board_key` does). Ranks are 1-based positions in that order.
Every function below that merges, filters or pages uses this one order, so a
merged shard listing, a cursor page and a friends board rank exactly like one
``ZREVRANGE`` over the union would.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired

from typing_extensions import TypedDict

from domain.errors import EncodingError, QueryError
from domain.profiles import Profile
from domain.scoring import MAX_EXACT, TieCodec

__all__ = [
    "CURSOR_VERSION",
    "MAX_CURSOR_CHARS",
    "MAX_K",
    "MAX_LIMIT",
    "RANK_MODES",
    "Cursor",
    "Entry",
    "Member",
    "board_key",
    "competition_ranks",
    "composite_of",
    "count_before",
    "dense_ranks",
    "entries",
    "jittered_ttl_ms",
    "mapping_members",
    "merge_top",
    "neighbours",
    "page_after",
    "percentile",
    "rank_members",
    "rank_mode",
    "score_floor",
    "split_window",
    "visible_rank",
]

#: Largest page a reader serves in one call (bounds the reply and the merge).
MAX_LIMIT = 1000
#: Largest number of neighbours on each side of ``around``.
MAX_K = 100
#: Version tag inside every cursor; bump it when the payload changes meaning.
CURSOR_VERSION = 1
#: Longest cursor accepted; a real one is ~100-300 characters.
MAX_CURSOR_CHARS = 1024
_MAX_PLAYER_CHARS = 128


@dataclass(frozen=True, slots=True)
class Member:
    """One board member as Redis holds it: the playerId and its exact composite."""

    player_id: str
    composite: int


class Entry(TypedDict):
    """One ranked line of a JSON answer (top page, neighbours, friends board)."""

    rank: int | None
    """1-based; null beyond the game's exact tier"""
    playerId: str
    score: int
    metadata: NotRequired[str]
    """what the event that set this score carried (schema v2); absent when it carried none"""
    profile: NotRequired[Profile | None]
    """the player's display name, avatar and country (null: none); absent with profile=false"""


def board_key(member: Member) -> tuple[int, str]:
    """Sort key of board order: ``sorted(ms, key=board_key, reverse=True)`` is ZREVRANGE.

    A tuple comparison puts equal composites in playerId order, and reversing
    the whole sort gives "greater playerId first" at equal composite, which is
    what Redis does under ``ZREVRANGE``.
    """
    return (member.composite, member.player_id)


def composite_of(raw: bytes | str | float | int) -> int:
    """The exact integer of a Redis score (float from a reply, or its text from Lua).

    Composites are integers below ``2**53`` by construction, so anything else
    means a foreign or corrupt value: it is refused rather than truncated.
    """
    if isinstance(raw, bool):
        raise EncodingError(f"composite must be a number, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        try:
            number = float(raw)
        except ValueError as exc:
            raise EncodingError(f"board value {raw!r} is not a number") from exc
        if not math.isfinite(number) or not number.is_integer():
            raise EncodingError(f"board value {raw!r} is not an integer composite")
        value = int(number)
    if not 0 <= value < MAX_EXACT:
        raise EncodingError(f"board value {raw!r} is outside [0, 2**53)")
    return value


def score_floor(composite: int, slots: int) -> int:
    """The smallest composite of the same *score*: ``score * slots``.

    Every composite of score ``s`` lies in ``[s * slots, s * slots + slots - 1]``,
    so the players with a strictly lower score are exactly those whose
    composite is below this floor: ``ZCOUNT key -inf (floor``. Players with the
    same score but a later slot have a smaller composite yet are *not* lower,
    which is why the count stops at the floor and not at the player's own value.
    """
    if slots <= 0:
        raise ValueError(f"slots must be positive, got {slots}")
    return composite - composite % slots


def percentile(lower: int, total: int) -> float:
    """Share (0-100) of the board's players with a strictly lower score.

    Truncated (never rounded up) to two decimals with integer arithmetic, so a
    player is never shown "100" unless every other player really is below, and
    the same counts give the same number on every platform.
    """
    if total <= 0 or not 0 <= lower <= total:
        raise ValueError(f"need 0 <= lower <= total and total > 0, got {lower}/{total}")
    return (10_000 * lower // total) / 100


def visible_rank(rank: int, exact_tier: int) -> int | None:
    """``rank`` when it is inside the game's exact tier, else ``None`` (SPEC: rank null)."""
    return rank if rank <= exact_tier else None


def entries(
    members: Iterable[Member], first_rank: int, codec: TieCodec, exact_tier: int
) -> list[Entry]:
    """JSON lines of consecutive members, the first one at rank ``first_rank``."""
    return [
        {
            "rank": visible_rank(first_rank + offset, exact_tier),
            "playerId": member.player_id,
            "score": codec.split(member.composite)[0],
        }
        for offset, member in enumerate(members)
    ]


#: ``unique``: every player its own rank (ties by time, then member order);
#: ``competition``: equal scores share the best rank among them ("1224");
#: ``dense``: equal scores share a rank and the next score takes the next one ("1223").
RANK_MODES = ("unique", "competition", "dense")


def rank_mode(value: object) -> str:
    """A reader's ``rank_mode`` argument, checked; :class:`QueryError` otherwise."""
    if value not in RANK_MODES:
        raise QueryError(
            f"rank_mode must be 'unique', 'competition' or 'dense', got {str(value)[:40]!r}"
        )
    return str(value)


def better_floor(composite: int, slots: int) -> int:
    """The smallest composite of a strictly better *score* than ``composite``'s.

    ``ZCOUNT key <this> +inf`` counts the players ranked ahead on score alone,
    which is a competition rank minus one: O(log N) on a sorted set.
    """
    return score_floor(composite, slots) + slots


def competition_ranks(lines: Sequence[Mapping[str, object]], first: int | None) -> list[int | None]:
    """Competition ranks of consecutive board lines, given the first line's.

    A line is any answer line with ``rank`` and ``score`` (players' and teams').

    In board order a line whose score equals the previous line's shares its
    rank; any other line has every line before it strictly ahead on score,
    so its competition rank is its unique rank. Ranks hidden beyond the exact
    tier (``None``) stay hidden.
    """
    out: list[int | None] = []
    previous: Mapping[str, object] | None = None
    for i, line in enumerate(lines):
        unique = line["rank"]
        if not isinstance(unique, int):
            rank: int | None = None
        elif i == 0:
            rank = first
        elif previous is not None and line["score"] == previous["score"] and out[-1] is not None:
            rank = out[-1]
        else:
            rank = unique
        out.append(rank)
        previous = line
    return out


def dense_ranks(lines: Sequence[Mapping[str, object]], first: int | None) -> list[int | None]:
    """Dense ranks of consecutive board lines, given the first line's.

    Consecutive lines hold every member between them, so in board order each
    new score is the next distinct score: its dense rank is one more than the
    previous line's, and an equal score shares it. Ranks hidden beyond the
    exact tier (``None``) stay hidden.
    """
    out: list[int | None] = []
    previous: Mapping[str, object] | None = None
    current = first
    for i, line in enumerate(lines):
        if i and previous is not None and line["score"] != previous["score"]:
            current = None if current is None else current + 1
        out.append(None if line["rank"] is None else current)
        previous = line
    return out


def merge_top(pages: Iterable[Sequence[Member]], count: int) -> list[Member]:
    """The first ``count`` members, in board order, of pages that are each in board order.

    This is the exact top-K merge of a sharded board: each shard's top-K holds
    every member of the global top-K that lives in that shard, so merging the
    shard tops and cutting at K equals the top-K of the union.
    """
    if count <= 0:
        return []
    merged = heapq.merge(*pages, key=board_key, reverse=True)
    return list(itertools.islice(merged, count))


def _after(member: Member, position: Member) -> bool:
    """Whether ``member`` comes strictly after ``position`` in board order."""
    return board_key(member) < board_key(position)


def count_before(position: Member, above: int, ties: Iterable[Member]) -> int:
    """How many members come before ``position`` (the position itself excluded).

    ``above`` counts the members with a greater composite (``ZCOUNT (c +inf``
    summed over shards); ``ties`` are the members whose composite equals
    ``position.composite``. Of those, the ones with a greater playerId come
    first under ZREVRANGE. The position does not need to be on the board:
    this is also where a removed cursor member *would* be.
    """
    return above + sum(
        1
        for tie in ties
        if tie.composite == position.composite and tie.player_id > position.player_id
    )


def page_after(
    position: Member,
    ties: Iterable[Member],
    below: Iterable[Sequence[Member]],
    limit: int,
) -> list[Member]:
    """The first ``limit`` members strictly after ``position`` in board order.

    ``ties`` are the members at exactly ``position.composite`` (any order, any
    shard); ``below`` holds, per shard, the first members with a composite
    below it, in board order (``ZRANGE key (c -inf BYSCORE REV LIMIT 0 limit``).
    Only ties with a smaller playerId follow the position; a tie at or before
    it was already on an earlier page, which is what makes cursor paging free
    of duplicates when scores change between pages.
    """
    following = sorted(
        (t for t in ties if t.composite == position.composite and _after(t, position)),
        key=board_key,
        reverse=True,
    )
    return merge_top([following, *below], limit)


def neighbours(
    position: Member,
    ties: Iterable[Member],
    above: Iterable[Sequence[Member]],
    below: Iterable[Sequence[Member]],
    k: int,
) -> tuple[list[Member], list[Member]]:
    """The ``k`` nearest members before and after ``position``, both in board order.

    ``above`` holds, per shard, the members nearest above the position's
    composite in *ascending* order (``ZRANGE key (c +inf BYSCORE LIMIT 0 k``),
    ``below`` the nearest below it in board order, ``ties`` those at exactly
    its composite. Ties with a greater playerId are nearer than anything with a
    greater composite, so they are considered first. Returns ``(before,
    after)``; ``before`` ends with the member right above the position.
    """
    ties = list(ties)
    tie_before = sorted(
        (t for t in ties if t.composite == position.composite and _after(position, t)),
        key=board_key,
    )
    nearest_up = list(itertools.islice(heapq.merge(tie_before, *above, key=board_key), k))
    after = page_after(position, ties, below, k)
    return nearest_up[::-1], after


def rank_members(members: Iterable[Member]) -> list[Member]:
    """Members (e.g. a player and their friends) in board order, each player once.

    A friends board ranks exactly like the global board restricted to those
    players; a player listed twice keeps one line (the larger composite).
    """
    best: dict[str, Member] = {}
    for member in members:
        seen = best.get(member.player_id)
        if seen is None or member.composite > seen.composite:
            best[member.player_id] = member
    return sorted(best.values(), key=board_key, reverse=True)


def jittered_ttl_ms(base_ms: int, jitter: float, unit: float) -> int:
    """``base_ms`` scaled by a factor in ``[1 - jitter, 1 + jitter]`` picked by ``unit``.

    ``unit`` is a draw from ``[0, 1)`` made by the caller's (seedable) RNG, so
    tests are deterministic. Spreading expiries keeps a burst of cache entries
    written together from expiring, and being recomputed, together.
    """
    if base_ms <= 0 or not 0 <= jitter < 1 or not 0 <= unit <= 1:
        raise ValueError(f"bad TTL parameters: base={base_ms} jitter={jitter} unit={unit}")
    return max(1, round(base_ms * (1 - jitter + 2 * jitter * unit)))


# --- cursors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cursor:
    """A position on one board: the last entry of the page that was served.

    It names the member by ``(composite, playerId)`` rather than by offset, so
    the next page starts strictly after that member even when players above it
    gained or lost points meanwhile (an offset would then skip or repeat
    players). Game and window are included so a cursor cannot be replayed
    against another board.
    """

    game_id: str
    window_id: str
    composite: int
    player_id: str

    @property
    def position(self) -> Member:
        return Member(self.player_id, self.composite)

    def encode(self) -> str:
        """Opaque, URL-safe text (base64url of compact JSON, no padding)."""
        doc = {
            "v": CURSOR_VERSION,
            "g": self.game_id,
            "w": self.window_id,
            "c": self.composite,
            "p": self.player_id,
        }
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor in ``text``; :class:`QueryError` for anything we did not issue."""
        if not text or len(text) > MAX_CURSOR_CHARS:
            raise QueryError(f"invalid cursor: must be 1..{MAX_CURSOR_CHARS} characters")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            doc: Any = json.loads(raw.decode())
        except (binascii.Error, ValueError) as exc:  # UnicodeDecodeError, JSONDecodeError
            raise QueryError("invalid cursor: not a cursor this service issued") from exc
        if not isinstance(doc, dict) or doc.get("v") != CURSOR_VERSION:
            raise QueryError("invalid cursor: unknown cursor version")
        game, window, composite, player = doc.get("g"), doc.get("w"), doc.get("c"), doc.get("p")
        if set(doc) != {"v", "g", "w", "c", "p"}:
            raise QueryError("invalid cursor: unexpected fields")
        if not (isinstance(game, str) and game and isinstance(window, str) and window):
            raise QueryError("invalid cursor: missing game or window")
        if isinstance(composite, bool) or not isinstance(composite, int):
            raise QueryError("invalid cursor: position is not an integer")
        if not 0 <= composite < MAX_EXACT:
            raise QueryError("invalid cursor: position is out of range")
        if not isinstance(player, str) or not 0 < len(player) <= _MAX_PLAYER_CHARS:
            raise QueryError("invalid cursor: bad playerId")
        return cls(game, window, composite, player)


def split_window(
    members: Sequence[Member], index: int
) -> tuple[list[Member], Member, list[Member]]:
    """``members[:index]``, ``members[index]``, ``members[index + 1:]`` of a contiguous window.

    Used for ``around`` on an unsharded board, where Redis already returned the
    player's neighbourhood as one ZREVRANGE slice.
    """
    if not 0 <= index < len(members):
        raise ValueError(f"index {index} outside a window of {len(members)}")
    return list(members[:index]), members[index], list(members[index + 1 :])


def mapping_members(scores: Mapping[str, float | int | bytes | str | None]) -> list[Member]:
    """Members of a ``playerId -> score`` answer (e.g. ZMSCORE), skipping absent ones."""
    return [
        Member(player, composite_of(value)) for player, value in scores.items() if value is not None
    ]
