"""Request and response models: the validation and the OpenAPI document come from here.

Field names are the JSON names of docs/API.md (camelCase). Query models
forbid extra fields, so a misspelt parameter (``?windw=weekly``) is refused
with 400 naming it instead of silently reading the default board. The
answers of the reads are the readers' own shapes (:mod:`readers.answers`),
re-exported here: one declaration for the Python reader, the CLI, the routes
(whose ``response_model`` FastAPI validates every answer against) and the hot
routes (:data:`TOP_PAGE`, the same validation and serialisation).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
)

from domain.ranking import MAX_K, MAX_LIMIT
from domain.validation import MAX_ID_LENGTH
from readers.answers import (
    AroundAnswer,
    Entry,
    FriendAdded,
    FriendRemoved,
    Friends,
    FriendsBoard,
    HotAnswer,
    PlayerTournaments,
    RankAnswer,
    TopPage,
)

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_BATCH",
    "SUBMITTED",
    "TOP_PAGE",
    "Accepted",
    "AcceptedBatch",
    "AroundAnswer",
    "Entry",
    "ErrorBody",
    "FriendAdded",
    "FriendRemoved",
    "Friends",
    "FriendsBoard",
    "FriendsBoardQuery",
    "Health",
    "HotAnswer",
    "HotQuery",
    "NeighborsQuery",
    "NoQuery",
    "PlayerTournaments",
    "ProfileAccepted",
    "ProfileIn",
    "RankAnswer",
    "RankedQuery",
    "ScoreEventIn",
    "ScoreSubmission",
    "TopPage",
    "TopQuery",
    "TournamentsQuery",
    "Window",
    "WindowQuery",
    "errors",
    "page_bytes",
    "submitted_bytes",
]

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
    Literal["unique", "competition", "dense"],
    Field(
        description='"competition": equal scores share a rank (1, 2, 2, 4); '
        '"dense": equal scores share a rank, the next score takes the next one (1, 2, 2, 3; '
        "games with dense_ranks only)"
    ),
]


class RankedQuery(WindowQuery):
    """Reads that report ranks: unique (default), competition ("1224") or dense ("1223")."""

    rank_mode: RankMode = "unique"


class TournamentsQuery(_Query):
    """A player's tournaments (each its own board, so no window): how ranks are numbered."""

    rank_mode: RankMode = "unique"


class _Profiled(_Query):
    """Reads whose entries carry profiles unless asked not to."""

    profile: bool = Field(
        True, description="carry each entry's profile (display name, avatar); false skips it"
    )


class TopQuery(RankedQuery, _Profiled):
    """A page: by offset, or after a cursor (not both)."""

    limit: int = Field(10, ge=1, le=MAX_LIMIT, description="page size")
    offset: int = Field(0, ge=0, description="entries to skip (not with cursor)")
    cursor: str | None = Field(None, description="nextCursor of the previous page")


class NeighborsQuery(RankedQuery, _Profiled):
    """How many neighbours on each side."""

    k: int = Field(5, ge=0, le=MAX_K, description="neighbours on each side")


class HotQuery(WindowQuery):
    """Heavy hitters of one period: how many, and optionally one player's estimate."""

    limit: int = Field(10, ge=1, le=MAX_LIMIT, description="players and games listed")
    playerId: str | None = Field(None, description="also estimate this player's event count")


class FriendsBoardQuery(WindowQuery, _Profiled):
    """Whose friends board."""

    playerId: str = Field(description="whose friends")
    rank_mode: RankMode = "unique"


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
        "under keyId's secret; with metadata, of v2|eventId|gameId|playerId|score|timestamp|"
        "kind|<hex SHA-256 of the metadata's UTF-8>",
    )
    metadata: StrictStr | None = Field(
        None,
        description="what the score was made with, kept with the board entry it sets (at "
        "most the game's metadata_max_bytes of UTF-8); sent on as a v2 record",
    )


class ProfileIn(BaseModel):
    """A signed player profile, as a game server or profile service submits it."""

    model_config = ConfigDict(extra="forbid")

    displayName: StrictStr = Field(min_length=1, max_length=64)
    avatarUrl: StrictStr | None = Field(None, max_length=512, description="http(s) URL, or null")
    country: StrictStr | None = Field(
        None, pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2, upper case"
    )
    updatedAt: StrictInt = Field(ge=0, lt=2**53, description="epoch ms the profile changed")
    keyId: StrictStr = Field(min_length=1, max_length=64)
    sig: StrictStr = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="hex HMAC-SHA256 of the profile canonical string (docs/CONTRACTS.md) "
        "under keyId's secret",
    )


class ProfileAccepted(BaseModel):
    """A profile record acknowledged by Kafka (the job projects it within moments)."""

    playerId: str


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


#: The ``top`` answer's validator and serialiser: what FastAPI runs for the route's
#: ``response_model``, for the hot route and the page cache (same checks, same bytes).
TOP_PAGE: TypeAdapter[TopPage] = TypeAdapter(TopPage)


def page_bytes(page: TopPage) -> bytes:
    """A ``top`` answer validated and rendered as the route renders it (compact UTF-8 JSON)."""
    return TOP_PAGE.dump_json(TOP_PAGE.validate_python(page))


#: The answer of ``POST /v1/scores``, as the route's ``response_model`` checks and renders it.
SUBMITTED: TypeAdapter[Accepted | AcceptedBatch] = TypeAdapter(Accepted | AcceptedBatch)


def submitted_bytes(event_ids: list[str], batch: bool) -> bytes:
    """The ``POST /v1/scores`` answer (one id, or the batch's) rendered as the route renders it."""
    answer = {"eventIds": event_ids} if batch else {"eventId": event_ids[0]}
    return SUBMITTED.dump_json(SUBMITTED.validate_python(answer))
