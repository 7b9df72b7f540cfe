"""Top pages, a player's rank and percentile, and neighbours: one board, few round trips.

A board is the sorted set ``<ns>:{<game>}:<window id>`` (``domain.keys``), or,
for a game split over ``shards``, one such set per shard tag ``<game>/<i>``
(a player lives in shard ``shard_of(playerId)``). Members are playerIds and
values the exact composite ``score * slots + (slots - 1 - slot)``; answers
show the decoded score. Order, ranks, percentiles and cursors follow
``domain.ranking`` and are documented for users in ``docs/API.md``.

Round trips per call (every command of a trip goes in one pipeline):

=================  ==========================  ==================================
call               unsharded board             sharded board (S keys)
=================  ==========================  ==================================
top, by offset     1 (ZREVRANGE)               1 (ZREVRANGE of the global top-K),
                                               else 2 (+ ZREVRANGE 0..offset+limit
                                               per key)
top, by cursor     1 (ZCOUNT + ties + range)   1 (the same per key)
rank               1 (Lua script, reads only)  2 (ZSCORE; then counts per key)
around             1 (Lua script, reads only)  2 (ZSCORE; then ranges per key)
tournaments        1 (HGET attempts per        the same, with the sharded rank
                   tournament) + 1 rank per
                   tournament entered
=================  ==========================  ==================================

With ``profiles=True`` a top page by offset and an around window of an
unsharded board on a standalone Redis stay one script call, which also reads
the entries' metadata and the players' profiles (:mod:`readers.page_profiles`);
elsewhere the profiles take one more round trip (one per node on a cluster).

The two scripts exist because the second half of each answer depends on the
first (the percentile needs the player's score; the neighbour window needs the
player's rank): in Lua both halves run in one round trip *and* see one
snapshot of the board, so rank, score and percentile always agree. Unsharded
pipelines run as MULTI/EXEC for the same reason (one slot, so this also works
on a cluster). A sharded answer spans several slots and cannot be atomic; it
re-reads the player's value and retries if it moved in between. The scripts
only read; they go out as ``EVALSHA`` (:class:`adapters.redis.Script`) rather
than ``EVALSHA_RO`` because redis-py's cluster client routes ``EVALSHA`` by its
key locally but asks the server (``COMMAND GETKEYS``, one more round trip)
where the read-only variant goes.

**Global top-K.** An offset page of a sharded board is served from the key
``<ns>:{<game>}:top:<window id>`` (:mod:`domain.topk`) that ``lb topk run``
(:mod:`jobs.topk_merger`) rebuilds every second from the shards' tops: one
command on one node instead of a merge of S listings. It is used only when it
holds the whole page plus the one member after it (so ``nextCursor`` is
exact), which is every page with ``offset + limit <= K`` once the board has
more than K members; otherwise (no merger running, a short board's last page)
the shards are merged live as before. The key is up to one merge period
behind the shards; cursor pages, ``rank`` and ``around`` always read the
shards.

The module is :class:`BoardReader` (about 400 lines): each query's plan, reads
and answer are its methods because the asyncio face
(:mod:`readers.async_boards`) reuses the plan and answer halves around its own
reads. The reads that differ for sharded boards are in
:mod:`readers.board_reads`, a player's tournaments in
:mod:`readers.player_tournaments`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.redis import RedisClient, Script, text_of
from domain.errors import QueryError
from domain.games import GameCatalog, GameConfig
from domain.keys import LIVE_NAMESPACE, GroupKeys, entry_metadata_key, shard_tag
from domain.ranking import (
    MAX_K,
    MAX_LIMIT,
    Cursor,
    Entry,
    Member,
    competition_ranks,
    composite_of,
    entries,
    percentile,
    rank_mode,
    split_window,
    visible_rank,
)
from domain.sketches import HEADER_SIZE, sketch_key
from domain.topk import global_top_key
from domain.windows import Window, WindowKind
from readers import entry_metadata, page_profiles
from readers.answers import (
    AroundAnswer,
    PlayerTournament,
    PlayerTournaments,
    RankAnswer,
    TopPage,
)
from readers.board_reads import (
    MAX_SHARDED_DEPTH,
    Board,
    around_sharded,
    call,
    check_player_id,
    execute,
    flat_members,
    members_with_scores,
    page_after_position,
    page_at,
    rank_sharded,
)
from readers.dense import check_dense, distinct_ahead, share_dense
from readers.player_tournaments import player_tournaments
from readers.profiles import ProfileReader
from readers.sketches import SketchCache, approximate_percentile

#: A published sketch older than this is not used (the exact count is).
SKETCH_MAX_AGE_MS = 10 * 60_000

__all__ = [
    "MAX_SHARDED_DEPTH",
    "AroundAnswer",
    "Board",
    "BoardReader",
    "PlayerTournament",
    "PlayerTournaments",
    "RankAnswer",
    "TopPage",
    "UnknownGameError",
    "call",
    "execute",
    "flat_members",
    "members_with_scores",
]

#: KEYS[1] board, KEYS[2] its entry-metadata hash, KEYS[3] its published sketch;
#: ARGV[1] playerId, ARGV[2] slots, ARGV[3] "1" to read the player's metadata too,
#: ARGV[4] "1" to read the sketch's header too (one round trip: a reader waits
#: behind the job's writes once, not twice). Returns {0-based ZREVRANK or nil,
#: composite text or nil, ZCARD, lower-score count or nil, metadata or nil,
#: sketch header or nil ("" when none is published)}.
RANK_SCRIPT = Script(
    """
