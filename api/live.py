"""Live pushes: follow the job's change streams and fan changes out to subscribers.

The streaming job appends every board change to its group's capped stream
``<ns>:{<tag>}:changes`` in the same Lua call that writes the board
(:mod:`sinks.redis_boards`), so the stream is exactly the sequence of writes.
One :class:`ChangeHub` per server reads each watched stream with one blocking
``XREAD`` loop, however many subscribers watch it, and hands every entry to
each subscriber's bounded queue. A subscriber whose queue overflows is
dropped (told why, then disconnected): a slow client never slows the hub, the
others or the server.

A :class:`Subscription` turns entries into messages, at most once per its
``interval``: a fresh top-N page when a change touched the top N (or one of
the players shown), and the subscribed player's rank when a change could have
moved it. Pages and ranks come from the same readers as ``GET`` (one read per
distinct page per batch of changes, shared by every subscriber that needs it),
so a pushed page is exactly what a ``GET`` would have answered.

Positions are stream ids. A subscription's ``id`` lists one per stream of
the game (one, or one per shard), joined by ``,``; reconnecting with it
(``Last-Event-ID``) replays what was missed while the stream still holds it,
or says ``gap`` and starts afresh when it was trimmed away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from domain.errors import QueryError, ServiceError
from domain.keys import GroupKeys, shard_tag
from readers.boards import BoardReader

#: Stream entries a subscriber may have waiting before it is dropped as too slow.
MAX_PENDING = 1000
#: Entries replayed on reconnect; a client further behind gets ``gap`` instead.
MAX_REPLAY = 5000
#: How long one XREAD blocks (also how fast an idle feed notices it is unwatched).
BLOCK_MS = 1000
#: Changes kept for a subscriber's next message (the newest; the page itself is always whole).
MAX_DUE = 1000
#: How long one message may take to leave before the subscriber counts as stuck.
SEND_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class StreamChange:
    """One member's change as the job wrote it (scores decoded; None = not on the board)."""

    window: str
    player: str
    old: int | None
    new: int | None
    rank: int | None  # 1-based rank right after the write, in its own group's board

    def wire(self) -> dict[str, Any]:
        return {"playerId": self.player, "old": self.old, "new": self.new, "rank": self.rank}


def _number(text: str) -> int | None:
    return int(text) if text else None


def parse_entry(fields: dict[Any, Any]) -> list[StreamChange]:
    """The changes of one stream entry (field ``c``: a JSON list written by the job)."""
    raw = fields.get(b"c", fields.get("c", b"[]"))
    return [
        StreamChange(c["w"], c["p"], _number(c["o"]), _number(c["n"]), _number(str(c["r"])))
        for c in json.loads(raw)
    ]


def stream_id(text: str) -> tuple[int, int]:
    """A stream id (``ms-seq``) as a comparable pair; QueryError if it is not one."""
    ms, _, seq = text.partition("-")
    if not (ms.isdigit() and seq.isdigit()) or len(text) > 41:
        raise QueryError(f"not a stream position: {text[:60]!r}")
    return int(ms), int(seq)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(eq=False)
