"""Erasing a player: the record that does it, and what it removes.

An erasure is an ordinary signed score record on the scores topic, keyed by the
player (so it lands in the partition that holds the player's events, and that
partition's order decides: events before it are erased, events after it count
again as a new entry), with ``gameId`` = :data:`ERASE_ALL_GAMES` and kind
``RETRACT``: "retract this player from every game". ``*`` is not a valid game id,
so no game can be named that, and every reader of the topic that validates
records (the job, ``lb rebuild``, ``lb backfill``, ``lb verify``) takes it the
same way; a version of the job that does not know erasures dead-letters it
``SCHEMA`` (never applies it to a game). It is authenticated like any event:
unsigned or badly signed, it is dead-lettered with the same codes.

The job turns it into one removal per board group its partition ever wrote
(:func:`erased_keys` says what each group loses), applied in the group's atomic
write under the watermark check, so a replay or a rebuild gives the same result.
Beside it, ``lb forget`` produces a tombstone keyed by the player on the
profiles topic and the team-membership topic (:class:`Tombstone`), which their
own projections apply the same way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from domain.events import EventKind
from domain.games import GameConfig
from domain.keys import GroupKeys
from domain.records import Accepted

#: The reserved ``gameId`` of an erasure record ("every game").
ERASE_ALL_GAMES = "*"

#: What an erasure record is validated against: it names no game, so no game's rules.
ERASURE_GAME = GameConfig()

#: How an erasure's ``eventId`` starts (the rest is random: a request is one record).
EVENT_ID_PREFIX = "erase:"


def is_erasure(rec: Accepted) -> bool:
    """Whether an accepted record is an erasure (a RETRACT of :data:`ERASE_ALL_GAMES`)."""
    return rec.event.game_id == ERASE_ALL_GAMES


def erasure_event_id() -> str:
    """A fresh event id for one erasure request."""
    return f"{EVENT_ID_PREFIX}{uuid.uuid4().hex}"


def erasure_fields() -> tuple[str, EventKind, int]:
    """The fixed fields of an erasure record: ``(gameId, kind, score)``."""
    return ERASE_ALL_GAMES, EventKind.RETRACT, 0


def tournaments_in(registry: set[str]) -> list[str]:
    """The tournament names among a group's registered window ids."""
    return sorted(w.removeprefix("tournament:") for w in registry if w.startswith("tournament:"))


def erased_keys(keys: GroupKeys, registry: set[str]) -> dict[str, list[str]]:
    """What an erasure removes of a player in one board group, by kind.

    The list of what a player's erasure reaches inside a group's atomic write.
    The planner applies it in ``Fold.erase`` (boards: ZREM) and
    ``Tournaments.erase`` (attempts: HDEL); a new per-player key of a group (a
    profile projection, team membership, per-entry metadata, dense-rank counts)
    joins this list and is removed there, and ``readers.erasure.find`` (what
    ``lb forget`` reports and waits for) and docs/SECURITY.md's table name it too.
    A player's profile and team membership are not a group's: they come from
    their own compacted topics, where ``lb forget`` produces a tombstone beside
    this record (``readers.erasure.produce``).

    * ``boards``: every registered board (sorted sets: the player's member);
    * ``attempts``: every tournament's attempts hash (the player's field).
    """
    return {
        "boards": [keys.board(window_id) for window_id in sorted(registry)],
        "attempts": [keys.attempts(name) for name in tournaments_in(registry)],
    }


@dataclass(frozen=True, slots=True)
class Removed:
    """One board the player was on when the erasure was requested, and the score there.

    ``score`` is None when the game's rules no longer decode the stored value.
    """

    game: str
    tag: str
    window: str
    score: int | None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A tombstone (a record without a value) an erasure produced on a compacted topic."""

    topic: str
    partition: int
    offset: int

    def as_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class Receipt:
    """What an erasure removed, where its records are, and when it was requested and done.

    ``done_ms`` is None when nobody waited for the job (``lb forget --no-wait``):
    ``removed``, ``profile`` and ``teams`` are then what Redis held when the
    records were produced. ``profile`` says whether the player had a profile;
    ``teams`` holds the (game, team) memberships the player had;
    ``profile_record`` and ``teams_record`` are the tombstones produced on the
    profiles and membership topics (None: that topic does not exist, or, for the
    membership, no game keeps team boards).
    """

    player: str
    topic: str
    partition: int
    offset: int
    event_id: str
    requested_ms: int
    done_ms: int | None
    removed: tuple[Removed, ...]
    friend_sets: int
    followers: int
    profile: bool = False
    profile_record: Tombstone | None = None
    teams: tuple[tuple[str, str], ...] = ()
    teams_record: Tombstone | None = None

    def as_json(self) -> dict[str, object]:
        """The receipt as JSON (``lb forget --json`` and the HTTP route)."""
        by_game: dict[str, list[dict[str, object]]] = {}
        for item in self.removed:
            by_game.setdefault(item.game, []).append({"board": item.window, "score": item.score})
        return {
            "player": self.player,
            "record": {
                "topic": self.topic,
                "partition": self.partition,
                "offset": self.offset,
                "eventId": self.event_id,
            },
            "requestedMs": self.requested_ms,
            "doneMs": self.done_ms,
            "applied": self.done_ms is not None,
            "boards": sum(len(v) for v in by_game.values()),
            "games": {game: by_game[game] for game in sorted(by_game)},
            "friendSets": self.friend_sets,
            "followers": self.followers,
            "profile": {
                "removed": self.profile,
                "record": None if self.profile_record is None else self.profile_record.as_json(),
            },
            "teams": {
                "removed": [{"game": game, "teamId": team} for game, team in self.teams],
                "record": None if self.teams_record is None else self.teams_record.as_json(),
            },
        }
