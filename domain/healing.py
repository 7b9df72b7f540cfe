"""Noticing that Redis lost acknowledged writes, and where to re-read Kafka from.

Redis is a projection of the log; a restart from an older AOF/RDB file, a
replica promoted before it received the last writes, or a flush take back
writes the job had been told were done. Every board group stores, atomically
with its boards, the last offset of each source partition applied to it
(``meta:wm``); only the worker that owns a partition writes that field. So a
stored watermark *below* what the owner last wrote is proof of loss, and the
lost effects are exactly those of the records after the stored value: the
fix is to read the partition again from there.

Across restarts the owner's memory is gone, so each partition also keeps a
progress hash (``<ns>:{@<topic>/<p>}:meta:progress``), written only after the
writes it describes were acknowledged:

* ``@`` -- an offset ``P`` such that every record up to ``P`` was applied to
  every group (a lower bound: it lags by a round);
* ``<tag>`` -- a copy of the watermark the owner last had acknowledged in
  that group.

A restart resumes from the lowest of: Bytewax's snapshot, ``P + 1``, and
``stored + 1`` of every group whose stored watermark is below its copy. A
restore that rolled everything back to one instant (standalone Redis) takes
``P`` back with it; a loss that hit some groups but not the progress hash (a
cluster failover of another master) shows as a group below its copy. Either
way nothing lost stays lost, and re-reading what was not lost is harmless: the
watermark guard skips it.

This module only decides; the board sink reads, writes and rewinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: The progress hash field that holds ``P``; every other field is a group tag.
PROGRESS_FIELD = "@"

#: A stored watermark that is missing (the group never saw the partition, or was flushed).
MISSING = -1


@dataclass
class Divergence:
    """What an audit of the believed watermarks found."""

    #: Pairs whose stored watermark differs from the belief -> what Redis holds.
    corrected: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Watermark field (``<topic>/<p>``) -> the offset to re-read it from.
    rewind_to: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.corrected)


def audit(
    believed: Mapping[tuple[str, str], int], stored: Mapping[tuple[str, str], int | None]
) -> Divergence:
    """Compare beliefs (``(meta:wm key, field) -> offset``) with what Redis holds.

    Lower than believed: writes were lost, re-read the field's partition from
    ``stored + 1`` (the lowest over its groups). Higher: someone else applied
    records (a rebuild swapped in a newer projection); nothing to re-read,
    but the belief and everything cached with it are stale.
    """
    out = Divergence()
    for pair, belief in believed.items():
        value = stored.get(pair)
        now = MISSING if value is None else value
        if now == belief:
            continue
        out.corrected[pair] = now
        if now < belief:
            wm_field = pair[1]
            out.rewind_to[wm_field] = min(out.rewind_to.get(wm_field, now + 1), now + 1)
    return out


def resume_offset(
    snapshot: int | None,
    progress: Mapping[str, int],
    stored: Mapping[str, int | None],
) -> int | None:
    """Where a restarted partition reader starts (None: the beginning of the partition).

    ``snapshot`` is Bytewax's resume offset (None without one), ``progress``
    the partition's progress hash (empty when Redis has none: flushed, or a
    new namespace), ``stored`` the current watermark of each tag it names.
    Without a snapshot the reader starts at the beginning: dead letters are
    acknowledged by another sink, so only Bytewax knows that those before
    ``P`` were written, and replaying from the start is always exact.
    """
    if snapshot is None:
        return None
    start = min(snapshot, progress.get(PROGRESS_FIELD, MISSING) + 1)
    for tag, copy in progress.items():
        if tag == PROGRESS_FIELD:
            continue
        value = stored.get(tag)
        now = MISSING if value is None else value
        if now < copy:
            start = min(start, now + 1)
    return start


def progress_fields(acked: int, copies: Mapping[str, int]) -> dict[str, int]:
    """The progress hash fields to write after a round was acknowledged."""
    return {PROGRESS_FIELD: acked, **copies}
