"""Duplicates by event id: the symmetric rule over neighbouring record-time buckets.

The rule (:func:`seen_within`) works on *tokens*: what the planner compares
event ids by. :class:`SeenLayout` says what a token is and where Redis keeps it:

* the fingerprint layout (``split > 0``, the default): a token is the top
  bits of a BLAKE2b hash of the event id (the same in every process and every
  replay): a *bag* number below ``split``, then a ``field_bytes`` field. Bucket
  ``b`` of a group keeps its ids in :data:`PARTS` hashes ``meta:seen:<b>:<part>``
  (``part = bag % PARTS``), one field per bag (``bag // PARTS``, decimal) whose
  value is the bag's entries packed back to back: the field bytes, then the
  record time minus the bucket's start (ms, big-endian, exact). A read asks a
  bag per id (one ``HMGET`` per part and bucket for a whole batch) and finds
  the id's entry in it; a write appends to the bags (``apply_group.lua``).
  Sized so a bag holds about :data:`BAG_FILL` ids at the planned rate: ~12
  bytes per id, where a hash of full ids costs ~80;
* the full-id layout (``split == 0``): a token is the event id itself, bucket
  ``b`` one hash ``meta:seen:<b>``, id -> record time.

Two ids with the same fingerprint are one id to the rule: the later copy of
either within the horizon is a duplicate. :func:`false_duplicates_per_day`
gives how often that happens.

The fingerprint layout's per-batch work (tokens, the lookups, what they found,
the appends) also exists compiled, ``lb_native.SeenBags`` (``native/src/seen.rs``):
on a replayed history a batch touches thousands of buckets, and building its
lookups in Python cost up to 20 us per record. A layout uses it whenever it is
built (``compiled=False``: this module's Python, the reference the compiled
twin is tested against, answer for answer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Protocol, cast

from domain.compiled import built
from domain.keys import GroupKeys

#: What the rule compares event ids by: a fingerprint (int) or the id itself.
Token = int | str

#: Ids a bag holds on average at the planned rate (at most; between half and
#: this, the bag count being a power of two). Fewer would cost more bytes per
#: id (each bag is a hash field with ~60 bytes of its own), more would make
#: each lookup read a longer bag.
BAG_FILL = 24

#: Hashes per bucket and group (fewer when there are fewer bags): a bucket's
#: expiry frees one part at a time, a fraction of the bucket's ids each.
PARTS = 16

#: The events per second of one board group the default split is sized for: what
#: one Redis master carries for a game (docs/DEPLOYMENT.md); a hotter game is sharded.
PLANNED_RATE = 20_000

#: Bytes of the fingerprint kept in a bag entry (beside the bag number).
FIELD_BYTES = 6


#: ``HMGET``s (key, bag fields) and, parallel to them, the bucket and tokens each answers for.
Asks = tuple[list[tuple[str, list[str | bytes]]], list[tuple[int, list[Token]]]]


class CompiledBags(Protocol):
    """``lb_native.SeenBags``: the fingerprint layout's methods, compiled (same answers)."""

    def token(self, event_id: str) -> int: ...

    def reads(self, prefix: str, buckets: dict[int, list[Token]]) -> Asks: ...

    def found(
        self, at: list[tuple[int, list[Token]]], values: list[list[bytes | int | None]]
    ) -> dict[int, dict[Token, int]]: ...

    def writes(
        self, prefix: str, written: dict[int, dict[Token, int]]
    ) -> dict[str, dict[str | bytes, int | bytes]]: ...


def compiled_bags(horizon_ms: int, split: int, field_bytes: int, parts: int) -> CompiledBags | None:
    """The compiled twin of a fingerprint layout, or None when ``lb_native`` is not built.

    None too for a layout it cannot hold (tokens over 128 bits): the Python
    methods serve it.
    """
    try:
        return cast("CompiledBags | None", built("SeenBags", horizon_ms, split, field_bytes, parts))
    except ValueError:
        return None


