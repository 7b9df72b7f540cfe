"""The planner's inputs and outputs: what to read, what was read, what to write.

Plain data, no behaviour beyond a total: the sink turns :class:`Lookups` into
read commands and :class:`GroupWrite` into one atomic Lua call each; the planner
fills them. :class:`Group`, :class:`Board` and :class:`Reads` are the planner's
own working shapes, shared by its modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from domain.games import Operator, Tournament
from domain.keys import GroupKeys
from domain.operators import apply_composite
from domain.outcomes import COUNTERS as COUNTERS
from domain.planner.dedupe import Token
from domain.records import Accepted
from domain.scoring import TieCodec
from domain.teams import TeamAggregate, TeamKeys

#: Counter names kept in ``meta:stats`` (written in the same transaction as the boards):
#: every :class:`domain.outcomes.Outcome` as a plain string; the first three partition
#: the accepted records.
APPLIED, NOOP, DUPLICATE, SATURATED, TOURNAMENT_FULL, ATTEMPTS_USED_UP = COUNTERS

#: A member whose value was never read (a RETRACT removes it without looking).
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class Board:
    """What the hot loop needs of one board, computed once per window."""

    key: str
    window_id: str
    origin_ms: int
    unit_ms: int  # 0: no time tie-break (every event in slot 0)
    slots: int
    expire_at_s: int | None
    #: Lowest score wins: values are ``max_score - score`` (domain.scoring).
    ascending: bool = False
    #: How an event changes a value here (``apply_composite``, or its ``_asc`` twin).
    apply: Callable[[Operator, int | None, int, int, int, int], int] = apply_composite
    #: An unchanged ``best`` here leaves every wider board of the record unchanged.
    stop: bool = True
    #: A tournament's board: its caps, and the keys of its attempts and seats.
    tournament: Tournament | None = None
    attempts_key: str = ""
    entries_key: str = ""
    #: The board's composite encoding (None: ask the game), for the change stream's scores.
    codec: TieCodec | None = None


@dataclass
class Lookups:
    """What must be read from Redis before a batch can be planned."""

    watermarks: list[tuple[str, str]] = field(default_factory=list)
    #: ``HMGET`` of dedupe fields (``domain.planner.dedupe.SeenLayout.reads``) ...
    seen: list[tuple[str, list[str | bytes]]] = field(default_factory=list)
    scores: list[tuple[str, list[str]]] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)
    #: Tournament counts (``HMGET``): players' attempts, partitions' seats taken.
    counts: list[tuple[str, list[str]]] = field(default_factory=list)
    #: The batch's records by board group, as :meth:`BoardPlanner.lookups` grouped
    #: them: :meth:`BoardPlanner.plan` of the same batch takes them instead of
    #: grouping again. Not a read.
    groups: list[Group] | None = field(default=None, repr=False, compare=False)
    #: ... and, parallel to ``seen``, the bucket and tokens each answers for. Not a read.
    seen_at: list[tuple[int, list[Token]]] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return bool(self.watermarks or self.seen or self.scores or self.registries or self.counts)


@dataclass
class LookupResults:
    """Redis's answers, in the order of the :class:`Lookups` lists."""

    watermarks: list[int | None] = field(default_factory=list)
    #: Raw values (``SeenLayout.stored`` reads them).
    seen: list[list[bytes | int | None]] = field(default_factory=list)
    scores: list[list[float | int | None]] = field(default_factory=list)
    registries: list[set[str]] = field(default_factory=list)
    counts: list[list[int | None]] = field(default_factory=list)


class Change(NamedTuple):
    """One member's change on one board, as the live pushes announce it.

    Scores are decoded (not composites); ``None`` means "not on the board"
    (``old`` is also ``None`` when a RETRACT removed a value it never read).
    A NamedTuple: a batch of new players makes one per board per player.
    """

    window_id: str
    player_id: str
    old: int | None
    new: int | None
    #: The metadata of the event that set ``new`` (None: none, or removed).
    meta: str | None = None


@dataclass
class EntryMetadata:
    """One board's entry metadata a group write changes (its hash: ``keys.entry_metadata``).

    The script also removes, when the hash exists, the metadata of every
    member the same write adds without a value here or removes from the board,
    so only what cannot be told from the board's own members is listed.
    """

    key: str
    #: When the hash expires with its board (unix seconds; 0: never).
    expire_at_s: int = 0
    #: Player -> the metadata of the event that set their value.
    set: dict[str, str] = field(default_factory=dict)
    #: Players whose value was last set by an event without metadata, though the
    #: write leaves the value as it was (e.g. ``set`` back to the same value).
    clear: list[str] = field(default_factory=list)


