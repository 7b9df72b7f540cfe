"""Team boards: membership records, the team keys of a game, and the reference fold.

A game with ``teams = "sum" | "best" | "avg"`` keeps, for every window it has a
board of, a board of teams whose score is that aggregate of its members'
current scores on the window. Membership comes from a compacted topic (key =
playerId, value = a signed :class:`Membership`; a tombstone or an empty team
means the player is in no team) and applies to every game with team boards.

Every team structure is a function of two states only: each player's last
membership record and the players' board values. :func:`team_boards` is that
function (the reference the property tests and ``lb teams verify`` compare the
projection with); the Lua writes keep the projection equal to it after every
atomic call (docs/DESIGN.md, "Team boards").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from domain.errors import ConfigError

#: A team id: it ends a Redis key name, so no ``:``, braces or spaces.
_TEAM_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

#: Prefix of a membership record's canonical string (the signed bytes).
MEMBERSHIP_CANONICAL_VERSION = "team1"


class TeamAggregate(enum.StrEnum):
    """How a team's score is made from its members' current scores on a window."""

    SUM = "sum"
    BEST = "best"
    AVG = "avg"


def valid_team_id(text: str) -> bool:
    """Whether ``text`` can name a team (it ends key names: ``A-Z a-z 0-9 . _ -``, 1 to 64)."""
    return _TEAM_ID.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Membership:
    """One decoded membership record: ``team_id`` None means the player leaves its team."""

    player_id: str
    team_id: str | None
    ts_ms: int
    key_id: str
    sig: bytes


def membership_canonical(player_id: str, team_id: str | None, ts_ms: int) -> bytes:
    """The signed bytes of a membership record: ``team1|playerId|teamId|ts`` (no team: empty)."""
    return f"{MEMBERSHIP_CANONICAL_VERSION}|{player_id}|{team_id or ''}|{ts_ms}".encode()


@dataclass(frozen=True, slots=True)
class TeamKeys:
    """The team keys of one game, in one namespace; all carry the game's hash tag.

    ==========================================  ====================================
    ``<ns>:{<game>}:teams:of``                  hash playerId -> teamId (membership)
    ``<ns>:{<game>}:teams:wm``                  hash ``<topic>/<p>`` -> last membership
                                                offset applied to this game
    ``<ns>:{<game>}:teams:slots``               hash window id -> tie-break slots of its
                                                board (decodes member values in Lua)
    ``<ns>:{<game>}:teams:<window>``            the team board (teamId -> aggregate)
    ``<ns>:{<game>}:teams:sum:<window>``        hash teamId -> sum of member scores
    ``<ns>:{<game>}:team:<window>:<team>``      a team's members (playerId -> score)
    ``<ns>:{<game>}:teams:changes``             stream of team aggregate changes, capped
                                                (live pushes of team boards)
    ``<ns>:{<game>}:teams:dense:n:<window>``    ``dense_ranks`` games: hash aggregate ->
                                                teams holding it, ``#`` -> teams counted
    ``<ns>:{<game>}:teams:dense:s:<window>``    ``dense_ranks`` games: sorted set of the
                                                aggregates present (member = score)
    ==========================================  ====================================
    """

    namespace: str
    game_id: str

    @property
    def prefix(self) -> str:
        """What every key of the game starts with (the Lua writes build names from it)."""
        return f"{self.namespace}:{{{self.game_id}}}:"

    @property
    def membership(self) -> str:
        return f"{self.prefix}teams:of"

    @property
    def watermarks(self) -> str:
        return f"{self.prefix}teams:wm"

    @property
    def slots(self) -> str:
        return f"{self.prefix}teams:slots"

    def board(self, window_id: str) -> str:
        return f"{self.prefix}teams:{window_id}"

    @property
    def changes(self) -> str:
        """The capped stream of the game's team aggregate changes (written with them)."""
        return f"{self.prefix}teams:changes"

    def dense_counts(self, window_id: str) -> str:
        """Teams per distinct aggregate of a window's team board (``#``: teams counted)."""
        return f"{self.prefix}teams:dense:n:{window_id}"

    def dense_values(self, window_id: str) -> str:
        """The distinct aggregates present on a window's team board (a sorted set)."""
        return f"{self.prefix}teams:dense:s:{window_id}"

    def sums(self, window_id: str) -> str:
        return f"{self.prefix}teams:sum:{window_id}"

    def members(self, window_id: str, team_id: str) -> str:
        return f"{self.prefix}team:{window_id}:{team_id}"


def check_team_rules(name: str, aggregate: TeamAggregate | None, shards: int, asc: bool) -> None:
    """Refuse team boards a game cannot keep exactly (``name`` is for messages).

    A sharded game's players live in several hash tags, so no single atomic
    write can see a member's score and its team; an ``asc`` game's "best" and
    sums rank the other way round from every other board.
    """
    if aggregate is None:
        return
    if shards > 1:
        raise ConfigError(
            f"game {name!r}: teams needs an unsharded game (shards = 1, got {shards}): a "
            f"team's members would be spread over {shards} hash tags"
        )
    if asc:
        raise ConfigError(f"game {name!r}: teams needs order = 'desc'")


def aggregate(kind: TeamAggregate, scores: list[int]) -> float:
    """A team's score from its members' scores (at least one)."""
    if kind is TeamAggregate.BEST:
        return float(max(scores))
    total = sum(scores)
    return float(total) if kind is TeamAggregate.SUM else total / len(scores)


def team_boards(
    kind: TeamAggregate,
    membership: Mapping[str, str | None],
    scores: Mapping[str, Mapping[str, int]],
) -> tuple[dict[str, dict[str, float]], dict[tuple[str, str], dict[str, int]]]:
    """The reference: team boards and members sets from membership and board scores.

    ``scores`` maps window id -> playerId -> current score. Returns (window ->
    team -> aggregate, (window, team) -> member -> score); a team with no
    member that has a score on a window is not on that window's board.
    """
    members: dict[tuple[str, str], dict[str, int]] = {}
    for window_id, board in scores.items():
        for player, score in board.items():
            team = membership.get(player)
            if team:
                members.setdefault((window_id, team), {})[player] = score
    boards: dict[str, dict[str, float]] = {}
    for (window_id, team), mine in members.items():
        boards.setdefault(window_id, {})[team] = aggregate(kind, list(mine.values()))
    return boards, members
