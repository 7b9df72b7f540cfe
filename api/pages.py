"""A per-process cache of top pages, dropped by the change stream the job writes.

Game backends ask for the same few pages (the top 10 of a board) thousands of
times a second, while a board's top changes a few times a second at most. The
cache keeps each page's JSON, keyed by the request (game, window argument,
limit, offset), and drops it when the server sees a change that could alter
it. It serves a page only while all of these hold:

- the server follows the game's change stream (:meth:`ChangeHub.listen`),
  which the job appends to in the same atomic call that writes the board, and
  the page's read began after that following began and no entry of the game
  arrived while the read was under way (so any change the page misses comes
  later through the stream, and is checked against it);
- no entry since could have altered it: a change of a player on the page, a
  score reaching the page's last score (ties included; "at or below" on a
  lowest-wins board), any removal, and any change at all when nothing
  follows the page (it could appear on it, or create ``nextCursor``);
- it is younger than ``ttl_s``: the bound for writes that do not go
  through the stream (a restore of Redis, a hand-edited key) and for a
  stream read failing (told by the hub: the game's pages are dropped);
- for a relative window (``weekly``), the request's clock is still inside
  the period the page was read for.

Only what the single-read path serves is cached: unsharded boards, offset
pages (no cursor), unique ranks. Everything else reads the board every time.
Concurrent misses of one page share one read when no entry arrived since it
began.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from api.live import ChangeHub, StreamChange
from api.live.relevance import alters_page
from domain.keys import GroupKeys, shard_tag
from domain.windows import Window, WindowKind
from readers.answers import TopPage
from readers.async_boards import AsyncBoardReader

#: Default ``lb serve --page-cache-ms``: the oldest page the cache may serve.
DEFAULT_TTL_MS = 1000
#: Pages kept per process before the cache starts afresh (bounded memory).
MAX_PAGES = 10_000
_RELATIVE = frozenset(kind.value for kind in WindowKind)

#: Renders a page answer as the response body.
Render = Callable[[TopPage], bytes]


@dataclass(frozen=True, slots=True)
class CachedPage:
    """One page's JSON and what decides whether a change can alter it."""

    body: bytes
    window_id: str
    players: frozenset[str]
    #: The last entry's score; None when nothing follows the page (any change counts).
    floor: int | None
    ascending: bool
    expires: float
    #: For a relative window argument: the period the page was read for (epoch ms).
    period: tuple[int, int] | None

    def altered_by(self, change: StreamChange) -> bool:
        """Whether ``change`` could make this page differ from a fresh read."""
        return change.window == self.window_id and alters_page(
            change, self.players, self.floor, self.ascending
        )


_Key = tuple[str, str, int, int]


class PageCache:
    """Top pages as JSON, shared by every request of this process."""

    def __init__(
        self,
        hub: ChangeHub,
        reader: AsyncBoardReader,
        render: Render,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hub = hub
        self._reader = reader
        self._render = render
        self._ttl_s = ttl_s
        self._clock = clock
        self._pages: dict[_Key, CachedPage] = {}
        self._by_game: dict[str, set[_Key]] = {}
        #: Per followed game: entries seen (a read may be kept if this did not move).
        self._seen: dict[str, int] = {}
        self._following: dict[str, asyncio.Future[None]] = {}
        self._reads: dict[_Key, tuple[int, asyncio.Future[bytes]]] = {}
        self.hits = 0
        self.misses = 0

    async def top(self, game: str, window: str, limit: int, offset: int, now_ms: int) -> bytes:
        """The JSON of ``top(game, window, limit, offset)`` (unique ranks), cached if it may be.

        Raises what the reader raises (unknown game, bad window, Redis down).
        """
        key = (game, window, limit, offset)
        page = self._pages.get(key)
        if page is not None:
            if page.expires > self._clock() and (
                page.period is None or page.period[0] <= now_ms < page.period[1]
            ):
                self.hits += 1
                return page.body
            self._forget(game, key)
        self.misses += 1
        reader = self._reader
        board = reader.sync.board(game, window, now_ms)
        if board.sharded:
            return self._render(await reader.top(game, window, limit, offset, now_ms=now_ms))
        following = self._following.get(game)
        if following is None or not following.done() or following.exception() is not None:
            await self._follow(game)
            return self._render(await reader.top(game, window, limit, offset, now_ms=now_ms))
        seen = self._seen[game]
        shared = self._reads.get(key)
        if shared is not None and shared[0] == seen:
            return await asyncio.shield(shared[1])
        read = asyncio.ensure_future(
            self._read(key, board.config.ascending, board.window, now_ms, seen)
        )
        self._reads[key] = (seen, read)
        read.add_done_callback(lambda done: self._read_done(key, done))
        return await asyncio.shield(read)

    def _read_done(self, key: _Key, read: asyncio.Future[bytes]) -> None:
        """A finished read is never joined again (a later request reads afresh or hits)."""
        if self._reads.get(key, (0, None))[1] is read:
            del self._reads[key]
        if not read.cancelled():
            read.exception()  # retrieved here: the requests awaiting it were told

    async def _read(
        self, key: _Key, ascending: bool, window: Window, now_ms: int, seen: int
    ) -> bytes:
        game, spec, limit, offset = key
        started = self._clock()
        answer = await self._reader.top(game, spec, limit, offset, now_ms=now_ms)
        body = self._render(answer)
        if self._seen.get(game) == seen:  # nothing arrived meanwhile: the page is current
            entries = answer["entries"]
            period: tuple[int, int] | None = None
            if spec in _RELATIVE and window.start_ms is not None and window.end_ms is not None:
                period = (window.start_ms, window.end_ms)
            if len(self._pages) >= MAX_PAGES:
                self._pages.clear()
                self._by_game.clear()
            self._pages[key] = CachedPage(
                body,
                answer["window"],
                frozenset(entry["playerId"] for entry in entries),
                entries[-1]["score"] if answer["nextCursor"] is not None and entries else None,
                ascending,
                started + self._ttl_s,
                period,
            )
            self._by_game.setdefault(game, set()).add(key)
        return body

    async def _follow(self, game: str) -> None:
        """Start following ``game``'s change stream (once; again after a failure)."""
        following = self._following.get(game)
        if following is not None and (not following.done() or following.exception() is None):
            await asyncio.shield(following)
            return
        following = self._following[game] = asyncio.get_running_loop().create_future()
        self._seen.setdefault(game, 0)
        stream = GroupKeys(self._reader.sync.namespace, shard_tag(game, None)).changes
        try:
            await self._hub.listen(stream, lambda changes: self._changed(game, changes))
        except Exception as exc:
            following.set_exception(exc)
            following.exception()  # retrieved: a later miss tries again
            raise
        following.set_result(None)

    def _changed(self, game: str, changes: list[StreamChange] | None) -> None:
        """The hub's report for ``game``: drop every page the entry could alter."""
        self._seen[game] = self._seen.get(game, 0) + 1
        keys = self._by_game.get(game)
        if not keys:
            return
        for key in list(keys):
            page = self._pages.get(key)
            if page is None or changes is None or any(map(page.altered_by, changes)):
                self._forget(game, key)

    def _forget(self, game: str, key: _Key) -> None:
        self._pages.pop(key, None)
        keys = self._by_game.get(game)
        if keys is not None:
            keys.discard(key)
