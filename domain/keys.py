"""The Redis key layout, in one place.

Every key of one board group carries the same hash tag, so a group's boards
and its bookkeeping share one cluster slot and can change in one MULTI/EXEC:

==================================  ==========================================
``<ns>:{<tag>}:alltime``            all-time board (sorted set)
``<ns>:{<tag>}:weekly:2026-W18``    ISO-week board, expires after retention
``<ns>:{<tag>}:daily:2026-05-04``   UTC-day board, expires after retention
``<ns>:{<tag>}:hourly:…``/``monthly:…`` hour and month boards (zoned ids, GAMES.md)
``<ns>:{<tag>}:season:<name>``      a configured season's board, kept
``<ns>:{<tag>}:meta:wm``            hash ``<topic>/<partition>`` -> last applied offset
``<ns>:{<tag>}:meta:seen:<b>:<part>`` hash bag -> packed fingerprints and record
                                    times of bucket ``<b>`` (dedupe,
                                    ``domain.planner.dedupe``; ``meta:seen:<b>``:
                                    eventId -> record time)
``<ns>:{<tag>}:meta:boards``        set of window ids ever written (for RETRACT)
``<ns>:{<tag>}:meta:stats``         hash of exactly-once counters
``<ns>:{<tag>}:tournament:<name>``  a tournament's board (sorted set, never expires)
``<ns>:{<tag>}:meta:attempts:<name>`` hash playerId -> attempts counted in tournament
                                    ``<name>`` (a player is entered once it has one)
``<ns>:{<tag>}:meta:entries:<name>`` hash ``<topic>/<partition>`` -> players that
                                    partition entered in tournament ``<name>``
``<ns>:{@<topic>/<p>}:meta:progress`` per source partition: ``@`` -> offset applied
                                    everywhere, ``<tag>`` -> that group's last
                                    acknowledged watermark (``domain.healing``)
``<ns>:{<tag>}:meta:entry:<window>`` hash playerId -> metadata of the event that set
                                    the player's value on that board (expires with it)
``<ns>:{<tag>}:meta:dense:n:<window>`` hash score floor -> members holding that
                                    score, ``#`` -> members counted (games with
                                    ``dense_ranks``; written with the board)
``<ns>:{<tag>}:meta:dense:s:<window>`` sorted set of the board's distinct score
                                    floors (dense ranks by ``ZCOUNT``)
``<ns>:{<game>/<i>}:meta:dense:out`` hash ``<topic>/<partition>`` -> count changes of
                                    shard ``i`` not yet confirmed in the game's
                                    counts; ``<field>@`` -> offset of its last one
``<ns>:{<game>}:meta:dense:n|s:<w>`` a sharded game's counts over all its shards
``<ns>:{<game>}:meta:dense:wm``     hash ``<i>|<topic>/<partition>`` -> offset of the
                                    last shard change applied to them (``!``: broken)
``<ns>:{<tag>}:changes``            stream of board changes, capped (live pushes)
``<ns>:{<game>}:friends:<player>``  set of playerIds the player follows
``<ns>:{<game>}:friendsboard:<p>``  short-lived cache of the friends board
==================================  ==========================================

``<ns>`` is ``lb`` for live boards; ``lb rebuild`` writes a staging namespace
and renames it over the live one (same tag, so same slot). The tag is the game
id, or ``<game>/<shard>`` for a game split over shards.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from domain.windows import WindowKind

if TYPE_CHECKING:
    from domain.records import Accepted

LIVE_NAMESPACE = "lb"

#: How the key suffix of every board starts (``alltime``, ``daily:...``, ...),
#: derived from the window kinds so a new kind is a board everywhere at once:
#: rebuilds, backfills and cut-overs move exactly these and the bookkeeping.
BOARD_PREFIXES: tuple[str, ...] = tuple(
    kind.value if kind is WindowKind.ALLTIME else f"{kind.value}:" for kind in WindowKind
)


def is_board_suffix(suffix: str) -> bool:
    """Whether a key's part after ``{tag}:`` names a board (a sorted set of a window)."""
    return suffix.startswith(BOARD_PREFIXES)


#: Approximate cap (``XADD MAXLEN ~``) of a group's change stream, in entries: one
#: entry per atomic group write, so minutes of history at a steady 20 batches/s,
#: enough for a live client to reconnect and resume where it left off.
CHANGES_MAXLEN = 10_000


def shard_tag(game_id: str, shard: int | None) -> str:
    """The hash tag of one game (``shard is None``) or one shard of it."""
    return game_id if shard is None else f"{game_id}/{shard}"


