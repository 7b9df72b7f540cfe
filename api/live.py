"""Live pushes: follow the job's change streams and fan changes out to subscribers.

The streaming job appends every board change to its group's capped stream
``<ns>:{<tag>}:changes`` in the same Lua call that writes the board
(:mod:`sinks.boards`), so the stream is exactly the sequence of writes.
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
so a pushed page is exactly what a ``GET`` would have answered. The hub reads
a watched page before it wakes the page's subscribers, so a fan-out to a
thousand of them costs a thousand wake-ups and socket writes, not a thousand
waits for one read; listeners (the page cache of :mod:`api.pages`) are told
of every entry before that read. A top-N subscriber whose task is idle and
whose interval has passed is not even woken: the hub makes its push itself
(:meth:`Subscription.push_now`), writing the page's one shared frame
(:mod:`api.ws_frames`) to its connection, and wakes the task only for what
must wait (a throttled push, a full socket buffer, a rank, SSE).

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
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis

from api.ws_frames import text_frame
from domain.errors import QueryError, ServiceError
from domain.keys import GroupKeys, shard_tag
from readers.async_boards import AsyncBoardReader

#: Stream entries a subscriber may have waiting before it is dropped as too slow.
MAX_PENDING = 1000
#: Entries replayed on reconnect; a client further behind gets ``gap`` instead.
MAX_REPLAY = 5000
#: Entries per XREAD: a burst is delivered in chunks, subscribers draining in between.
READ_COUNT = 200
#: How long one XREAD blocks (also how fast an idle feed notices it is unwatched).
BLOCK_MS = 1000
#: Changes kept for a subscriber's next message (the newest; the page itself is always whole).
MAX_DUE = 1000
#: How long one message may take to leave before the subscriber counts as stuck.
SEND_TIMEOUT_S = 5.0


class StreamChange(NamedTuple):
    """One member's change as the job wrote it (scores decoded; None = not on the board).

    A tuple, not a dataclass: the hub makes one for every change of every
    entry (thousands a second, most of them never pushed), and a tuple is
    made and hashed in C.
    """

    window: str
    player: str
    old: int | None
    new: int | None

    def wire(self, rank: int | None) -> dict[str, Any]:
        """As pushed: ``rank`` is the player's rank on the page sent with it (None: not on it)."""
        return {"playerId": self.player, "old": self.old, "new": self.new, "rank": rank}


