"""Every answer shape of the read side, declared once.

The readers build these documents; the CLI prints them (``--json``), the HTTP
routes answer them (FastAPI validates each one against the route's
``response_model``, which is one of these), the hot routes and the page cache
validate and serialise them the same way (:func:`api.models.page_bytes`), and the OpenAPI
document is generated from them. Field names are the JSON names of
docs/API.md (camelCase).

They are ``TypedDict`` s, not pydantic models: a reader builds a plain dict
(cheap, and printable as it is), and nothing here imports pydantic, so the
CLI does not pay for it. A docstring under a field is its description in the
OpenAPI document, and validation is strict (:func:`_documented`). They are
``typing_extensions.TypedDict`` s because pydantic needs that on Python 3.11.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeVar

from typing_extensions import TypedDict

from domain.profiles import Profile
from domain.ranking import Entry

__all__ = [
    "AroundAnswer",
    "Entry",
    "FriendAdded",
    "FriendRemoved",
    "Friends",
    "FriendsBoard",
    "HotAnswer",
    "HotPlayer",
    "HotRow",
    "PlayerTournament",
    "PlayerTournaments",
    "Profile",
    "RankAnswer",
    "TopPage",
]

T = TypeVar("T")


def _documented(shape: type[T]) -> type[T]:
    """Pydantic's config of an answer, set without importing pydantic.

    Strict: an answer is checked, not coerced (a score the reader got wrong as
    text is an error, not a number); field docstrings become descriptions.
    """
    config = {"strict": True, "use_attribute_docstrings": True}
    shape.__pydantic_config__ = config  # type: ignore[attr-defined]
    return shape


_documented(Entry)
_documented(Profile)


@_documented
class TopPage(TypedDict):
    """One page of a board, best first (``top``)."""

    window: str
    """the board's window id, e.g. weekly:2026-W18"""
    entries: list[Entry]
    nextCursor: str | None
    """opaque; pass as cursor for the next page; null at the end"""


@_documented
class RankAnswer(TypedDict):
    """A player's rank (null beyond the exact tier), score and percentile (``rank``).

    Score and percentile are null when the player has no score on the board
    (the Python reader and the CLI; HTTP answers 404 instead).
    """

    window: str
    playerId: str
    rank: int | None
    """1-based; null beyond the game's exact tier"""
    score: int | None
    percentile: float | None
    """share (0-100, truncated to 2 decimals) of the board's players with a strictly lower score"""
    metadata: NotRequired[str]
    """what the event that set this score carried (schema v2); absent when it carried none"""


@_documented
class AroundAnswer(TypedDict):
    """The player and up to k players on each side, in board order (``around``).

    ``above + [player] + below`` is one contiguous slice; ``player`` is null
    (the lists empty) when the player has no score (HTTP answers 404 instead).
    """

    window: str
    above: list[Entry]
    player: Entry | None
    below: list[Entry]


@_documented
class PlayerTournament(TypedDict):
    """Where a player stands in one tournament, and the attempts counted."""

    tournament: str
    window: str
    """the tournament's board, e.g. tournament:cup"""
    startMs: int
    """start of the tournament (epoch ms, inclusive)"""
    endMs: int
    """end of the tournament (epoch ms, exclusive)"""
    status: Literal["upcoming", "running", "ended"]
    """by the reader's clock against startMs/endMs"""
    rank: int | None
    """1-based; null beyond the game's exact tier"""
    score: int
    percentile: float | None
    attempts: int
    """the player's attempts counted so far"""
    metadata: NotRequired[str]
    """what the event that set this score carried (schema v2); absent when it carried none"""
    maxAttempts: int | None
    """null: unlimited"""
    maxEntries: int | None
    """null: unlimited"""


@_documented
class PlayerTournaments(TypedDict):
    """The game's tournaments that have the player on their board, earliest start first."""

    gameId: str
    playerId: str
    tournaments: list[PlayerTournament]


@_documented
class FriendsBoard(TypedDict):
    """A player and the players they follow, ranked among themselves."""

    window: str
    entries: list[Entry]
    cached: bool
    """whether the answer came from the short-lived cache"""
    ttl: int
    """seconds the answer stays cached"""


@_documented
class Friends(TypedDict):
    """The players a player follows."""

    playerId: str
    friends: list[str]


@_documented
class FriendAdded(TypedDict):
    """Whether following changed anything (false: already followed)."""

    playerId: str
    friendId: str
    added: bool


@_documented
class FriendRemoved(TypedDict):
    """Whether unfollowing changed anything (false: not followed)."""

    playerId: str
    friendId: str
    removed: bool


@_documented
class HotRow(TypedDict):
    """One heavy hitter (a player or a game): estimated events and the range of the true count."""

    playerId: NotRequired[str]
    gameId: NotRequired[str]
    events: int
    lowerBound: int
    upperBound: int


@_documented
class HotPlayer(TypedDict):
    """A count-min estimate of one player's events (never below the true count)."""

    playerId: str
    events: int
    lowerBound: int


@_documented
class HotAnswer(TypedDict):
    """The most active players and games of a period (``lb hot --publish``)."""

    window: str
    builtAtMs: int
    """when the counts were published (epoch ms)"""
    events: int
    """events counted for this game in the period"""
    errorBound: int
    """any listed count is within this many events"""
    players: list[HotRow]
    games: list[HotRow]
    player: HotPlayer | None