def game_of_tag(tag: str) -> str:
    """The game id of a hash tag (a game's, or one shard's: ``game/shard``)."""
    return tag.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """Every key of one board group (one hash tag) in one namespace.

    The prefix is built once: the job asks for board and seen-bucket keys
    several times per event.
    """

    namespace: str
    tag: str
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", f"{self.namespace}:{{{self.tag}}}:")

    def board(self, window_id: str) -> str:
        return f"{self.prefix}{window_id}"

    def entry_metadata(self, window_id: str) -> str:
        """Per player: the metadata of the event that set their value on one board."""
        return f"{self.prefix}{ENTRY_METADATA}{window_id}"

    @property
    def watermarks(self) -> str:
        return f"{self.prefix}meta:wm"

    def seen(self, bucket: int) -> str:
        """A record-time bucket's event ids (the full-id dedupe layout)."""
        return f"{self.prefix}meta:seen:{bucket}"

    def seen_part(self, bucket: int, part: int) -> str:
        """One part of a record-time bucket's fingerprint bags (the default dedupe layout)."""
        return f"{self.prefix}meta:seen:{bucket}:{part}"

    @property
    def seen_parts(self) -> str:
        """What every :meth:`seen_part` key starts with (then ``<bucket>:<part>``).

        The compiled layout (``lb_native.SeenBags``) builds the keys from it.
        """
        return f"{self.prefix}meta:seen:"

    @property
    def boards(self) -> str:
        return f"{self.prefix}meta:boards"

    @property
    def stats(self) -> str:
        return f"{self.prefix}meta:stats"

    def attempts(self, tournament: str) -> str:
        """Per player: the attempts counted in one tournament (written with the boards)."""
        return f"{self.prefix}meta:attempts:{tournament}"

    def entries(self, tournament: str) -> str:
        """Per source partition: the players it entered in one tournament (its seats taken)."""
        return f"{self.prefix}meta:entries:{tournament}"

    def dense_counts(self, window_id: str) -> str:
        """Per score floor: how many members of the board hold that score (``#``: all counted)."""
        return f"{self.prefix}meta:dense:n:{window_id}"

    def dense_scores(self, window_id: str) -> str:
        """The board's distinct score floors, member = score = the floor (dense ranks)."""
        return f"{self.prefix}meta:dense:s:{window_id}"

    @property
    def dense_outbox(self) -> str:
        """A shard's distinct-count changes not yet confirmed in its game's counts."""
        return f"{self.prefix}meta:dense:out"

    @property
    def dense_applied(self) -> str:
        """Per shard and source partition: the last shard change a game's counts hold."""
        return f"{self.prefix}meta:dense:wm"

    @property
    def changes(self) -> str:
        """The capped stream of this group's board changes (written with the boards)."""
        return f"{self.prefix}changes"

    def friends(self, player_id: str) -> str:
        """A player's friend set (use the game's unsharded keys: one slot per player)."""
        return f"{self.prefix}friends:{player_id}"

    def friends_board(self, player_id: str) -> str:
        return f"{self.prefix}friendsboard:{player_id}"


#: Key suffix before the window id of a board's entry-metadata hash.
ENTRY_METADATA = "meta:entry:"


def entry_metadata_key(board_key: str) -> str:
    """The entry-metadata hash of a board key: ``...}:<window>`` -> ``...}:meta:entry:<window>``."""
    head, _, window_id = board_key.partition("}:")
    return f"{head}}}:{ENTRY_METADATA}{window_id}"


def watermark_field(topic: str, partition: int) -> str:
    """The field of ``meta:wm`` that holds one source partition's last applied offset."""
    return f"{topic}/{partition}"


def progress_key(namespace: str, topic: str, partition: int) -> str:
    """The progress hash of one source partition (see :mod:`domain.healing`).

    Its tag starts with ``@``, which no game id contains, so it never collides
    with a board group and a rebuild swaps it like one.
    """
    return f"{namespace}:{{@{topic}/{partition}}}:meta:progress"


def tag_of(key: str) -> str:
    """The hash tag of a key of the layout above (namespaces never contain ``{``)."""
    return key.split("{", 1)[1].split("}", 1)[0]


def shard_of(player_id: str, shards: int) -> int | None:
    """The shard of a player in a game split over ``shards`` (None when unsplit).

    CRC-32 is stable across processes and Python versions (unlike ``hash``).
    """
    if shards <= 1:
        return None
    return zlib.crc32(player_id.encode()) % shards


def group_tag(rec: Accepted) -> str:
    """The board group (hash tag) an accepted event writes: its game, or its game's shard."""
    shards = rec.game.shards
    game_id = rec.event.game_id
    if shards <= 1:
        return game_id
    return shard_tag(game_id, shard_of(rec.event.player_id, shards))
