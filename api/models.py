"""Request and response models: the validation and the OpenAPI document come from here.

Field names are the JSON names of docs/API.md (camelCase). Query models
forbid extra fields, so a misspelt parameter (``?windw=weekly``) is refused
with 400 naming it instead of silently reading the default board.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, StrictStr, Tag

from domain.ranking import MAX_K, MAX_LIMIT
from domain.validation import MAX_ID_LENGTH

DEFAULT_WINDOW = "alltime"
#: Largest batch ``POST /v1/scores`` accepts in one request.
MAX_BATCH = 1000
_MAX_LONG = 2**63 - 1
_WINDOW_HELP = (
    "alltime, hourly, daily, weekly, monthly (the current one, in the game's reset time "
    "zone), daily:YYYY-MM-DD / weekly:YYYY-Www / monthly:YYYY-MM / hourly:YYYY-MM-DDTHH+hhmm, "
    "season:NAME or tournament:NAME"
)

Window = Annotated[str, Field(description=_WINDOW_HELP, examples=["weekly"])]


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoQuery(_Query):
    """Routes without query parameters still refuse unknown ones."""


class WindowQuery(_Query):
    """Reads of one board: which window."""

    window: Window = DEFAULT_WINDOW


RankMode = Annotated[
    Literal["unique", "competition"],
    Field(description='"competition": equal scores share a rank (1, 2, 2, 4)'),
]


class RankedQuery(WindowQuery):
    """Reads that report ranks: unique (default) or competition ("1224")."""

    rank_mode: RankMode = "unique"


class TournamentsQuery(_Query):
    """A player's tournaments (each its own board, so no window): how ranks are numbered."""

    rank_mode: RankMode = "unique"


class TopQuery(RankedQuery):
    """A page: by offset, or after a cursor (not both)."""

    limit: int = Field(10, ge=1, le=MAX_LIMIT, description="page size")
    offset: int = Field(0, ge=0, description="entries to skip (not with cursor)")
    cursor: str | None = Field(None, description="nextCursor of the previous page")


class NeighborsQuery(RankedQuery):
    """How many neighbours on each side."""

    k: int = Field(5, ge=0, le=MAX_K, description="neighbours on each side")


class HotQuery(WindowQuery):
    """Heavy hitters of one period: how many, and optionally one player's estimate."""

    limit: int = Field(10, ge=1, le=MAX_LIMIT, description="players and games listed")
    playerId: str | None = Field(None, description="also estimate this player's event count")


class HotRow(BaseModel):
    """One heavy hitter: estimated events and the range the true count lies in."""

    playerId: str | None = None
    gameId: str | None = None
    events: int
    lowerBound: int
    upperBound: int


class HotPlayer(BaseModel):
    """A count-min estimate of one player's events (never below the true count)."""

    playerId: str
    events: int
    lowerBound: int


class Hot(BaseModel):
    """The most active players and games of a period (``lb hot --publish``)."""

    window: str
    builtAtMs: int = Field(description="when the counts were published (epoch ms)")
    events: int = Field(description="events counted for this game in the period")
    errorBound: int = Field(description="any listed count is within this many events")
    players: list[HotRow]
    games: list[HotRow]
    player: HotPlayer | None


class FriendsBoardQuery(WindowQuery):
    """Whose friends board."""

    playerId: str = Field(description="whose friends")


class Entry(BaseModel):
    """One ranked player."""

    rank: int | None = Field(description="1-based; null beyond the game's exact tier")
    playerId: str
    score: int


class TopPage(BaseModel):
    """One page of a board, best first."""

    window: str = Field(examples=["weekly:2026-W18"])
    entries: list[Entry]
    nextCursor: str | None = Field(
        description="opaque; pass as cursor for the next page; null at the end"
    )


class Rank(BaseModel):
    """A player's rank (null beyond the exact tier), score and percentile."""

    window: str
    playerId: str
    rank: int | None
    score: int
    percentile: float = Field(
        description="share (0-100, truncated to 2 decimals) of the board's players "
        "with a strictly lower score"
    )


class Neighbors(BaseModel):
    """The player and up to k players on each side, in board order."""

    window: str
    above: list[Entry]
    player: Entry
    below: list[Entry]


class PlayerTournament(BaseModel):
    """Where a player stands in one tournament, and the attempts counted."""

    tournament: str
    window: str = Field(examples=["tournament:cup"])
    startMs: int = Field(description="start of the tournament (epoch ms, inclusive)")
    endMs: int = Field(description="end of the tournament (epoch ms, exclusive)")
    status: Literal["upcoming", "running", "ended"] = Field(
        description="by the server's clock against startMs/endMs"
    )
    rank: int | None = Field(description="1-based; null beyond the game's exact tier")
    score: int
    percentile: float | None
    attempts: int = Field(description="the player's attempts counted so far")
    maxAttempts: int | None = Field(description="null: unlimited")
    maxEntries: int | None = Field(description="null: unlimited")


class PlayerTournaments(BaseModel):
    """The game's tournaments that have the player on their board, earliest start first."""

    gameId: str
    playerId: str
    tournaments: list[PlayerTournament]


class FriendsBoard(BaseModel):
    """A player and the players they follow, ranked among themselves."""

    window: str
    entries: list[Entry]
    cached: bool
    ttl: int = Field(description="seconds the answer stays cached")


class Friends(BaseModel):
    """The players a player follows."""

    playerId: str
    friends: list[str]


class FriendAdded(BaseModel):
    """Whether following changed anything (false: already followed)."""

    playerId: str
    friendId: str
    added: bool


class FriendRemoved(BaseModel):
    """Whether unfollowing changed anything (false: not followed)."""

    playerId: str
    friendId: str
    removed: bool


class ScoreEventIn(BaseModel):
    """A signed score event, as a game server submits it."""

    model_config = ConfigDict(extra="forbid")

    eventId: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=MAX_ID_LENGTH,
        description="idempotency key; when omitted, sign with an empty eventId and the "
        "server derives one from the signed content",
    )
    gameId: StrictStr = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    playerId: StrictStr = Field(min_length=1, max_length=MAX_ID_LENGTH)
    score: StrictInt = Field(ge=0, le=_MAX_LONG)
    timestamp: StrictInt = Field(
        ge=0, le=_MAX_LONG, description="epoch milliseconds when the score was achieved"
    )
    kind: Literal["SCORE", "RETRACT"] = "SCORE"
    keyId: StrictStr = Field(min_length=1, max_length=64)
    sig: StrictStr = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="hex HMAC-SHA256 of v1|eventId|gameId|playerId|score|timestamp|kind "
        "under keyId's secret",
    )


def _one_or_many(value: Any) -> str:
    return "many" if isinstance(value, list) else "one"


#: ``POST /v1/scores`` takes one event or a JSON array of up to MAX_BATCH events.
ScoreSubmission = Annotated[
    Annotated[ScoreEventIn, Tag("one")]
    | Annotated[list[ScoreEventIn], Tag("many"), Field(min_length=1, max_length=MAX_BATCH)],
    Discriminator(_one_or_many),
]


class Accepted(BaseModel):
    """One event acknowledged by Kafka."""

    eventId: str


class AcceptedBatch(BaseModel):
    """Every event of a batch acknowledged by Kafka."""

    eventIds: list[str] = Field(description="in the order of the request")


class Health(BaseModel):
    """Redis answered."""

    status: Literal["ok"]


class ErrorDetail(BaseModel):
    """A stable code and a human message."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer."""

    error: ErrorDetail


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error statuses (all share :class:`ErrorBody`)."""
    return {status: {"model": ErrorBody} for status in statuses}
