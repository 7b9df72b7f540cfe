"""A round trip's reads: the commands and, side by side, how their replies are taken."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from adapters.redis import text
from domain.compiled import compiled
from domain.planner import LookupResults, Lookups

#: Members or fields per read command: a read of a big batch is several short
#: commands, so a reader of the same Redis waits behind none of them for long.
READ_CHUNK = 1000

#: A dedupe lookup of at most this many fields goes with its neighbours in one
#: :data:`READ_BAGS` call when reads are batched (a replayed history's lookups:
#: thousands of keys, a field or two each); a longer one is an ``HMGET`` of its own.
SHORT_READ = 8

#: Several keys' ``HMGET`` in one call (``read_bags.lua``), sent by ``EVAL``: the
#: source rides along (Redis caches it by its hash), so no ``NOSCRIPT`` can arise.
READ_BAGS = Path(__file__).with_name("read_bags.lua").read_text()


def _spans(items: Sequence[str | bytes]) -> list[Sequence[str | bytes]]:
    """``items`` in runs of at most :data:`READ_CHUNK` (one read command each)."""
    if len(items) <= READ_CHUNK:
        return [items]
    return [items[at : at + READ_CHUNK] for at in range(0, len(items), READ_CHUNK)]


#: ``lb_native.seen_commands`` and ``seen_values`` when built: :func:`_seen_commands`
#: and :func:`_seen_values`, compiled (tests/unit/test_native_reads.py; None: Python).
COMMANDS_KERNEL: Callable[..., list[tuple[Any, ...]]] | None = cast(
    "Callable[..., list[tuple[Any, ...]]] | None", compiled("seen_commands")
)
VALUES_KERNEL: Callable[..., tuple[list[list[Any]], int]] | None = cast(
    "Callable[..., tuple[list[list[Any]], int]] | None", compiled("seen_values")
)


def _seen_commands(
    seen: Sequence[tuple[str, Sequence[str | bytes]]], batched: bool
) -> list[tuple[Any, ...]]:
    """The dedupe lookups' commands; each answers its fields' values in order.

    ``batched``: runs of short lookups (:data:`SHORT_READ`) share a
    :data:`READ_BAGS` call of up to :data:`READ_CHUNK` fields, a command and
    a reply instead of one per key (a standalone Redis; a cluster routes each
    key by itself). Compiled when ``lb_native`` is built: a replayed history's
    batch asks thousands of keys.
    """
    if COMMANDS_KERNEL is not None:
        return COMMANDS_KERNEL(seen, batched, SHORT_READ, READ_CHUNK, READ_BAGS)
    out: list[tuple[Any, ...]] = []
    keys: list[str] = []
    counts: list[int] = []
    fields: list[str | bytes] = []

    def flush() -> None:  # the run so far, ahead of what follows: values keep their order
        if keys:
            out.append(("EVAL", READ_BAGS, len(keys), *keys, *counts, *fields))
            keys.clear()
            counts.clear()
            fields.clear()

    for key, ids in seen:
        if batched and len(ids) <= SHORT_READ:
            keys.append(key)
            counts.append(len(ids))
            fields.extend(ids)
            if len(fields) >= READ_CHUNK:
                flush()
            continue
        flush()
        out += [("HMGET", key, *s) for s in _spans(ids)]
    flush()
    return out


def read_commands(
    many: Sequence[Lookups],
    progress: Sequence[tuple[str, dict[str, int]]],
    audit: Sequence[tuple[str, str]],
    batched: bool = False,
) -> list[tuple[Any, ...]]:
    """A round trip's commands: progress writes, the lookups, the audited watermarks.

    :func:`parse_reads` takes their replies in the same order and chunking.
    ``batched``: short dedupe lookups share script calls (:func:`_seen_commands`).
    """
    out: list[tuple[Any, ...]] = []
    for key, fields in progress:
        out.append(("HSET", key, *(x for pair in fields.items() for x in pair)))
    for lookups in many:
        out += [("HGET", key, name) for key, name in lookups.watermarks]
        out += _seen_commands(lookups.seen, batched)
        out += [("ZMSCORE", key, *s) for key, ps in lookups.scores for s in _spans(ps)]
        out += [("SMEMBERS", key) for key in lookups.registries]
        out += [("HMGET", key, *s) for key, names in lookups.counts for s in _spans(names)]
    out += [("HGET", key, name) for key, name in audit]
    return out


def _seen_values(
    seen: Sequence[tuple[str, Sequence[str | bytes]]], answers: Sequence[Any], at: int
) -> tuple[list[list[Any]], int]:
    """The dedupe lookups' values from ``answers[at]`` on, per lookup, and the next reply.

    Raw: ids' record times, or fingerprint bags. Each command answers its
    fields in order, whatever its chunking: replies are taken until every
    field has one.
    """
    if VALUES_KERNEL is not None:
        return VALUES_KERNEL(seen, answers, at)
    need = sum(len(ids) for _, ids in seen)
    values: list[Any] = []
    while len(values) < need:
        values += answers[at]
        at += 1
    out: list[list[Any]] = []
    start = 0
    for _, ids in seen:
        out.append(values[start : start + len(ids)])
        start += len(ids)
    return out, at


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
        got.seen, at = _seen_values(lookups.seen, answers, at)
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