def parse_entry(fields: dict[Any, Any]) -> list[StreamChange]:
    """The changes of one stream entry (field ``c``: a JSON list written by the job)."""
    raw = fields.get(b"c", fields.get("c", b"[]"))
    return [
        StreamChange(
            c["w"], c["p"], int(c["o"]) if c["o"] else None, int(c["n"]) if c["n"] else None
        )
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


#: Picks, from one stream entry, the changes a subscriber must be told about.
Select = Callable[[list[StreamChange]], list[StreamChange]]


@dataclass(eq=False)
class Subscriber:
    """What the hub feeds: the relevant changes not yet pushed, and a wake-up.

    Subscribers with equal ``watch`` keys (same game, window and top N) share
    one run of ``select_top`` per stream entry, so an entry costs one filter
    per watch, not per subscriber; ``select_own`` (a player's own rank) runs
    per subscriber.
    """

    keys: tuple[str, ...]
    watch: Hashable
    select_top: Select
    select_own: Select | None = None
    #: Reads the watch's page for the hub's current version (shared): the hub
    #: awaits it once per watch before offering changes that ``select_top`` kept,
    #: so the subscribers it wakes find the page read instead of waiting for it.
    prepare: Callable[[], Awaitable[Any]] | None = None
    #: Pushes what was just offered at once, from the hub's loop, when it can
    #: (:meth:`Subscription.push_now`); False: the hub wakes the subscriber instead.
    direct: Callable[[], bool] | None = None
    due: list[StreamChange] = field(default_factory=list)
    offered: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: str | None = None

    def offer(self, changes: list[StreamChange]) -> bool:
        """Queue one entry's relevant changes; False (and dropped) when too far behind.

        The hub wakes the subscriber (:meth:`notify`) once its whole chunk is offered.
        """
        if self.offered >= MAX_PENDING:
            self.drop(f"too slow: more than {MAX_PENDING} stream entries waiting")
            return False
        self.offered += 1
        self.due += changes
        return True

    def notify(self) -> None:
        """After offers: push them at once if :attr:`direct` can, else wake the subscriber."""
        if self.dropped is None and not (self.direct is not None and self.direct()):
            self.wake.set()

    def take(self) -> list[StreamChange] | None:
        """What was queued since the last take; None when nothing was."""
        if not self.offered:
            return None
        out, self.due, self.offered = self.due, [], 0
        return out

    def drop(self, reason: str) -> None:
        if self.dropped is None:
            self.dropped = reason
        self.due, self.offered = [], 0
        self.wake.set()
        self.gone.set()


#: Told every entry's changes of one stream, or None when the feed failed and
#: restarts (entries may then arrive late): what :class:`api.pages.PageCache` needs.
Listener = Callable[[list[StreamChange] | None], None]


@dataclass(eq=False)
class _Feed:
    key: str
    last_id: str
    watches: dict[Hashable, set[Subscriber]] = field(default_factory=dict)
    listeners: list[Listener] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def deliver(self, changes: list[StreamChange], offered: dict[Subscriber, None]) -> None:
        """Offer one entry's changes; ``offered`` collects who to notify after the chunk."""
        for watch in list(self.watches.values()):
            if not watch:
                continue
            shared = next(iter(watch)).select_top(changes)
            for subscriber in list(watch):
                own = subscriber.select_own(changes) if subscriber.select_own else []
                mine = shared + own if own else shared
                if not mine:
                    continue
                if subscriber.offer(mine):
                    offered[subscriber] = None
                else:
                    watch.discard(subscriber)


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
            for key in subscriber.keys:
                feed = await self._feed(key)
                feed.watches.setdefault(subscriber.watch, set()).add(subscriber)
            return self.positions(subscriber.keys)

    async def listen(self, key: str, listener: Listener) -> None:
        """Tell ``listener`` every entry of ``key`` appended from now on, for good.

        When this returns, the feed's position is fixed: any entry the job
        appends later reaches the listener (also across failed reads, which
        the listener is told about).
        """
        async with self._lock:
            (await self._feed(key)).listeners.append(listener)

    async def _feed(self, key: str) -> _Feed:
        """The feed of ``key``, started at the stream's newest entry if there was none."""
        feed = self._feeds.get(key)
        if feed is None:
            newest = await self._call(self._client.xrevrange, key, "+", "-", count=1)
            feed = _Feed(key, _text(newest[0][0]) if newest else "0-0")
            feed.task = asyncio.create_task(self._follow(feed), name=f"feed {key}")
            self._feeds[key] = feed
        return feed

    def positions(self, keys: tuple[str, ...]) -> dict[str, str]:
        """The last id delivered of each stream (everything up to it was offered)."""
        return {key: self._feeds[key].last_id for key in keys if key in self._feeds}

    def detach(self, subscriber: Subscriber) -> None:
        """Stop feeding ``subscriber`` (its feeds end at their next wake-up if unwatched)."""
        for key in subscriber.keys:
            feed = self._feeds.get(key)
            if feed is not None:
                watch = feed.watches.get(subscriber.watch)
                if watch is not None:
                    watch.discard(subscriber)
                    if not watch:
                        del feed.watches[subscriber.watch]

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
            if not feed.watches and not feed.listeners:
                async with self._lock:
                    if not feed.watches and not feed.listeners:
                        self._feeds.pop(feed.key, None)
                        return
            try:
                reply = await self._client.xread(
                    {feed.key: feed.last_id}, count=READ_COUNT, block=self._block_ms
                )
                failures = 0
            except (redis.RedisError, OSError):
                for listener in feed.listeners:
                    listener(None)
                failures += 1
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            batch = [
                (_text(raw_id), parse_entry(fields))
                for _, entries in reply or ()
                for raw_id, fields in entries
            ]
            if batch:
                self.version += 1
                for listener in feed.listeners:  # first: a cached page goes at once
                    for _, changes in batch:
                        listener(changes)
                await self._prepare(feed, batch)
                # The position moves with the offers, in one step without awaiting:
                # a subscriber's position never covers an entry it was not offered.
                offered: dict[Subscriber, None] = {}
                for entry_id, changes in batch:
                    feed.last_id = entry_id
                    feed.deliver(changes, offered)
                for subscriber in offered:
                    subscriber.notify()
                # Let subscribers take what they were offered before the next chunk
                # (a burst, e.g. the stream a rebuild swaps in, must not look like lag).
                await asyncio.sleep(0)

    @staticmethod
    async def _prepare(feed: _Feed, batch: list[tuple[str, list[StreamChange]]]) -> None:
        """Read, once per watch, the page the batch's changes call for.

        A failed read is left to the subscribers, whose own read tries again.
        """
        reads = []
        for watch in feed.watches.values():
            one = next(iter(watch), None)
            if (
                one is not None
                and one.prepare is not None
                and any(one.select_top(changes) for _, changes in batch)
            ):
                reads.append(one.prepare())
        if reads:
            await asyncio.gather(*reads, return_exceptions=True)

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


@dataclass(frozen=True, slots=True)
class TopRead:
    """A page read for pushes, with what every subscriber derives from it (made once)."""

    page: dict[str, Any]
    shown: frozenset[str]
    #: The last entry's score when the page is full (None: it had room).
    floor: int | None
    ranks: dict[str, int | None]


class SharedReads:
    """Pages and ranks for pushes: one reader call per (question, hub version), shared.

    A read started after the hub delivered version ``v`` sees every change of
    ``v`` (the job writes the board before the stream entry exists), so a
    subscriber needing ``v`` may reuse any read started at ``v`` or later.
    """

    def __init__(self, hub: ChangeHub, reader: AsyncBoardReader) -> None:
        self._hub = hub
        self._async = reader
        self.reader = reader.sync
        self._reads: dict[tuple[Any, ...], tuple[int, asyncio.Future[Any]]] = {}
        self._texts: dict[tuple[Any, ...], Outgoing] = {}
        self._windows: dict[tuple[str, str], tuple[int, str]] = {}

    async def _shared(
        self, key: tuple[Any, ...], version: int, read: Callable[[], Awaitable[Any]]
    ) -> Any:
        found = self._reads.get(key)
        if found is None or found[0] < version or _failed(found[1]):
            if len(self._reads) > 10_000:
                self._reads.clear()
            found = self._reads[key] = (self._hub.version, asyncio.ensure_future(read()))
        future = found[1]
        if future.done():  # the common case with many subscribers: no await, no wrapper
            return future.result()
        return await asyncio.shield(future)

    def window_id(self, game: str, window: str, now_ms: int) -> str:
        """The id of the board ``window`` names at ``now_ms``, resolved at most once a second.

        Shared by every subscriber (resolving it per subscriber and push was a
        measurable share of a fan-out); a clock that moves backwards resolves again.
        """
        key = (game, window)
        found = self._windows.get(key)
        if found is None or not found[0] <= now_ms < found[0] + 1000:
            found = self._windows[key] = (now_ms, self.reader.board(game, window, now_ms).window.id)
        return found[1]

    def encode(self, key: tuple[Any, ...], message: Callable[[], dict[str, Any]]) -> Outgoing:
        """A message, made once (text and frame) for every subscriber sent the same one."""
        found = self._texts.get(key)
        if found is None:
            if len(self._texts) > 1_000:
                self._texts.clear()
            found = self._texts[key] = Outgoing(json.dumps(message(), separators=(",", ":")))
        return found

    def peek_top(self, game: str, window_id: str, n: int, version: int) -> TopRead | None:
        """The page :meth:`top` would answer at once (read at ``version`` or later), or None."""
        found = self._reads.get(("top", game, window_id, n))
        if found is None or found[0] < version or not found[1].done() or _failed(found[1]):
            return None
        read: TopRead = found[1].result()
        return read

    async def top(self, game: str, window_id: str, n: int, version: int) -> TopRead:
        async def read() -> TopRead:
            page = await self._async.top(game, window_id, n, now_ms=_now_ms())
            entries = page["entries"]
            return TopRead(
                dict(page),
                frozenset(entry["playerId"] for entry in entries),
                entries[-1]["score"] if len(entries) >= n else None,
                {entry["playerId"]: entry["rank"] for entry in entries},
            )

        found: TopRead = await self._shared(("top", game, window_id, n), version, read)
        return found

    async def rank(self, game: str, player: str, window_id: str, version: int) -> Any:
        return await self._shared(
            ("rank", game, player, window_id),
            version,
            lambda: self._async.rank(game, player, window_id, now_ms=_now_ms()),
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


class Outgoing:
    """One message as sent: its JSON text, and its WebSocket frame once one is asked for.

    A page pushed to every subscriber of a watch is one ``Outgoing``, so its
    frame is serialised once, not once per subscriber (:mod:`api.ws_frames`).
    """

    __slots__ = ("_frame", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._frame: bytes | None = None

    @property
    def frame(self) -> bytes:
        if self._frame is None:
            self._frame = text_frame(self.text)
        return self._frame


#: ``send(type, id, message)``: deliver one message (its JSON text includes the
#: ``id``, the stream position it reflects; the type and id again for SSE framing).
Send = Callable[[str, str, Outgoing], Awaitable[None]]
#: ``write_now(message)``: write one message at once if the connection takes it
#: without waiting; False (nothing written) otherwise; OSError once it is closing.
WriteNow = Callable[[Outgoing], bool]


def outgoing(kind: str, position: str, body: dict[str, Any]) -> Outgoing:
    """One message: its type, its position, then the body, as JSON."""
    return Outgoing(json.dumps({"type": kind, "id": position, **body}, separators=(",", ":")))


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
        self._positions: dict[str, str] = {}
        self._shown: frozenset[str] = frozenset()
        #: The lowest score on the last full page (None: the page had room).
        self._floor: int | None = None
        #: Lowest-wins boards: a change reaches the page at or *below* its last score.
        self._ascending = config.ascending
        self._rank: dict[str, Any] | None = None
        #: When the last push went out, and how long until the next may (throttle).
        self._last = 0.0
        self._interval = query.interval_ms / 1000
        #: True while the task waits with nothing due: only then may the hub push for it.
        self._idle = False
        self._write_now: WriteNow | None = None
        self.subscriber = Subscriber(
            self.keys,
            watch=(query.game_id, query.window, query.top),
            select_top=self._select_top,
            select_own=self._select_own if query.player_id is not None else None,
            prepare=self._prepare if query.top else None,
            direct=self.push_now if query.top and query.player_id is None else None,
        )

    def _prepare(self) -> Awaitable[TopRead]:
        query = self._query
        return self._reads.top(query.game_id, self._window_id(), query.top, self._hub.version)

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

    async def run(
        self, send: Send, last_event_id: str | None = None, write_now: WriteNow | None = None
    ) -> str:
        """Serve until dropped; returns the reason (the caller closes the connection).

        With ``write_now`` the hub may push a top page for this subscriber itself
        (:meth:`push_now`); every other message goes through ``send``.
        """
        resume = self.parse_position(last_event_id)
        self._write_now = write_now
        sub = self.subscriber
        self._positions = await self._hub.attach(sub)
        try:
            missed: list[StreamChange] = []
            if resume is not None:
                replayed = await self._replay(resume)
                if replayed is None:
                    gap = {"lastEventId": last_event_id}
                    await send("gap", self.position, outgoing("gap", self.position, gap))
                else:
                    missed = self._relevant(replayed)
            await self._push(send, missed, first=True)
            self._last = time.monotonic()
            due: list[StreamChange] = []  # relevant changes not pushed yet
            dirty = False
            while True:
                # Taken at every wake-up, throttled or not: only a subscriber stuck
                # in a send (a client not reading) lets its queue grow.
                wait = max(0.0, self._last + self._interval - time.monotonic()) if dirty else None
                if wait is None:
                    self._idle = True
                    try:
                        await sub.wake.wait()
                    finally:
                        self._idle = False
                elif wait > 0:
                    # asyncio.timeout, not wait_for: no extra task per wake-up.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await sub.wake.wait()
                if sub.dropped is not None:
                    return sub.dropped
                sub.wake.clear()
                taken = sub.take()
                if taken is not None:
                    due = (due + taken)[-MAX_DUE:]
                    dirty = True
                if dirty and time.monotonic() >= self._last + self._interval:
                    # Everything up to these positions was offered: the message covers it.
                    self._positions = self._hub.positions(self.keys)
                    await self._push(send, due, first=False)
                    due, dirty, self._last = [], False, time.monotonic()
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

    def _window_id(self) -> str:
        """The board's window id now (``weekly`` moves on at Monday 00:00 UTC); cached 1 s."""
        return self._reads.window_id(self._query.game_id, self._query.window, self._clock())

    def _select_top(self, changes: list[StreamChange]) -> list[StreamChange]:
        """The changes of this window that touch the top N (run once per watch)."""
        if not self._query.top:
            return []
        window_id = self._window_id()
        return [c for c in changes if c.window == window_id and self._in_top(c)]

    def _select_own(self, changes: list[StreamChange]) -> list[StreamChange]:
        """The changes of this window that may move the subscribed player."""
        window_id = self._window_id()
        player = self._query.player_id
        assert player is not None
        return [c for c in changes if c.window == window_id and self._moves(c, player)]

    def _relevant(self, changes: list[StreamChange]) -> list[StreamChange]:
        """Both selections of replayed changes, in stream order, newest kept."""
        player = self._query.player_id
        top = self._select_top(changes)
        own = self._select_own(changes) if player is not None else []
        if not own:
            return top[-MAX_DUE:]
        chosen = set(map(id, top)) | set(map(id, own))
        return [c for c in changes if id(c) in chosen][-MAX_DUE:]

    async def _push(self, send: Send, changes: list[StreamChange], *, first: bool) -> None:
        """Send a fresh page and/or rank if the (already selected) changes call for it."""
        query = self._query
        window_id = self._window_id()
        mine = [c for c in changes if c.window == window_id]
        version = self._hub.version
        position = self.position
        top = [c for c in mine if self._in_top(c)] if query.top else []
        if query.top and (first or top):
            read = await self._reads.top(query.game_id, window_id, query.top, version)
            self._shown, self._floor = read.shown, read.floor
            await send("top", position, self._top_message(read, position, top))
        player = query.player_id
        if player is not None and (first or any(self._moves(c, player) for c in mine)):
            rank = dict(await self._reads.rank(query.game_id, player, window_id, version))
            if first or rank != self._rank:
                self._rank = rank
                await send("rank", position, outgoing("rank", position, rank))

    def push_now(self) -> bool:
        """Push what the hub just offered, from the hub's loop; False: wake the task instead.

        Only a top-N subscription whose task waits with nothing due, whose
        interval has passed, whose page the hub has just read and whose
        connection takes the frame without waiting: then this is the very
        push the task would make (same message, positions and throttle), minus
        the task's wake-up, which is most of a fan-out's cost per subscriber.
        """
        sub = self.subscriber
        write = self._write_now
        if write is None or not self._idle or sub.wake.is_set() or sub.dropped is not None:
            return False
        now = time.monotonic()
        if now < self._last + self._interval:
            return False
        query = self._query
        window_id = self._window_id()
        read = self._reads.peek_top(query.game_id, window_id, query.top, self._hub.version)
        if read is None:
            return False
        positions = self._hub.positions(self.keys)
        top = [c for c in sub.due[-MAX_DUE:] if c.window == window_id and self._in_top(c)]
        if top:
            position = ",".join(positions[key] for key in self.keys)
            try:
                if not write(self._top_message(read, position, top)):
                    return False  # a full socket buffer: the task waits for it
            except OSError:
                return False  # closing: the task's own send finds out and ends
            self._shown, self._floor = read.shown, read.floor
        sub.take()
        self._positions, self._last = positions, now
        return True

    def _top_message(self, read: TopRead, position: str, top: list[StreamChange]) -> Outgoing:
        """The ``top`` message of a page and its changes (made once per watch, shared)."""
        page, ranks = read.page, read.ranks
        return self._reads.encode(
            (id(read), position, *top),
            lambda: {
                "type": "top",
                "id": position,
                **page,
                "changes": [c.wire(ranks.get(c.player)) for c in top],
            },
        )

    def _in_top(self, change: StreamChange) -> bool:
        """Whether a change may alter the top N.

        It does when it moves a player shown on the last page, or reaches that
        page's last score (ties included; "reaches" is "at or below" on a
        lowest-wins board), or the page had room.
        """
        if change.player in self._shown or self._floor is None:
            return True
        if change.new is None:
            return False
        return change.new <= self._floor if self._ascending else change.new >= self._floor

    def _moves(self, change: StreamChange, player: str) -> bool:
        """Whether a change could have moved the player (them, or anyone at or above them)."""
        mine: int | None = self._rank["score"] if self._rank else None
        if change.player == player or mine is None or change.new is None:
            return True
        return max(change.old or -1, change.new) >= mine
