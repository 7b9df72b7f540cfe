"""The shared-read cache of the pushes: one reader call per (question, hub version).

Pages and ranks come from the same readers as ``GET``, so a pushed page is
exactly what a ``GET`` would have answered. A read started after the hub
delivered version ``v`` sees every change of ``v`` (the job writes the board
before the stream entry exists), so a subscriber needing ``v`` may reuse any
read started at ``v`` or later: a thousand subscribers of one page cost one
read per batch of changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from api.live.hub import ChangeHub
from api.live.messages import Outgoing, compact
from readers.async_boards import AsyncBoardReader
from readers.boards import RankAnswer, TopPage
from readers.profiles import AsyncProfileReader

#: Reads (and encoded messages) kept before the cache starts afresh (bounded memory).
MAX_READS = 10_000
MAX_TEXTS = 1_000


def now_ms() -> int:
    """Epoch milliseconds (which daily/weekly board is current)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class TopRead:
    """A page read for pushes, with what every subscriber derives from it (made once)."""

    page: TopPage
    shown: frozenset[str]
    #: The last entry's score when the page is full (None: it had room).
    floor: int | None
    ranks: dict[str, int | None]

    @classmethod
    def of(cls, page: TopPage, n: int) -> TopRead:
        entries = page["entries"]
        return cls(
            page,
            frozenset(entry["playerId"] for entry in entries),
            entries[-1]["score"] if len(entries) >= n else None,
            {entry["playerId"]: entry["rank"] for entry in entries},
        )


def _failed(future: asyncio.Future[Any]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


class SharedReads:
    """Pages and ranks for pushes: one reader call per (question, hub version), shared."""

    def __init__(
        self,
        hub: ChangeHub,
        reader: AsyncBoardReader,
        profiles: AsyncProfileReader | None = None,
    ) -> None:
        """``profiles``: pushed pages carry each entry's profile (one lookup per shared read)."""
        self._hub = hub
        self._async = reader
        self._profiles = profiles
        self.reader = reader.sync
        self._reads: dict[Hashable, tuple[int, asyncio.Future[Any]]] = {}
        self._texts: dict[Hashable, Outgoing] = {}
        self._windows: dict[tuple[str, str], tuple[int, str]] = {}

    async def _shared(self, key: Hashable, version: int, read: Callable[[], Awaitable[Any]]) -> Any:
        found = self._reads.get(key)
        if found is None or found[0] < version or _failed(found[1]):
            if len(self._reads) > MAX_READS:
                self._reads.clear()
            found = self._reads[key] = (self._hub.version, asyncio.ensure_future(read()))
        future = found[1]
        if future.done():  # the common case with many subscribers: no await, no wrapper
            return future.result()
        return await asyncio.shield(future)

    async def shared(self, key: Hashable, version: int, read: Callable[[], Awaitable[Any]]) -> Any:
        """``read()``'s answer, shared by every caller of ``key`` at ``version`` or later.

        For reads other than the board pages and ranks below (the team boards').
        """
        return await self._shared(key, version, read)

    def window_id(self, game: str, window: str, at_ms: int) -> str:
        """The id of the board ``window`` names at ``at_ms``, resolved at most once a second.

        Shared by every subscriber (resolving it per subscriber and push was a
        measurable share of a fan-out); a clock that moves backwards resolves again.
        """
        key = (game, window)
        found = self._windows.get(key)
        if found is None or not found[0] <= at_ms < found[0] + 1000:
            found = self._windows[key] = (at_ms, self.reader.board(game, window, at_ms).window.id)
        return found[1]

    def encode(self, key: Hashable, message: Callable[[], dict[str, Any]]) -> Outgoing:
        """A message, made once (text and frame) for every subscriber sent the same one."""
        found = self._texts.get(key)
        if found is None:
            if len(self._texts) > MAX_TEXTS:
                self._texts.clear()
            found = self._texts[key] = Outgoing(compact(message()))
        return found

    def peek_top(
        self, game: str, window_id: str, n: int, version: int, ranks: str = "unique"
    ) -> TopRead | None:
        """The page :meth:`top` would answer at once (read at ``version`` or later), or None."""
        found = self._reads.get(("top", game, window_id, n, ranks))
        if found is None or found[0] < version or not found[1].done() or _failed(found[1]):
            return None
        read: TopRead = found[1].result()
        return read

    async def top(
        self, game: str, window_id: str, n: int, version: int, ranks: str = "unique"
    ) -> TopRead:
        async def read() -> TopRead:
            page = await self._async.top(game, window_id, n, now_ms=now_ms(), ranks=ranks)
            if self._profiles is not None:
                await self._profiles.hydrate(page)
            return TopRead.of(page, n)

        found: TopRead = await self._shared(("top", game, window_id, n, ranks), version, read)
        return found

    async def rank(
        self, game: str, player: str, window_id: str, version: int, ranks: str = "unique"
    ) -> RankAnswer:
        found: RankAnswer = await self._shared(
            ("rank", game, player, window_id, ranks),
            version,
            lambda: self._async.rank(game, player, window_id, now_ms=now_ms(), ranks=ranks),
        )
        return found
