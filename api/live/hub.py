"""The fan-out hub: one blocking ``XREAD`` loop per watched change stream, many subscribers.

The streaming job appends every board change to its group's capped stream
``<ns>:{<tag>}:changes`` in the same Lua call that writes the board
(:mod:`sinks.boards`), so the stream is exactly the sequence of writes.
One :class:`ChangeHub` per server reads each watched stream with one loop,
however many subscribers watch it, and hands every entry to each
subscriber's bounded queue. A subscriber whose queue overflows is dropped
(told why, then disconnected): a slow client never slows the hub, the others
or the server.

The hub reads a watched page before it wakes the page's subscribers
(:attr:`Subscriber.prepare`), so a fan-out to a thousand of them costs a
thousand wake-ups and socket writes, not a thousand waits for one read;
listeners (the page cache of :mod:`api.pages`) are told of every entry before
that read. A subscriber that can be pushed without waking its task is
(:attr:`Subscriber.direct`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from adapters.redis import AsyncRedisClient, text
from api.live.messages import StreamChange, parse_entry
from domain.errors import ServiceError

#: An XREAD reply: per stream, its entries as ``(id, fields)``; None when nothing came.
StreamReply = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] | None

#: Stream entries a subscriber may have waiting before it is dropped as too slow.
MAX_PENDING = 1000
#: Entries replayed on reconnect; a client further behind gets ``gap`` instead.
MAX_REPLAY = 5000
#: Entries per XREAD: a burst is delivered in chunks, subscribers draining in between.
READ_COUNT = 200
#: How long one XREAD blocks (also how fast an idle feed notices it is unwatched).
BLOCK_MS = 1000

#: Picks, from one stream entry, the changes a subscriber must be told about.
Select = Callable[[list[StreamChange]], list[StreamChange]]
#: One stream's entries, oldest first: (entry id, its changes).
Entries = list[tuple[str, list[StreamChange]]]


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
    #: (:meth:`api.live.subscription.Subscription.push_now`); False: wake instead.
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


def _union(
    changes: list[StreamChange], top: list[StreamChange], own: list[StreamChange]
) -> list[StreamChange]:
    """The changes either selection kept, once each, in stream order."""
    kept = {id(change) for change in top} | {id(change) for change in own}
    return [change for change in changes if id(change) in kept]


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
                mine = _union(changes, shared, own) if own else shared
                if not mine:
                    continue
                if subscriber.offer(mine):
                    offered[subscriber] = None
                else:
                    watch.discard(subscriber)

    def tell(self, batch: Entries | None) -> None:
        """Tell the listeners a batch's changes (None: the read failed)."""
        for listener in self.listeners:
            if batch is None:
                listener(None)
                continue
            for _, changes in batch:
                listener(changes)

    async def prepare(self, batch: Entries) -> None:
        """Read, once per watch, the page the batch's changes call for.

        A failed read is left to the subscribers, whose own read tries again.
        """
        reads = []
        for watch in self.watches.values():
            one = next(iter(watch), None)
            if (
                one is not None
                and one.prepare is not None
                and any(one.select_top(changes) for _, changes in batch)
            ):
                reads.append(one.prepare())
        if reads:
            await asyncio.gather(*reads, return_exceptions=True)

    def offer(self, batch: Entries) -> None:
        """Offer a batch to the subscribers, then push or wake each one offered anything.

        The position moves with the offers, in one step without awaiting: a
        subscriber's position never covers an entry it was not offered.
        """
        offered: dict[Subscriber, None] = {}
        for entry_id, changes in batch:
            self.last_id = entry_id
            self.deliver(changes, offered)
        for subscriber in offered:
            subscriber.notify()


class ChangeHub:
    """One XREAD loop per watched change stream, fanned out to its subscribers."""

    def __init__(self, client: AsyncRedisClient, *, block_ms: int = BLOCK_MS) -> None:
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
            feed = _Feed(key, text(newest[0][0]) if newest else "0-0")
            feed.task = asyncio.create_task(self._follow(feed), name=f"feed {key}")
            self._feeds[key] = feed
            # Entries up to ``newest`` were never delivered while nobody followed the
            # stream: a shared read from before then may miss them, so none is reused.
            self.version += 1
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

    async def _unwatched(self, feed: _Feed) -> bool:
        """Whether nobody follows ``feed`` any more (then it is forgotten)."""
        if feed.watches or feed.listeners:
            return False
        async with self._lock:
            if feed.watches or feed.listeners:
                return False
            self._feeds.pop(feed.key, None)
            return True

    async def _follow(self, feed: _Feed) -> None:
        failures = 0
        while not await self._unwatched(feed):
            try:
                reply = cast(
                    StreamReply,
                    await self._client.xread(
                        {feed.key: feed.last_id}, count=READ_COUNT, block=self._block_ms
                    ),
                )
                failures = 0
            except (redis.RedisError, OSError):
                feed.tell(None)
                failures += 1
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            batch = [
                (text(raw_id), parse_entry(fields))
                for _, entries in reply or ()
                for raw_id, fields in entries
            ]
            if batch:
                self.version += 1
                feed.tell(batch)  # first: a cached page goes at once
                await feed.prepare(batch)
                feed.offer(batch)
                # Let subscribers take what they were offered before the next chunk
                # (a burst, e.g. the stream a rebuild swaps in, must not look like lag).
                await asyncio.sleep(0)

    async def replay(self, key: str, after: str, limit: int = MAX_REPLAY) -> Entries | None:
        """The entries after ``after``, or None when some of them were trimmed away."""
        if after == "0-0":
            if not await self._call(self._client.exists, key):
                return []  # no such stream: nothing was missed
            info = await self._call(self._client.xinfo_stream, key)
            if int(info.get("entries-added", 0)) > int(info.get("length", 0)):
                return None
        elif not await self._call(self._client.xrange, key, after, after):
            return None  # trimmed (or never ours): the client must start afresh
        entries = await self._call(self._client.xrange, key, f"({after}", "+", count=limit + 1)
        if len(entries) > limit:
            return None
        return [(text(raw_id), parse_entry(fields)) for raw_id, fields in entries]

    @staticmethod
    async def _call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            raise ServiceError(f"Redis read failed: {exc}") from exc
