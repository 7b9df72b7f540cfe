"""Duplicates by event id: the symmetric rule over neighbouring record-time buckets."""

from __future__ import annotations

from domain.keys import GroupKeys


def sources(
    keys: GroupKeys,
    bucket: int,
    written: dict[str, dict[str, int]],
    read: dict[str, dict[str, int]],
) -> tuple[dict[str, int], tuple[dict[str, int], ...]]:
    """The ids dict a record of ``bucket`` adds to, and every dict its copy may sit in.

    The same rule whether the earlier copy is in Redis (``read``) or earlier in
    this write (``written``): its bucket or a neighbour, within the horizon.
    Only the dicts that hold something: a neighbour's write dict that is empty
    now can only fill with a record of that bucket, and returning to this
    bucket rebuilds the sources; the returned ids dict itself fills as it goes.
    """
    bucket_key = keys.seen(bucket)
    ids = written.setdefault(bucket_key, {})
    near = (keys.seen(bucket - 1), keys.seen(bucket + 1))
    found = (
        read.get(bucket_key),
        *(written.get(key) for key in near),
        *(read.get(key) for key in near),
    )
    return ids, (ids, *(got for got in found if got))


def seen_within(
    sources: tuple[dict[str, int], ...], event_id: str, record_ts: int, horizon_ms: int
) -> bool:
    """Whether ``sources`` record an applied copy of ``event_id`` within the horizon.

    Symmetric: a copy counts whether its record time is up to ``horizon_ms``
    before *or after* this record's, because two gateway hosts with skewed
    clocks (or a retry through another host) stamp the later copy earlier as
    often as later. Every such copy sits in the record's own bucket or one of
    its two neighbours, so the rule is the same whether the applied copy is in
    Redis or earlier in this batch, and a replay decides identically.
    """
    for seen in sources:
        stored = seen.get(event_id)
        if stored is not None and -horizon_ms <= record_ts - stored <= horizon_ms:
            return True
    return False