@dataclass
class TeamSync:
    """A team game's share of a group write: the members whose board value it changes.

    The script looks up each player's team and makes the team's members set
    and board agree with the new value (``sinks/teams/team_lib.lua``).
    """

    keys: TeamKeys
    aggregate: TeamAggregate
    changes: list[Change]
    #: Window id -> its board's tie-break slots (decodes a composite in Lua).
    slots: dict[str, int]
    #: The game keeps distinct-score counts (``dense_ranks``): the team boards' too.
    dense: bool = False


@dataclass
class GroupWrite:
    """One board group's share of a batch: applied atomically (one MULTI/EXEC)."""

    keys: GroupKeys
    zadd: dict[str, dict[str, int]] = field(default_factory=dict)
    zrem: dict[str, list[str]] = field(default_factory=dict)
    expire_at_s: dict[str, int] = field(default_factory=dict)
    #: Window ids the batch wrote in this group (SADDed to the registry every time).
    new_windows: list[str] = field(default_factory=list)
    #: Dedupe key -> field -> value (``domain.planner.dedupe.SeenLayout.writes``):
    #: HSET, or with ``seen_append`` appended to what the field holds; then EXPIRE.
    seen: dict[str, dict[str | bytes, int | bytes]] = field(default_factory=dict)
    seen_ttl_s: int = 0
    seen_append: bool = False
    watermark: tuple[str, int] = ("", -1)
    #: The stored watermark this plan was based on (-1: none). Redis refuses
    #: the write when it holds anything else below ``watermark``: it lost
    #: writes (or someone else wrote), and the plan's values are stale.
    expected: int = -1
    stats: dict[str, int] = field(default_factory=dict)
    #: What changed, appended to the group's change stream in the same atomic write.
    changes: list[Change] = field(default_factory=list)
    #: Tournament counts set to absolute values (``HSET key field value``): a
    #: player's attempts, a partition's seats taken.
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per board key: its entries' metadata to write (see :class:`EntryMetadata`).
    metadata: dict[str, EntryMetadata] = field(default_factory=dict)
    #: Distinct-score count changes of a ``dense_ranks`` game's boards (same atomic write).
    distinct: list[DistinctWrite] = field(default_factory=list)
    #: A sharded ``dense_ranks`` game's shard: where the script queues the count
    #: changes for the game-wide counts (``GroupKeys.dense_outbox``), else None.
    dense_outbox: str | None = None
    #: Hash fields deleted (``HDEL key field...``), after every other section: an
    #: erased player's tournament attempts (``domain.erasure``).
    hdel: dict[str, list[str]] = field(default_factory=dict)
    #: Team boards to keep in step (games with ``teams`` only), in the same atomic write.
    teams: TeamSync | None = None


@dataclass
class WritePlan:
    """Everything one batch writes, grouped by hash tag, plus the cache updates."""

    partition: int
    groups: list[GroupWrite] = field(default_factory=list)
    cache_updates: dict[tuple[str, str], dict[str, int | None]] = field(default_factory=dict)
    watermark_updates: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Windows newly registered per registry key (SADDed by this plan).
    registry_updates: dict[str, set[str]] = field(default_factory=dict)
    #: Per (tag, player): the tournament attempts known after this plan.
    attempt_updates: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: Per (entries key, partition field): the seats taken after this plan.
    seat_updates: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (shard outbox, partition field) of sharded dense groups whose records were
    #: all applied before: their queued count changes are followed all the same
    #: (a restart between a shard's write and the game-wide one; ``sinks.boards.dense_union``).
    dense_catch_up: list[tuple[str, str]] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """Counters summed over groups (for logs and metrics)."""
        out: dict[str, int] = {}
        for group in self.groups:
            for name, value in group.stats.items():
                out[name] = out.get(name, 0) + value
        return out


@dataclass
class Group:
    """One board group's records of a batch, in log order."""

    keys: GroupKeys
    records: list[Accepted]
    #: The records' dedupe tokens by event id (filled with the lookups, used by the fold).
    tokens: dict[str, Token] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reads:
    """A batch's lookup answers, by key."""

    watermarks: dict[str, int]
    #: Per record-time bucket: token -> record time of the applied copy.
    seen: dict[int, dict[Token, int]]
    scores: dict[tuple[str, str], int | None]
    registries: dict[str, set[str]]
    counts: dict[tuple[str, str], int]


@dataclass(slots=True)
class DistinctWrite:
    """How one write moves a dense-ranked board's distinct-score counts.

    ``floors``: per score floor (``score * slots``, as decimal text), how many
    changed members reach it and how many leave it; members whose score stays
    are left out. ``unknown`` are members removed with a value the planner never
    read (a RETRACT): the script reads their floors before removing them.
    """

    board: str
    window_id: str
    counts: str
    scores: str
    slots: int
    #: The board's expiry (unix seconds) when this write sets it, else 0.
    expire_at_s: int
    floors: dict[str, list[int]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.floors or self.unknown)