def split_for(rate: int, horizon_ms: int, fill: int = BAG_FILL) -> int:
    """Bags per bucket so that ``rate`` events/s put at most ``fill`` ids in each, on average.

    A power of two (the fingerprint's top bits pick the bag), so the average
    is between ``fill / 2`` and ``fill``. 0 for ``rate <= 0``: the full-id
    layout.
    """
    if rate <= 0:
        return 0
    need = -(-rate * horizon_ms // (1000 * fill))
    return 1 << max(0, need - 1).bit_length()


def false_duplicates_per_day(rate: float, fill: float, field_bytes: int = FIELD_BYTES) -> float:
    """Expected events per day wrongly taken for duplicates (fingerprint collisions).

    Ids meet only in their bag: an event has about ``2 x fill`` ids of its
    bag within the horizon (``fill`` ids per bag and horizon, either side),
    and each such pair is compared once, when the later of the two in the log
    arrives: ``fill`` comparisons per event. Each finds the same
    ``field_bytes`` field by chance with probability ``2 ** -(8 x field_bytes)``,
    so ``rate`` events/s give ``rate x 86,400 x fill / 2 ** (8 x field_bytes)``
    a day.
    """
    return float(rate * 86_400 * fill / 2 ** (8 * field_bytes))


@dataclass(frozen=True, slots=True)
class SeenLayout:
    """How event ids become tokens, and where Redis keeps them (module docstring)."""

    horizon_ms: int
    #: Bags per bucket and group, a power of two; 0: the full-id layout.
    split: int
    field_bytes: int = FIELD_BYTES
    #: Use the compiled twin (``lb_native.SeenBags``) when it is built; False:
    #: this module's Python. The same answers either way.
    compiled: bool = field(default=True, compare=False)
    #: The BLAKE2b digest's size in bytes, and the bits dropped from it for a token.
    _digest: int = field(init=False, repr=False, compare=False)
    _shift: int = field(init=False, repr=False, compare=False)
    #: Bytes of a bag entry's record time, and of the whole entry.
    _value: int = field(init=False, repr=False, compare=False)
    _entry: int = field(init=False, repr=False, compare=False)
    _parts: int = field(init=False, repr=False, compare=False)
    _native: CompiledBags | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.split < 0 or self.split & (self.split - 1):
            raise ValueError(f"the dedupe split must be 0 or a power of two, got {self.split}")
        if not 1 <= self.field_bytes <= 16:
            raise ValueError(f"the dedupe field is 1 to 16 bytes, got {self.field_bytes}")
        bits = 8 * self.field_bytes + max(0, self.split.bit_length() - 1)
        digest = -(-bits // 8)
        value = max(1, -(-(self.horizon_ms - 1).bit_length() // 8))
        object.__setattr__(self, "_digest", digest)
        object.__setattr__(self, "_shift", 8 * digest - bits)
        object.__setattr__(self, "_value", value)
        object.__setattr__(self, "_entry", self.field_bytes + value)
        object.__setattr__(self, "_parts", max(1, min(PARTS, self.split)))
        native = None
        if self.compiled and self.split:
            native = compiled_bags(self.horizon_ms, self.split, self.field_bytes, self._parts)
        object.__setattr__(self, "_native", native)

    @classmethod
    def sized(cls, horizon_ms: int, rate: int = PLANNED_RATE, compiled: bool = True) -> SeenLayout:
        """The layout sized for ``rate`` events/s per group (``rate <= 0``: full ids)."""
        return cls(horizon_ms, split_for(rate, horizon_ms), compiled=compiled)

    @property
    def is_compiled(self) -> bool:
        """Whether the compiled twin serves this layout (built, and asked for)."""
        return self._native is not None

    @property
    def tokenizer(self) -> Callable[[str], Token]:
        """:meth:`token`, compiled when it can be: the planner calls it once per record."""
        return self._native.token if self._native is not None else self.token

    @property
    def entry_bytes(self) -> int:
        """Bytes of one bag entry (fingerprint, then record time); 0 for full ids."""
        return self._entry if self.split else 0

    @property
    def appends(self) -> bool:
        """Whether a write appends to the stored values (bags) rather than sets them."""
        return self.split > 0

    def token(self, event_id: str) -> Token:
        """The token of ``event_id``: the fingerprint's top bits (bag, then field), an int."""
        if not self.split:
            return event_id
        digest = blake2b(event_id.encode(), digest_size=self._digest).digest()
        return int.from_bytes(digest, "big") >> self._shift

    def reads(
        self, keys: GroupKeys, buckets: dict[int, list[Token]]
    ) -> tuple[list[tuple[str, list[str | bytes]]], list[tuple[int, list[Token]]]]:
        """The ``HMGET``s that find the tokens of records of ``buckets``: key and fields.

        Every copy within a horizon of a record sits in the record's bucket or
        one of its two neighbours, so each token is asked in all three; one
        ``HMGET`` per key for all the record buckets that ask it. The second
        list is parallel to the first: the bucket and tokens each ``HMGET``
        answers for (:meth:`stored`).
        """
        if self._native is not None:
            return self._native.reads(keys.seen_parts, buckets)
        if not self.split:
            asked: dict[int, list[Token]] = {}
            for bucket, ids in buckets.items():
                for near in (bucket - 1, bucket, bucket + 1):
                    asked.setdefault(near, []).extend(ids)
            near_ids = [(near, asked[near]) for near in sorted(asked)]
            return [
                (keys.seen(near), cast("list[str | bytes]", ids)) for near, ids in near_ids
            ], near_ids
        bits, parts = 8 * self.field_bytes, self._parts
        low, high = parts - 1, parts.bit_length() - 1  # parts is a power of two
        # Each record bucket's tokens by part (bag fields and tokens), once ...
        grouped: list[tuple[int, dict[int, tuple[list[str | bytes], list[Token]]]]] = []
        for bucket, ids in buckets.items():
            by_part: dict[int, tuple[list[str | bytes], list[Token]]] = {}
            for token in cast("list[int]", ids):
                bag = token >> bits
                got = by_part.get(bag & low)
                if got is None:
                    got = by_part[bag & low] = ([], [])
                got[0].append(str(bag >> high))
                got[1].append(token)
            grouped.append((bucket, by_part))
        # ... then asked in that bucket and both neighbours.
        merged: dict[tuple[int, int], tuple[list[str | bytes], list[Token]]] = {}
        for bucket, by_part in grouped:
            for near in (bucket - 1, bucket, bucket + 1):
                for part, (fields, tokens) in by_part.items():
                    got = merged.get((near, part))
                    if got is None:
                        merged[(near, part)] = (list(fields), list(tokens))
                    else:
                        got[0].extend(fields)
                        got[1].extend(tokens)
        reads: list[tuple[str, list[str | bytes]]] = []
        at: list[tuple[int, list[Token]]] = []
        for near, part in sorted(merged):
            fields, tokens = merged[(near, part)]
            reads.append((keys.seen_part(near, part), fields))
            at.append((near, tokens))
        return reads, at

    def stored(self, bucket: int, token: Token, value: bytes | int) -> int | None:
        """The record time ``token`` has in ``value`` read from ``bucket``, or None."""
        if not self.split:
            return int(value)
        assert isinstance(value, bytes) and isinstance(token, int)
        width, entry = self.field_bytes, self._entry
        needle = (token & ((1 << 8 * width) - 1)).to_bytes(width, "big")
        at = value.find(needle)
        while at >= 0:
            if at % entry == 0:
                offset = int.from_bytes(value[at + width : at + entry], "big")
                return bucket * self.horizon_ms + offset
            at = value.find(needle, at + 1)
        return None

    def found(
        self, at: list[tuple[int, list[Token]]], values: list[list[bytes | int | None]]
    ) -> dict[int, dict[Token, int]]:
        """Per bucket, token -> record time of the applied copies the lookups found.

        ``at`` is :meth:`reads`' second list, ``values`` each read's answers in
        field order (None: no such field). Every bucket asked has a dict, empty
        when nothing was found.
        """
        if self._native is not None:
            return self._native.found(at, values)
        out: dict[int, dict[Token, int]] = {}
        for (bucket, tokens), answers in zip(at, values, strict=True):
            got = out.setdefault(bucket, {})
            for token, value in zip(tokens, answers, strict=True):
                if value is not None:
                    ts = self.stored(bucket, token, value)
                    if ts is not None:
                        got[token] = ts
        return out

    def writes(
        self, keys: GroupKeys, written: dict[int, dict[Token, int]]
    ) -> dict[str, dict[str | bytes, int | bytes]]:
        """What ``written`` (token -> record time per bucket) stores: key -> field -> value.

        With :attr:`appends`, each value is the entries to append to the bag.
        """
        if self._native is not None:
            return self._native.writes(keys.seen_parts, written)
        if not self.split:
            return {
                keys.seen(bucket): cast("dict[str | bytes, int | bytes]", ids)
                for bucket, ids in written.items()
            }
        width, value, parts = self.field_bytes, self._value, self._parts
        bits, mask, entry = 8 * width, (1 << 8 * width) - 1, self._entry
        low, high, shift = parts - 1, parts.bit_length() - 1, 8 * value
        out: dict[str, dict[str | bytes, int | bytes]] = {}
        for bucket, ids in written.items():
            start = bucket * self.horizon_ms
            by_part: list[dict[str | bytes, int | bytes]] = [{} for _ in range(parts)]
            for token, ts in cast("dict[int, int]", ids).items():
                bag = token >> bits
                bags = by_part[bag & low]
                name = str(bag >> high)
                packed = ((token & mask) << shift | (ts - start)).to_bytes(entry, "big")
                before = bags.get(name)
                bags[name] = packed if before is None else cast(bytes, before) + packed
            for part, bags in enumerate(by_part):
                if bags:
                    out[keys.seen_part(bucket, part)] = bags
        return out


def sources(
    bucket: int,
    written: dict[int, dict[Token, int]],
    read: dict[int, dict[Token, int]],
) -> tuple[dict[Token, int], tuple[dict[Token, int], ...]]:
    """The tokens dict a record of ``bucket`` adds to, and every dict its copy may sit in.

    The same rule whether the earlier copy is in Redis (``read``) or earlier in
    this write (``written``): its bucket or a neighbour, within the horizon.
    Only the dicts that hold something: a neighbour's write dict that is empty
    now can only fill with a record of that bucket, and returning to this
    bucket rebuilds the sources; the returned dict itself fills as it goes.
    """
    ids = written.setdefault(bucket, {})
    near = (bucket - 1, bucket + 1)
    found = (
        read.get(bucket),
        *(written.get(b) for b in near),
        *(read.get(b) for b in near),
    )
    return ids, (ids, *(got for got in found if got))


def seen_within(
    sources: tuple[dict[Token, int], ...], token: Token, record_ts: int, horizon_ms: int
) -> bool:
    """Whether ``sources`` record an applied copy of ``token`` within the horizon.

    Symmetric: a copy counts whether its record time is up to ``horizon_ms``
    before *or after* this record's, because two gateway hosts with skewed
    clocks (or a retry through another host) stamp the later copy earlier as
    often as later. Every such copy sits in the record's own bucket or one of
    its two neighbours, so the rule is the same whether the applied copy is in
    Redis or earlier in this batch, and a replay decides identically.
    """
    for seen in sources:
        stored = seen.get(token)
        if stored is not None and -horizon_ms <= record_ts - stored <= horizon_ms:
            return True
    return False