local n = redis.call('ZCARD', KEYS[1])
local c = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not c then return {false, false, n, false, false, false} end
local r = redis.call('ZREVRANK', KEYS[1], ARGV[1])
local v = tonumber(c)
local floor = v - math.fmod(v, tonumber(ARGV[2]))
local lower = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. string.format('%.17g', floor))
local meta = false
if ARGV[3] == '1' then meta = redis.call('HGET', KEYS[2], ARGV[1]) end
local head = false
if ARGV[4] == '1' then head = redis.call('GETRANGE', KEYS[3], 0, ARGV[5]) end
return {r, c, n, lower, meta, head}
"""
)


def rank_keys_args(
    board: Board, player_id: str, sketch: str, header: bool
) -> tuple[list[str], list[Any]]:
    """:data:`RANK_SCRIPT`'s keys and arguments for ``player_id`` on an unsharded board.

    ``sketch`` is the board's published-sketch key (in the board's hash tag);
    ``header`` asks for its header too (:meth:`SketchCache.wants_header`).
    """
    key = board.keys[0]
    wanted = "1" if entry_metadata.wanted(board, 1) else "0"
    return [key, entry_metadata_key(key), sketch], [
        player_id,
        board.codec.slots,
        wanted,
        "1" if header else "0",
        HEADER_SIZE - 1,
    ]


def rank_reply_header(reply: Sequence[Any]) -> bytes | None:
    """The sketch header in a :data:`RANK_SCRIPT` reply (None: not asked; b"": none published)."""
    return None if reply[5] is None else bytes(reply[5])


def rank_reply_metadata(reply: Sequence[Any]) -> str | None:
    """The player's entry metadata in a :data:`RANK_SCRIPT` reply (None: none or not asked)."""
    return None if reply[4] is None else text_of(reply[4])


#: KEYS[1] board; ARGV[1] playerId, ARGV[2] k.
#: Returns nil, or {0-based ZREVRANK, {member, composite, ...} of ranks r-k .. r+k}.
AROUND_SCRIPT = Script(
    """
local r = redis.call('ZREVRANK', KEYS[1], ARGV[1])
if not r then return false end
local k = tonumber(ARGV[2])
local lo = r - k
if lo < 0 then lo = 0 end
return {r, redis.call('ZREVRANGE', KEYS[1], lo, r + k, 'WITHSCORES')}
"""
)


def around_lines(answer: AroundAnswer) -> list[Entry]:
    """An around answer's lines in board order (none when the player has no score)."""
    if answer["player"] is None:
        return []
    return [*answer["above"], answer["player"], *answer["below"]]


class UnknownGameError(QueryError):
    """The game is not served by the catalog (HTTP 404 rather than 400).

    A :class:`QueryError` so callers that only know the base class still treat
    it as the caller's mistake.
    """


