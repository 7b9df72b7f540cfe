"""One subscriber's loop: wait for changes, throttle, read, send.

A :class:`Subscription` turns the changes the hub offers into messages, at
most once per its ``interval`` (:mod:`api.live.throttle`): a fresh top-N page
when a change touched the top N (or one of the players shown), and the
subscribed player's rank when a change could have moved it
(:mod:`api.live.relevance`). Pages and ranks come from the shared reads
(:mod:`api.live.reads`). A top-N subscriber whose task is idle and whose
interval has passed is not even woken: the hub makes its push itself
(:meth:`Subscription.push_now`), writing the page's one shared frame to its
connection, and wakes the task only for what must wait (a throttled push, a
full socket buffer, a rank, SSE).

Positions are stream ids. A subscription's ``id`` lists one per stream of
the game (one, or one per shard), joined by ``,``; reconnecting with it
(``Last-Event-ID``) replays what was missed while the stream still holds it,
or says ``gap`` and starts afresh when it was trimmed away.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from api.live import relevance
from api.live.hub import ChangeHub, Subscriber
from api.live.messages import (
    Outgoing,
    Send,
    StreamChange,
    WriteNow,
    outgoing,
    stream_id,
    top_document,
)
from api.live.reads import SharedReads, TopRead, now_ms
from api.live.throttle import MAX_DUE, Throttle
from domain.errors import QueryError
from domain.keys import GroupKeys, shard_tag
from domain.ranking import rank_mode
from readers.boards import RankAnswer
from readers.dense import check_dense


@dataclass(frozen=True, slots=True)
class LiveQuery:
    """What one subscriber watches."""

    game_id: str
    window: str = "alltime"
    top: int = 10
    player_id: str | None = None
    interval_ms: int = 250
    #: How pushed pages and ranks are numbered: unique, competition or dense.
    ranks: str = "unique"


class Subscription:
    """One subscriber: what it was last sent, and the loop that sends the next."""

    def __init__(
        self,
        hub: ChangeHub,
        reads: SharedReads,
        query: LiveQuery,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._hub = hub
        self._reads = reads
        self._query = query
        self._clock = clock
        reader = reads.reader
        config = reader.game(query.game_id)
        board = reader.board(query.game_id, query.window, clock())  # a bad window fails here
        if rank_mode(query.ranks) == "dense":
            check_dense(board)  # a game without distinct-score counts fails here
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
        #: Lowest-wins boards (``order = "asc"``): the relevance rules take it.
        self._ascending = config.ascending
        self._rank: RankAnswer | None = None
        self._throttle = Throttle(query.interval_ms / 1000)
        #: True while the task waits with nothing due: only then may the hub push for it.
        self._idle = False
        self._write_now: WriteNow | None = None
        self.subscriber = Subscriber(
            self.keys,
            watch=(query.game_id, query.window, query.top, query.ranks),
            select_top=self._select_top,
            select_own=self._select_own if query.player_id is not None else None,
            prepare=self._prepare if query.top else None,
            direct=self.push_now if query.top and query.player_id is None else None,
        )

    def _prepare(self) -> Awaitable[TopRead]:
        query = self._query
        return self._reads.top(
            query.game_id, self._window_id(), query.top, self._hub.version, query.ranks
        )

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
        return self._joined(self._positions)

    def _joined(self, positions: dict[str, str]) -> str:
        return ",".join(positions[key] for key in self.keys)

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
            await self._start(send, resume, last_event_id)
            while True:
                await self._next_wake()
                if sub.dropped is not None:
                    return sub.dropped
                sub.wake.clear()
                # Taken at every wake-up, throttled or not: only a subscriber stuck
                # in a send (a client not reading) lets its queue grow.
                self._throttle.add(sub.take())
                now = time.monotonic()
                if self._throttle.pending and self._throttle.ready(now):
                    # Everything up to these positions was offered: the message covers it.
                    self._positions = self._hub.positions(self.keys)
                    await self._push(send, self._throttle.due, first=False)
                    self._throttle.pushed(time.monotonic())
        finally:
            self._hub.detach(sub)

    async def _start(
        self, send: Send, resume: dict[str, str] | None, last_event_id: str | None
    ) -> None:
        """The first messages: ``gap`` if the resume point is gone, then the page and rank."""
        missed: list[StreamChange] = []
        if resume is not None:
            replayed = await self._replay(resume)
            if replayed is None:
                gap = {"lastEventId": last_event_id}
                await send("gap", self.position, outgoing("gap", self.position, gap))
            else:
                missed = self._relevant(replayed)
        await self._push(send, missed, first=True)
        self._throttle.pushed(time.monotonic())

    async def _next_wake(self) -> None:
        """Sleep until woken, or (something due but throttled) until the push may go."""
        sub = self.subscriber
        wait = self._throttle.wait(time.monotonic())
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

    def _top_changes(self, changes: list[StreamChange], window_id: str) -> list[StreamChange]:
        """The changes of the window that may alter the top N last sent."""
        if not self._query.top:
            return []
        shown, floor, ascending = self._shown, self._floor, self._ascending
        touches = relevance.touches_top
        return [c for c in changes if c.window == window_id and touches(c, shown, floor, ascending)]

    def _own_changes(self, changes: list[StreamChange], window_id: str) -> list[StreamChange]:
        """The changes of the window that may move the subscribed player."""
        player = self._query.player_id
        if player is None:
            return []
        mine = self._rank["score"] if self._rank else None
        ascending = self._ascending
        moves = relevance.may_move
        return [c for c in changes if c.window == window_id and moves(c, player, mine, ascending)]

    def _select_top(self, changes: list[StreamChange]) -> list[StreamChange]:
        """The hub's filter for the watch (run once per watch and entry)."""
        return self._top_changes(changes, self._window_id())

    def _select_own(self, changes: list[StreamChange]) -> list[StreamChange]:
        """The hub's filter for this subscriber's own rank."""
        return self._own_changes(changes, self._window_id())

    def _relevant(self, changes: list[StreamChange]) -> list[StreamChange]:
        """Both selections of replayed changes, in stream order, newest kept."""
        window_id = self._window_id()
        top = self._top_changes(changes, window_id)
        own = self._own_changes(changes, window_id)
        if not own:
            return top[-MAX_DUE:]
        chosen = set(map(id, top)) | set(map(id, own))
        return [c for c in changes if id(c) in chosen][-MAX_DUE:]

    async def _push(self, send: Send, changes: list[StreamChange], *, first: bool) -> None:
        """Send a fresh page and/or rank if the (already selected) changes call for it."""
        query = self._query
        window_id = self._window_id()
        version = self._hub.version
        position = self.position
        top = self._top_changes(changes, window_id)
        if query.top and (first or top):
            read = await self._reads.top(query.game_id, window_id, query.top, version, query.ranks)
            self._saw(read)
            await send("top", position, self._page_message(read, position, top))
        player = query.player_id
        if player is not None and (first or self._own_changes(changes, window_id)):
            rank = await self._reads.rank(query.game_id, player, window_id, version, query.ranks)
            if first or rank != self._rank:
                self._rank = rank
                await send("rank", position, outgoing("rank", position, rank))

    def push_now(self) -> bool:
        """Push what the hub just offered, from the hub's loop; False: wake the task instead.

        Only a top-N subscription whose task waits with nothing due, whose
        interval has passed, whose page the hub has just read and whose
        connection takes the frame without waiting: then this is the push
        the task would make (the same selection, message and positions),
        minus the task's wake-up, which is most of a fan-out's cost per subscriber.
        """
        sub = self.subscriber
        write = self._write_now
        if write is None or not self._idle or sub.wake.is_set() or sub.dropped is not None:
            return False
        now = time.monotonic()
        if not self._throttle.ready(now):
            return False
        query = self._query
        window_id = self._window_id()
        read = self._reads.peek_top(
            query.game_id, window_id, query.top, self._hub.version, query.ranks
        )
        if read is None:
            return False
        positions = self._hub.positions(self.keys)
        top = self._top_changes(sub.due[-MAX_DUE:], window_id)
        if top:
            try:
                if not write(self._page_message(read, self._joined(positions), top)):
                    return False  # a full socket buffer: the task waits for it
            except OSError:
                return False  # closing: the task's own send finds out and ends
            self._saw(read)
        sub.take()
        self._positions = positions
        self._throttle.pushed(now)
        return True

    def _saw(self, read: TopRead) -> None:
        """The page sent: from here on the relevance rules judge changes against it."""
        self._shown, self._floor = read.shown, read.floor

    def _page_message(self, read: TopRead, position: str, top: list[StreamChange]) -> Outgoing:
        """The ``top`` message of a page and its changes (made once per watch, shared)."""
        page, ranks = read.page, read.ranks
        return self._reads.encode(
            (id(read), position, *top), lambda: top_document(position, page, ranks, top)
        )
