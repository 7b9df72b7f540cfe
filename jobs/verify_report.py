"""What ``lb verify`` reports: the differences found, and those a re-drive explains.

A :class:`Difference` is one board member, value or counter on which the live
projection and the replay disagree; a :class:`VerifyReport` collects them per
run. After a fix and ``lb dlq redrive`` the replay (judging by today's
settings) accepts each original the live job refused and counts its re-driven
copy as a duplicate: :func:`rejudged` counts those letters and
:func:`explain_redrives` moves the counter differences they explain aside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.redis import text_of
from domain.planner import APPLIED, COUNTERS, DUPLICATE, NOOP
from domain.records import SourceRecord
from domain.validation import Rejected, Validator
from jobs.dead_letter_reader import Letter


@dataclass(frozen=True)
class Difference:
    """One disagreement between the live projection and the replay."""

    tag: str
    # a window id, "meta:stats", a tournament's "meta:attempts:<t>" / "meta:entries:<t>",
    # or a board's entry metadata "meta:entry:<window id>" (values are then text)
    board: str
    player: str  # a player, a counter name, or a partition field (seats)
    kind: str  # "missing", "extra", "wrong value" or "counter"
    live: int | str | None
    log: int | str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.tag,
            "board": self.board,
            "player": self.player,
            "kind": self.kind,
            "live": self.live,
            "log": self.log,
        }


@dataclass
class VerifyReport:
    """What ``lb verify`` prints."""

    groups: int = 0
    boards: int = 0
    members: int = 0
    records: int = 0
    seconds: float = 0.0
    differences: list[Difference] = field(default_factory=list)
    #: The games compared (either side had a board group of them).
    games: set[str] = field(default_factory=set)
    #: Counter differences that are expected, each with why (see :func:`explain_redrives`).
    explained: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for diff in self.differences:
            out[diff.kind] = out.get(diff.kind, 0) + 1
        return out

    def as_dict(self, examples: int) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "groups": self.groups,
            "boards": self.boards,
            "members": self.members,
            "records_replayed": self.records,
            "differences": self.by_kind(),
            "examples": [d.as_dict() for d in self.differences[:examples]],
            "explained": self.explained,
            "seconds": round(self.seconds, 2),
        }


def rejudged(validator: Validator, letters: Iterable[Letter], topic: str) -> dict[str, int]:
    """Per game: dead letters of ``topic`` whose original record today's settings accept.

    The live job refused them when it read them (a game or key added since);
    a replay judges the same records by today's settings and accepts them.
    """
    out: dict[str, int] = {}
    for letter in letters:
        if letter.headers.get("source.topic") != topic or letter.value is None:
            continue
        record = SourceRecord(letter.offset, letter.timestamp_ms, letter.key, letter.value)
        try:
            game = validator.check(record).event.game_id
        except Rejected:
            continue
        out[game] = out.get(game, 0) + 1
    return out


def explain_redrives(report: VerifyReport, accepted_now: Mapping[str, int]) -> None:
    """Move the counter differences a fix-then-``lb dlq redrive`` explains into ``explained``.

    The live job dead-lettered each such original and later applied its
    re-driven copy; a replay by today's settings accepts the original and
    counts the copy as a duplicate. So, for a game whose boards are equal,
    ``applied + noop`` agree and the replay has at most one more
    ``duplicate`` per re-judged letter: expected, not a difference.
    """
    by_game: dict[str, list[Difference]] = {}
    for diff in report.differences:
        by_game.setdefault(diff.tag.split("/", 1)[0], []).append(diff)
    for game, diffs in sorted(by_game.items()):
        if any(d.kind != "counter" for d in diffs):
            continue  # the boards differ: nothing here is expected
        delta = {name: 0 for name in COUNTERS}
        for d in diffs:
            delta[d.player] += int(d.log or 0) - int(d.live or 0)
        extra = delta.pop(DUPLICATE)
        judged = delta.pop(APPLIED) + delta.pop(NOOP)
        if judged or any(delta.values()) or not 0 < extra <= accepted_now.get(game, 0):
            continue
        report.differences = [d for d in report.differences if d not in diffs]
        report.explained.append(
            f"game {game}: the replay counts {extra:,} more duplicate(s) than the live job, "
            f"expected: {accepted_now[game]:,} dead letter(s) of it pass today's settings, so "
            "the replay accepts each original and counts its lb dlq redrive copy as a "
            "duplicate, where the live job refused the original and applied the copy "
            "(boards equal)"
        )


def difference(tag: str, board: str, field_name: str, live: Any, log: Any) -> Difference:
    """A member or value on which the sides disagree (``None``: absent on that side)."""
    got = None if live is None else int(live)
    wanted = None if log is None else int(log)
    kind = "missing" if got is None else "extra" if wanted is None else "wrong value"
    return Difference(tag, board, field_name, kind, got, wanted)


def text_difference(tag: str, board: str, player: str, live: Any, log: Any) -> Difference:
    """An entry's metadata on which the sides disagree (``None``: absent on that side)."""
    got = None if live is None else text_of(live)
    wanted = None if log is None else text_of(log)
    kind = "missing" if got is None else "extra" if wanted is None else "wrong value"
    return Difference(tag, board, player, kind, got, wanted)


def counter_diffs(tag: str, live: dict[str, int], log: dict[str, int]) -> list[Difference]:
    """The outcome counters (``meta:stats``) on which the sides disagree."""
    return [
        Difference(tag, "meta:stats", name, "counter", live.get(name, 0), log.get(name, 0))
        for name in COUNTERS
        if live.get(name, 0) != log.get(name, 0)
    ]
