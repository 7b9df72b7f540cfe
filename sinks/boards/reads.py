"""A round trip's reads: the commands and, side by side, how their replies are taken."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.redis import text
from domain.planner import LookupResults, Lookups

#: Members or fields per read command: a read of a big batch is several short
#: commands, so a reader of the same Redis waits behind none of them for long.
READ_CHUNK = 1000


def _spans(items: Sequence[str | bytes]) -> list[Sequence[str | bytes]]:
    """``items`` in runs of at most :data:`READ_CHUNK` (one read command each)."""
    if len(items) <= READ_CHUNK:
        return [items]
    return [items[at : at + READ_CHUNK] for at in range(0, len(items), READ_CHUNK)]


def read_commands(
    many: Sequence[Lookups],
    progress: Sequence[tuple[str, dict[str, int]]],
    audit: Sequence[tuple[str, str]],
) -> list[tuple[Any, ...]]:
    """A round trip's commands: progress writes, the lookups, the audited watermarks.

    :func:`parse_reads` takes their replies in the same order and chunking.
    """
    out: list[tuple[Any, ...]] = []
    for key, fields in progress:
        out.append(("HSET", key, *(x for pair in fields.items() for x in pair)))
    for lookups in many:
        out += [("HGET", key, name) for key, name in lookups.watermarks]
        out += [("HMGET", key, *s) for key, ids in lookups.seen for s in _spans(ids)]
        out += [("ZMSCORE", key, *s) for key, ps in lookups.scores for s in _spans(ps)]
        out += [("SMEMBERS", key) for key in lookups.registries]
        out += [("HMGET", key, *s) for key, names in lookups.counts for s in _spans(names)]
    out += [("HGET", key, name) for key, name in audit]
    return out


def parse_reads(
    many: Sequence[Lookups], skip: int, answers: list[Any]
) -> tuple[list[LookupResults], list[int | None]]:
    """The replies of :func:`read_commands` (after ``skip`` progress writes), decoded."""
    at = skip

    def joined(items: Sequence[str | bytes]) -> list[Any]:
        nonlocal at
        out: list[Any] = []
        for _ in _spans(items):
            out += answers[at]
            at += 1
        return out

    results: list[LookupResults] = []
    for lookups in many:
        got = LookupResults()
        for value in answers[at : at + len(lookups.watermarks)]:
            got.watermarks.append(None if value is None else int(value))
        at += len(lookups.watermarks)
        for _, ids in lookups.seen:
            got.seen.append(joined(ids))  # raw: ids' record times, or fingerprint bags
        for _, players in lookups.scores:
            # Doubles arrive as text (RESP2); composites stay below 2**53, exact.
            got.scores.append([None if v is None else float(v) for v in joined(players)])
        for _ in lookups.registries:
            got.registries.append({text(m) for m in answers[at]})
            at += 1
        for _, names in lookups.counts:
            got.counts.append([None if v is None else int(v) for v in joined(names)])
        results.append(got)
    return results, [None if value is None else int(value) for value in answers[at:]]