class Subscriber:
    """What the hub feeds: a bounded queue of ``(stream key, id, changes)`` and a flag."""

    keys: tuple[str, ...]
    pending: deque[tuple[str, str, list[StreamChange]]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: str | None = None

    def offer(self, key: str, entry_id: str, changes: list[StreamChange]) -> bool:
        """Queue one entry; False (and dropped) when the subscriber fell too far behind."""
        if len(self.pending) >= MAX_PENDING:
            self.drop(f"too slow: more than {MAX_PENDING} stream entries waiting")
            return False
        self.pending.append((key, entry_id, changes))
        self.wake.set()
        return True

    def drop(self, reason: str) -> None:
        if self.dropped is None:
            self.dropped = reason
        self.pending.clear()
        self.wake.set()
        self.gone.set()


@dataclass(eq=False)
class _Feed:
    key: str
    last_id: str
    subscribers: set[Subscriber] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class ChangeHub:
    """One XREAD loop per watched change stream, fanned out to its subscribers."""

    def __init__(self, client: Any, *, block_ms: int = BLOCK_MS) -> None:
        self._client = client
        self._block_ms = block_ms
        self._feeds: dict[str, _Feed] = {}
        self._lock = asyncio.Lock()
        #: Bumped on every delivery: a read started after version v reflects its entries.
        self.version = 0

    async def attach(self, subscriber: Subscriber) -> dict[str, str]:
        """Start feeding ``subscriber``; the current last id of each of its streams."""
        async with self._lock:
            positions: dict[str, str] = {}
            for key in subscriber.keys:
                feed = self._feeds.get(key)
                if feed is None:
                    newest = await self._call(self._client.xrevrange, key, "+", "-", count=1)
                    feed = _Feed(key, _text(newest[0][0]) if newest else "0-0")
                    feed.task = asyncio.create_task(self._follow(feed), name=f"feed {key}")
                    self._feeds[key] = feed
                feed.subscribers.add(subscriber)
                positions[key] = feed.last_id
            return positions

    def detach(self, subscriber: Subscriber) -> None:
        """Stop feeding ``subscriber`` (its feeds end at their next wake-up if unwatched)."""
        for key in subscriber.keys:
            feed = self._feeds.get(key)
            if feed is not None:
                feed.subscribers.discard(subscriber)

    async def close(self) -> None:
        tasks = [feed.task for feed in self._feeds.values() if feed.task is not None]
        self._feeds.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _follow(self, feed: _Feed) -> None:
        failures = 0
        while True:
            if not feed.subscribers:
                async with self._lock:
                    if not feed.subscribers:
                        self._feeds.pop(feed.key, None)
                        return
            try:
                reply = await self._client.xread({feed.key: feed.last_id}, block=self._block_ms)
                failures = 0
            except (redis.RedisError, OSError):
                failures += 1
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            for _, entries in reply or ():
                for raw_id, fields in entries:
                    entry_id = _text(raw_id)
                    changes = parse_entry(fields)
                    feed.last_id = entry_id
                    for subscriber in list(feed.subscribers):
                        if not subscriber.offer(feed.key, entry_id, changes):
                            feed.subscribers.discard(subscriber)
            if reply:
                self.version += 1

    async def replay(
        self, key: str, after: str, limit: int = MAX_REPLAY
    ) -> list[tuple[str, list[StreamChange]]] | None:
        """The entries after ``after``, or None when some of them were trimmed away."""
        if after == "0-0":
            try:
                info = await self._call(self._client.xinfo_stream, key)
            except ServiceError:
                info = {"entries-added": 0, "length": 0}  # no such stream: nothing missed
            if int(info.get("entries-added", 0)) > int(info.get("length", 0)):
                return None
        elif not await self._call(self._client.xrange, key, after, after):
            return None  # trimmed (or never ours): the client must start afresh
        entries = await self._call(self._client.xrange, key, f"({after}", "+", count=limit + 1)
        if len(entries) > limit:
            return None
        return [(_text(raw_id), parse_entry(fields)) for raw_id, fields in entries]

    @staticmethod
    async def _call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except redis.ResponseError as exc:
            if "no such key" in str(exc).lower():
                raise ServiceError(f"Redis: {exc}") from exc
            raise ServiceError(f"Redis read failed: {exc}") from exc
        except (redis.RedisError, OSError) as exc:
            raise ServiceError(f"Redis read failed: {exc}") from exc


class SharedReads:
    """Pages and ranks for pushes: one reader call per (question, hub version), shared.

    A read started after the hub delivered version ``v`` sees every change of
    ``v`` (the job writes the board before the stream entry exists), so a
    subscriber needing ``v`` may reuse any read started at ``v`` or later.
    """

    def __init__(self, hub: ChangeHub, reader: BoardReader) -> None:
        self._hub = hub
        self.reader = reader
        self._reads: dict[tuple[Any, ...], tuple[int, asyncio.Future[Any]]] = {}

    async def _shared(self, key: tuple[Any, ...], version: int, call: Callable[[], Any]) -> Any:
        found = self._reads.get(key)
        if found is None or found[0] < version or _failed(found[1]):
            if len(self._reads) > 10_000:
                self._reads.clear()
            future = asyncio.ensure_future(asyncio.to_thread(call))
            found = self._reads[key] = (self._hub.version, future)
        return await asyncio.shield(found[1])

    async def top(self, game: str, window_id: str, n: int, version: int) -> Any:
        return await self._shared(
            ("top", game, window_id, n),
            version,
            lambda: self.reader.top(game, window_id, n, now_ms=_now_ms()),
        )

    async def rank(self, game: str, player: str, window_id: str, version: int) -> Any:
        return await self._shared(
            ("rank", game, player, window_id),
            version,
            lambda: self.reader.rank(game, player, window_id, now_ms=_now_ms()),
        )


def _failed(future: asyncio.Future[Any]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LiveQuery:
    """What one subscriber watches."""

    game_id: str
    window: str = "alltime"
    top: int = 10
    player_id: str | None = None
    interval_ms: int = 250


#: ``send(message, id)``: deliver one message; the id is the position it reflects.
Send = Callable[[dict[str, Any], str], Awaitable[None]]


class Subscription:
    """One subscriber's loop: wait for changes, throttle, read, send."""

    def __init__(
        self,
        hub: ChangeHub,
        reads: SharedReads,
        query: LiveQuery,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self._hub = hub
        self._reads = reads
        self._query = query
        self._clock = clock
        reader = reads.reader
        config = reader.game(query.game_id)
        reader.board(query.game_id, query.window, clock())  # a bad window fails here
        tags = (
            [shard_tag(query.game_id, None)]
            if config.shards <= 1
            else [shard_tag(query.game_id, i) for i in range(config.shards)]
        )
        self.keys = tuple(GroupKeys(reader.namespace, tag).changes for tag in tags)
        self.subscriber = Subscriber(self.keys)
        self._positions: dict[str, str] = {}
        self._shown: set[str] = set()
        self._rank: dict[str, Any] | None = None

    def parse_position(self, text: str | None) -> dict[str, str] | None:
        """A ``Last-Event-ID`` as one id per stream; QueryError if it is not ours."""
        if not text:
            return None
        parts = text.split(",")
        if len(parts) != len(self.keys):
            raise QueryError("lastEventId does not belong to this game's streams")
        for part in parts:
            stream_id(part)
        return dict(zip(self.keys, parts, strict=True))

    @property
    def position(self) -> str:
        return ",".join(self._positions[key] for key in self.keys)

    async def run(self, send: Send, last_event_id: str | None = None) -> str:
        """Serve until dropped; returns the reason (the caller closes the connection)."""
        resume = self.parse_position(last_event_id)
        sub = self.subscriber
        self._positions = await self._hub.attach(sub)
        try:
            missed: list[StreamChange] = []
            if resume is not None:
                replayed = await self._replay(resume)
                if replayed is None:
                    await send({"type": "gap", "lastEventId": last_event_id}, self.position)
                else:
                    missed = replayed
            await self._push(send, missed, first=True)
            last = time.monotonic()
            interval = self._query.interval_ms / 1000
            due: list[StreamChange] = []  # relevant changes not pushed yet
            dirty = False
            while True:
                # The queue is drained at every wake-up, throttled or not: only a
                # subscriber stuck in a send (a client not reading) lets it grow.
                wait = max(0.0, last + interval - time.monotonic()) if dirty else None
                if wait is None or wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(sub.wake.wait(), wait)
                if sub.dropped is not None:
                    return sub.dropped
                sub.wake.clear()
                taken = self._take()
                if taken is not None:
                    due = self._relevant(due + taken)
                    dirty = True
                if dirty and time.monotonic() >= last + interval:
                    await self._push(send, due, first=False)
                    due, dirty, last = [], False, time.monotonic()
        finally:
            self._hub.detach(sub)

    async def _replay(self, resume: dict[str, str]) -> list[StreamChange] | None:
        missed: list[StreamChange] = []
        for key, after in resume.items():
            entries = await self._hub.replay(key, after)
            if entries is None:
                return None
            for entry_id, changes in entries:
                if stream_id(entry_id) <= stream_id(self._positions[key]):
                    missed += changes
        # Live entries queued meanwhile come after the replayed ones.
        return missed

    def _take(self) -> list[StreamChange] | None:
        """Queued changes past our positions; None when nothing new was queued."""
        pending = self.subscriber.pending
        if not pending:
            return None
        out: list[StreamChange] = []
        while pending:
            key, entry_id, changes = pending.popleft()
            if stream_id(entry_id) > stream_id(self._positions[key]):
                self._positions[key] = entry_id
                out += changes
        return out

    def _window_id(self) -> str:
        query = self._query
        return self._reads.reader.board(query.game_id, query.window, self._clock()).window.id

    def _relevant(self, changes: list[StreamChange]) -> list[StreamChange]:
        """The changes a push may need (this window; top-N or the player), newest kept."""
        window_id = self._window_id()
        player = self._query.player_id
        kept = [
            c
            for c in changes
            if c.window == window_id
            and (
                (self._query.top and self._in_top(c))
                or (player is not None and self._touches_player([c], player))
            )
        ]
        return kept[-MAX_DUE:]

    async def _push(self, send: Send, changes: list[StreamChange], *, first: bool) -> None:
        query = self._query
        window_id = self._window_id()
        mine = [c for c in changes if c.window == window_id]
        version = self._hub.version
        if query.top and (first or self._touches_top(mine)):
            page = await self._reads.top(query.game_id, window_id, query.top, version)
            self._shown = {entry["playerId"] for entry in page["entries"]}
            relevant = [c.wire() for c in mine if self._in_top(c)]
            message = {"type": "top", **page, "changes": relevant}
            await send(message, self.position)
        player = query.player_id
        if player is not None and (first or self._touches_player(mine, player)):
            rank = dict(await self._reads.rank(query.game_id, player, window_id, version))
            if first or rank != self._rank:
                self._rank = rank
                await send({"type": "rank", **rank}, self.position)

    def _in_top(self, change: StreamChange) -> bool:
        ranked = change.rank is not None and change.rank <= self._query.top
        return ranked or change.player in self._shown

    def _touches_top(self, changes: list[StreamChange]) -> bool:
        return any(self._in_top(c) for c in changes)

    def _touches_player(self, changes: list[StreamChange], player: str) -> bool:
        """Whether a change could have moved the player (anyone at or above them, or them)."""
        mine = self._rank["score"] if self._rank else None
        for c in changes:
            if c.player == player or mine is None:
                return True
            if max(c.old or -1, c.new or -1) >= mine or c.new is None:
                return True
        return False