def _check_int(name: str, value: int, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise QueryError(f"{name} must be {bound}, got {value}")


class BoardReader:
    """Answers ``top``, ``rank`` and ``around`` for every game of a catalog.

    Stateless apart from the client, so one instance serves many threads (the
    redis-py client pools its connections). ``now_ms`` is always an argument:
    it only picks the current daily/weekly board, and passing it in keeps "the
    current week" testable and the same for every reader of one request.
    """

    def __init__(
        self, client: RedisClient, catalog: GameCatalog, namespace: str = LIVE_NAMESPACE
    ) -> None:
        if not namespace or any(c in namespace for c in "{}: "):
            raise QueryError(f"namespace must be non-empty without {{}}: or spaces: {namespace!r}")
        self._client: RedisClient = client
        self._catalog = catalog
        self.namespace = namespace
        self._sketches = SketchCache()

    # -- resolution -------------------------------------------------------------------

    @property
    def client(self) -> RedisClient:
        """The Redis client it reads with."""
        return self._client

    def game(self, game_id: str) -> GameConfig:
        """The rules of ``game_id``; :class:`UnknownGameError` if it is not served."""
        config = self._catalog.lookup(game_id) if isinstance(game_id, str) else None
        if config is None:
            raise UnknownGameError(f"unknown game {str(game_id)[:80]!r}")
        return config

    def board(self, game_id: str, window_spec: str, now_ms: int) -> Board:
        """Resolve a game and a window argument (``weekly``, ``daily:2026-05-04``, ...)."""
        config = self.game(game_id)
        if not isinstance(window_spec, str):
            raise QueryError(f"window must be a string, got {window_spec!r}")
        return self._board(game_id, config, config.parse_window(window_spec, now_ms))

    def _board(self, game_id: str, config: GameConfig, window: Window) -> Board:
        if not config.keeps(window.kind):
            kept = ", ".join(kind.value for kind in config.kept_kinds())
            raise QueryError(
                f"game {game_id!r} keeps no {window.kind.value} board (it keeps: {kept})"
            )
        shards = config.shards
        tags = (
            [shard_tag(game_id, None)]
            if shards <= 1
            else [shard_tag(game_id, i) for i in range(shards)]
        )
        keys = tuple(GroupKeys(self.namespace, tag).board(window.id) for tag in tags)
        top_key = global_top_key(self.namespace, game_id, window.id) if shards > 1 else None
        return Board(game_id, config, window, config.codec(window), keys, top_key)

    def _cursor_board(self, game_id: str, window_spec: str, cursor: Cursor, now_ms: int) -> Board:
        """The board a cursor was issued for, checked against the request.

        A cursor pins its window: paging through "weekly" keeps listing the
        week it started on even if a new week begins between two pages. An
        explicit window must name that same board.
        """
        config = self.game(game_id)
        if cursor.game_id != game_id:
            raise QueryError("invalid cursor: it was issued for another game")
        window = config.window(cursor.window_id)
        kinds = {kind.value for kind in WindowKind}
        if window_spec in kinds:
            if window.kind.value != window_spec:
                raise QueryError("invalid cursor: it was issued for another window")
        else:
            config.parse_window(window_spec, now_ms)  # a malformed spec is reported as such
            if window_spec != cursor.window_id:
                raise QueryError("invalid cursor: it was issued for another window")
        return self._board(game_id, config, window)

    # -- top --------------------------------------------------------------------------

    def top(
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
        """One page of the board, best first, by ``offset`` or after a ``cursor``.

        ``nextCursor`` names the page's last entry and is None when nothing
        follows. A cursor and a non-zero offset together are refused: they would
        name two different starting points. ``ranks="competition"`` gives equal
        scores one shared rank (one more O(log N) count per key); ``ranks="dense"``
        also gives the next score the next rank (``readers.dense``: one O(log N)
        count, on games that keep distinct-score counts). ``profiles=True`` gives
        every entry its player's profile (``readers.page_profiles``: in the same
        script call as the page where one script reaches both).
        """
        mode = rank_mode(ranks)
        board, after = self.top_plan(game_id, window_spec, limit, offset, cursor, now_ms=now_ms)
        metadata: list[str | None] | None = None
        if mode == "dense":
            check_dense(board)
        if profiles and after is None and page_profiles.one_script(self._client, board):
            return self._top_hydrated(mode, board, offset, limit)
        if after is not None:
            members, first_rank = page_after_position(
                self._client, board, after.position, limit + 1
            )
        elif not board.sharded and entry_metadata.wanted(board, 1):
            members, metadata = entry_metadata.page_at(self._client, board, offset, limit + 1)
            first_rank = offset + 1
        else:
            members, first_rank = page_at(self._client, board, offset, limit + 1)
        answer = self.top_answer(board, members, first_rank, limit)
        self._other_ranks(mode, board, answer["entries"])
        if metadata is None:
            entry_metadata.attach(self._client, board, answer["entries"])
        else:
            entry_metadata.put(answer["entries"], metadata[: len(answer["entries"])])
        if profiles:
            ProfileReader(self._client, self.namespace).hydrate(answer)
        return answer

    def _top_hydrated(self, mode: str, board: Board, offset: int, limit: int) -> TopPage:
        """An offset page with its metadata and profiles: one script call."""
        keys = page_profiles.keys_of(board, self.namespace)
        args = [page_profiles.meta_flag(board), offset, offset + limit, "1"]
        parts = page_profiles.PageParts(*call(page_profiles.TOP_SCRIPT, self._client, keys, args))
        answer = self.top_answer(board, parts.members, offset + 1, limit)
        parts.put(answer["entries"])
        self._other_ranks(mode, board, answer["entries"])
        return answer

    # -- competition ranks ("1224") ---------------------------------------------------

    def _ahead_on_score(self, board: Board, score: int) -> int:
        """How many players have a strictly better score: one ZCOUNT per key, O(log N)."""
        floor = (board.codec.stored(score) + 1) * board.codec.slots
        pipe = self._client.pipeline(transaction=False)
        for key in board.keys:
            pipe.zcount(key, floor, "+inf")
        return sum(int(n) for n in execute(pipe))

    def _other_ranks(self, mode: str, board: Board, lines: list[Entry]) -> None:
        """Consecutive lines' unique ranks rewritten in ``mode`` (competition, dense), in place."""
        if mode == "competition":
            self._share_ranks(board, lines)
        elif mode == "dense":
            share_dense(self._client, board, lines)

    def _share_ranks(self, board: Board, lines: list[Entry]) -> None:
        """Rewrite consecutive lines' unique ranks as competition ranks, in place."""
        if not lines or lines[0]["rank"] is None:
            return
        first = self._ahead_on_score(board, lines[0]["score"]) + 1
        for line, rank in zip(lines, competition_ranks(lines, first), strict=True):
            line["rank"] = rank

    def top_plan(
        self,
        game_id: str,
        window_spec: str,
        limit: int,
        offset: int,
        cursor: str | None,
        *,
        now_ms: int,
    ) -> tuple[Board, Cursor | None]:
        """Validate a ``top`` request (no I/O): its board, and the decoded cursor if any."""
        _check_int("limit", limit, 1, MAX_LIMIT)
        _check_int("offset", offset, 0, None)
        if cursor is None:
            return self.board(game_id, window_spec, now_ms), None
        after = Cursor.decode(cursor)
        if offset:
            raise QueryError("give either cursor or offset, not both")
        return self._cursor_board(game_id, window_spec, after, now_ms), after

    @staticmethod
    def top_answer(board: Board, members: list[Member], first_rank: int, limit: int) -> TopPage:
        """The page from up to ``limit + 1`` members read (the extra one says more follow)."""
        page = members[:limit]
        next_cursor = None
        if len(members) > limit:
            last = page[-1]
            next_cursor = Cursor(
                board.game_id, board.window.id, last.composite, last.player_id
            ).encode()
        return {
            "window": board.window.id,
            "entries": entries(page, first_rank, board.codec, board.config.exact_tier),
            "nextCursor": next_cursor,
        }

    # -- rank -------------------------------------------------------------------------

    def rank(
        self,
        game_id: str,
        player_id: str,
        window_spec: str,
        *,
        now_ms: int,
        ranks: str = "unique",
    ) -> RankAnswer:
        """A player's rank, score and percentile; all None when they have no score.

        ``rank`` is also None, with score and percentile given, when the player
        is ranked beyond the game's ``exact_tier``. With ``ranks="competition"``
        the rank is 1 + the players with a strictly better score.
        """
        mode = rank_mode(ranks)
        check_player_id(player_id)
        board = self.board(game_id, window_spec, now_ms)
        if mode == "dense":
            check_dense(board)
        header: bytes | None = None
        if board.sharded:
            found, meta = rank_sharded(self._client, board, player_id), None
        else:
            reply = call(RANK_SCRIPT, self._client, *self.rank_call(board, player_id))
            found, meta = self.parse_rank_reply(reply), rank_reply_metadata(reply)
            header = rank_reply_header(reply)
        answer = self.rank_answer(board, player_id, found, now_ms=now_ms, header=header)
        if answer["rank"] is not None and answer["score"] is not None:
            if mode == "competition":
                answer["rank"] = self._ahead_on_score(board, answer["score"]) + 1
            elif mode == "dense":
                answer["rank"] = distinct_ahead(self._client, board, answer["score"]) + 1
        if answer["score"] is not None:
            if board.sharded:
                (meta,) = entry_metadata.metadata_of(self._client, board, [player_id])
            if meta is not None:
                answer["metadata"] = meta
        return answer

    def rank_call(self, board: Board, player_id: str) -> tuple[list[str], list[Any]]:
        """:data:`RANK_SCRIPT`'s keys and arguments, asking for the sketch header when due."""
        sketch = sketch_key(self.namespace, board.game_id, board.window.id)
        return rank_keys_args(board, player_id, sketch, self._sketches.wants_header(sketch))

    def rank_answer(
        self,
        board: Board,
        player_id: str,
        found: tuple[int, int, int, int] | None,
        *,
        now_ms: int,
        header: bytes | None = None,
    ) -> RankAnswer:
        """The answer from ``(rank, composite, lower, total)``; past the tier, reads a sketch.

        ``header`` is the sketch's header if the rank call read it: the sketch
        then costs no round trip unless a new one was published.
        """
        answer: RankAnswer = {
            "window": board.window.id,
            "playerId": player_id,
            "rank": None,
            "score": None,
            "percentile": None,
        }
        if found is not None:
            rank, composite, lower, total = found
            score = board.codec.split(composite)[0]
            answer["rank"] = visible_rank(rank, board.config.exact_tier)
            answer["score"] = score
            approximate = None
            if answer["rank"] is None:
                # Beyond the exact tier the percentile comes from the published
                # sketch (docs/PERCENTILES.md); the exact count is the fallback.
                approximate = approximate_percentile(
                    self._client,
                    self.namespace,
                    board.game_id,
                    board.config,
                    board.window,
                    score,
                    now_ms=now_ms,
                    max_age_ms=SKETCH_MAX_AGE_MS,
                    cache=self._sketches,
                    header=header,
                )
                if approximate is not None:
                    # A player past the tier has at least exact_tier players above.
                    ceiling = percentile(max(0, total - board.config.exact_tier - 1), total)
                    approximate = min(approximate, ceiling)
            answer["percentile"] = (
                approximate if approximate is not None else percentile(lower, total)
            )
        return answer

    @staticmethod
    def parse_rank_reply(reply: Sequence[Any]) -> tuple[int, int, int, int] | None:
        """``(rank, composite, lower, total)`` from RANK_SCRIPT's reply; None without a score."""
        rank0, raw, total, lower = reply[:4]
        if raw is None:
            return None
        return int(rank0) + 1, composite_of(raw), int(lower), int(total)

    # -- a player's tournaments ---------------------------------------------------------

    def player_tournaments(
        self, game_id: str, player_id: str, *, now_ms: int, ranks: str = "unique"
    ) -> PlayerTournaments:
        """The game's tournaments that have the player on their board, earliest start first.

        Each with the player's rank, score and percentile on it (as :meth:`rank`)
        and the attempts counted (``meta:attempts:<name>``, written by the job
        with the board). A tournament the player never entered, or left (a
        ``RETRACT``), is not listed. ``now_ms`` only decides ``status``.
        """
        return player_tournaments(self, game_id, player_id, now_ms=now_ms, ranks=ranks)

    # -- around -----------------------------------------------------------------------

    def around(
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
        """The ``k`` players right above and right below a player (fewer at the edges).

        ``profiles=True`` gives every line its player's profile, as :meth:`top`.
        """
        mode = rank_mode(ranks)
        board = self.around_plan(game_id, player_id, window_spec, k, now_ms=now_ms)
        if mode == "dense":
            check_dense(board)
        if page_profiles.one_script(self._client, board, profiles):
            return self._around_one_call(mode, board, player_id, k, profiles)
        found = (
            around_sharded(self._client, board, player_id, k)
            if board.sharded
            else self._around_single(board, player_id, k)
        )
        answer = self.around_answer(board, found)
        if answer["player"] is not None:
            lines = [*answer["above"], answer["player"], *answer["below"]]
            self._other_ranks(mode, board, lines)
        entry_metadata.attach(self._client, board, around_lines(answer))
        if profiles:
            ProfileReader(self._client, self.namespace).hydrate(answer)
        return answer

    def _around_one_call(
        self, mode: str, board: Board, player_id: str, k: int, profiles: bool
    ) -> AroundAnswer:
        """The around window with its metadata (and profiles if asked): one script call."""
        keys = page_profiles.keys_of(board, self.namespace, profiles)
        args = [page_profiles.meta_flag(board), player_id, k, "1" if profiles else "0"]
        reply = call(page_profiles.AROUND_SCRIPT, self._client, keys, args)
        answer, parts = self.around_hydrated_answer(board, reply, k)
        lines = around_lines(answer)
        self._other_ranks(mode, board, lines)
        if parts is not None:
            parts.put(lines)
        return answer

    def around_hydrated_answer(
        self, board: Board, reply: Sequence[Any] | None, k: int
    ) -> tuple[AroundAnswer, page_profiles.PageParts | None]:
        """The answer (ranks unique) and its page's parts from ``page_profiles.AROUND_SCRIPT``."""
        if reply is None:
            return self.around_answer(board, None), None
        rank0, page, metadata, found = reply
        parts = page_profiles.PageParts(page, metadata, found)
        above, me, below = split_window(parts.members, rank0 - max(0, rank0 - k))
        return self.around_answer(board, (rank0 + 1, above, me, below)), parts

    def around_plan(
        self, game_id: str, player_id: str, window_spec: str, k: int, *, now_ms: int
    ) -> Board:
        """Validate an ``around`` request (no I/O); its board."""
        check_player_id(player_id)
        _check_int("k", k, 0, MAX_K)
        return self.board(game_id, window_spec, now_ms)

    @staticmethod
    def around_answer(
        board: Board, found: tuple[int, list[Member], Member, list[Member]] | None
    ) -> AroundAnswer:
        """The answer from ``(rank, above, player, below)`` (None: the player has no score)."""
        answer: AroundAnswer = {"window": board.window.id, "above": [], "player": None, "below": []}
        if found is not None:
            rank, above, me, below = found
            tier = board.config.exact_tier
            answer["above"] = entries(above, rank - len(above), board.codec, tier)
            answer["player"] = entries([me], rank, board.codec, tier)[0]
            answer["below"] = entries(below, rank + 1, board.codec, tier)
        return answer

    def _around_single(
        self, board: Board, player_id: str, k: int
    ) -> tuple[int, list[Member], Member, list[Member]] | None:
        reply = call(AROUND_SCRIPT, self._client, [board.keys[0]], [player_id, k])
        return self.parse_around_reply(reply, k)

    @staticmethod
    def parse_around_reply(
        reply: Sequence[Any] | None, k: int
    ) -> tuple[int, list[Member], Member, list[Member]] | None:
        """``(rank, above, player, below)`` from AROUND_SCRIPT's reply; None without a score."""
        if reply is None:
            return None
        rank0, flat = int(reply[0]), reply[1]
        above, me, below = split_window(flat_members(flat), rank0 - max(0, rank0 - k))
        return rank0 + 1, above, me, below
