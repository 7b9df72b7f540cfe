"""The hot reads on ``redis.asyncio``: top pages, rank and around without a thread per call.

An HTTP server on an event loop should not park a thread per Redis round
trip. The common reads of an unsharded board are one command each (a
``ZREVRANGE`` or one read-only script), so this reader sends them on the
asyncio client and builds the answer with the very same code as
:class:`~readers.boards.BoardReader` (its ``*_plan``/``*_answer``/``parse_*``
halves), so both give identical documents. The rest (cursor pages, sharded
boards, a percentile from a sketch past the exact tier) keeps its multi-step
logic in the synchronous reader, run in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import AsyncRedisClient
from domain.errors import ServiceError
from domain.ranking import rank_mode, visible_rank
from readers import entry_metadata, page_profiles
from readers.board_reads import Board, check_player_id, members_with_scores
from readers.boards import (
    AROUND_SCRIPT,
    RANK_SCRIPT,
    AroundAnswer,
    BoardReader,
    RankAnswer,
    TopPage,
    around_lines,
    rank_reply_header,
    rank_reply_metadata,
)
from readers.profiles import AsyncProfileReader

_Page = TypeVar("_Page", TopPage, AroundAnswer)


async def _call(command: Awaitable[Any]) -> Any:
    try:
        return await command
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis read failed: {exc}") from exc


class AsyncBoardReader:
    """``top``, ``rank`` and ``around`` as coroutines, answering like ``sync``."""

    def __init__(self, sync: BoardReader, client: AsyncRedisClient) -> None:
        self.sync = sync
        self._client = client

    async def top(
        self,
        game_id: str,
        window_spec: str,
        limit: int = 10,
        offset: int = 0,
        cursor: str | None = None,
        *,
        now_ms: int,
        ranks: str = "unique",
        profiles: bool = False,
    ) -> TopPage:
        board, after = self.sync.top_plan(
            game_id, window_spec, limit, offset, cursor, now_ms=now_ms
        )
        if after is not None or board.sharded or rank_mode(ranks) != "unique":
            page = await asyncio.to_thread(
                self.sync.top,
                game_id,
                window_spec,
                limit,
                offset,
                cursor,
                now_ms=now_ms,
                ranks=ranks,
            )
            return await self._hydrated(page, profiles)
        if profiles and page_profiles.one_script(self._client, board):
            keys = page_profiles.keys_of(board, self.sync.namespace)
            args = [page_profiles.meta_flag(board), offset, offset + limit, "1"]
            reply = await _call(page_profiles.TOP_SCRIPT.run_async(self._client, keys, args))
            parts = page_profiles.PageParts(*reply)
            answer = self.sync.top_answer(board, parts.members, offset + 1, limit)
            parts.put(answer["entries"])
            return answer
        return await self._hydrated(await self._top_unique(board, offset, limit), profiles)

    async def _hydrated(self, answer: _Page, profiles: bool) -> _Page:
        """``answer``, its entries given their profiles when ``profiles`` (one round trip)."""
        if profiles:
            await AsyncProfileReader(self._client, self.sync.namespace).hydrate(answer)
        return answer

    async def _top_unique(self, board: Board, offset: int, limit: int) -> TopPage:
        """An unsharded board's offset page, unique ranks, with its metadata."""
        if not entry_metadata.wanted(board, 1):
            pairs = await _call(
                self._client.zrevrange(board.keys[0], offset, offset + limit, withscores=True)
            )
            return self.sync.top_answer(board, members_with_scores(pairs), offset + 1, limit)
        keys, args = entry_metadata.page_keys_args(board, offset, limit + 1)
        reply = await _call(entry_metadata.TOP_SCRIPT.run_async(self._client, keys, args))
        members, metadata = entry_metadata.parse_page(reply)
        answer = self.sync.top_answer(board, members, offset + 1, limit)
        entry_metadata.put(answer["entries"], metadata[: len(answer["entries"])])
        return answer

    async def rank(
        self, game_id: str, player_id: str, window_spec: str, *, now_ms: int, ranks: str = "unique"
    ) -> RankAnswer:
        check_player_id(player_id)
        board = self.sync.board(game_id, window_spec, now_ms)
        if not board.sharded and rank_mode(ranks) == "unique":
            # The player's metadata, and the sketch's header when due, come in the same call.
            keys, args = self.sync.rank_call(board, player_id)
            reply = await _call(RANK_SCRIPT.run_async(self._client, keys, args))
            found, meta = self.sync.parse_rank_reply(reply), rank_reply_metadata(reply)
            if found is None or visible_rank(found[0], board.config.exact_tier) is not None:
                answer = self.sync.rank_answer(board, player_id, found, now_ms=now_ms)
            else:
                # Past the exact tier the percentile comes from the sketch cache,
                # which reads Redis (sync) only when a new sketch was published.
                answer = await asyncio.to_thread(
                    self.sync.rank_answer,
                    board,
                    player_id,
                    found,
                    now_ms=now_ms,
                    header=rank_reply_header(reply),
                )
            if found is not None and meta is not None:
                answer["metadata"] = meta
            return answer
        return await asyncio.to_thread(
            self.sync.rank, game_id, player_id, window_spec, now_ms=now_ms, ranks=ranks
        )

    async def around(
        self,
        game_id: str,
        player_id: str,
        window_spec: str,
        k: int = 5,
        *,
        now_ms: int,
        ranks: str = "unique",
        profiles: bool = False,
    ) -> AroundAnswer:
        board = self.sync.around_plan(game_id, player_id, window_spec, k, now_ms=now_ms)
        if board.sharded or rank_mode(ranks) != "unique":
            return await asyncio.to_thread(
                self.sync.around,
                game_id,
                player_id,
                window_spec,
                k,
                now_ms=now_ms,
                ranks=ranks,
                profiles=profiles,
            )
        if page_profiles.one_script(self._client, board, profiles):
            keys = page_profiles.keys_of(board, self.sync.namespace, profiles)
            args = [page_profiles.meta_flag(board), player_id, k, "1" if profiles else "0"]
            reply = await _call(page_profiles.AROUND_SCRIPT.run_async(self._client, keys, args))
            hydrated, parts = self.sync.around_hydrated_answer(board, reply, k)
            if parts is not None:
                parts.put(around_lines(hydrated))
            return hydrated
        reply = await _call(AROUND_SCRIPT.run_async(self._client, [board.keys[0]], [player_id, k]))
        answer = self.sync.around_answer(board, self.sync.parse_around_reply(reply, k))
        await entry_metadata.attach_async(self._client, board, around_lines(answer))
        return await self._hydrated(answer, profiles)
