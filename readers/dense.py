"""Dense ranks ("1, 1, 2, 3") from the distinct-score counts the job keeps with a board.

A game with ``dense_ranks = true`` has, beside each board, the sorted set of
its distinct score floors (``meta:dense:s:<window>``) and how many members
hold each (``meta:dense:n:<window>``, ``#`` = members counted), written in the
same atomic call as the board (:mod:`domain.planner.distinct`). A player's
dense rank is then 1 + ``ZCOUNT`` of the floors above theirs: O(log N), one
round trip, read in one MULTI/EXEC with the board's size so the answer is
refused, never wrong, when the counts do not describe the board.

A sharded game's dense rank counts the floors of the game-wide counts
(``<ns>:{<game>}:meta:dense:*``), which follow the shards' writes by one
round trip (:mod:`sinks.boards.dense_union`); the read checks every shard's
own counts are complete and that the game-wide ones are not marked broken, in
the same pipelined round trip (one per node on a cluster): O(S + log N).

Counts are complete when ``#`` equals the board's ``ZCARD``: a board that
existed before its game kept counts (``dense_ranks`` turned on later) keeps a
gap of exactly the members it held then, and reads refuse it until ``lb
rebuild`` recounts it.
"""

from __future__ import annotations

from redis.cluster import RedisCluster

from adapters.redis import RedisClient, text
from domain.errors import QueryError
from domain.ranking import Entry, dense_ranks
from readers.board_reads import Board, execute


class DenseRanksUnavailable(QueryError):
    """The board keeps no (complete) distinct-score counts: a dense rank would be a guess."""


def check_dense(board: Board) -> None:
    """Refuse, before any I/O, a dense read of a game that keeps no distinct-score counts."""
    if not board.config.dense_ranks:
        raise DenseRanksUnavailable(
            f"game {board.game_id!r} keeps no distinct-score counts, so rank_mode=dense "
            f"is not served (set dense_ranks = true in its LB_GAMES table, then lb rebuild)"
        )


def dense_keys(board: Board) -> tuple[str, str]:
    """The counts hash and the distinct-floor set of a board (a sharded game's: game-wide)."""
    head, _, tail = board.keys[0].partition("{")
    tag = tail.split("}", 1)[0]
    if board.sharded:
        tag = tag.rpartition("/")[0]
    prefix = f"{head}{{{tag}}}:"
    return f"{prefix}meta:dense:n:{board.window.id}", f"{prefix}meta:dense:s:{board.window.id}"


def distinct_ahead(client: RedisClient, board: Board, score: int) -> int:
    """How many distinct scores are strictly better than ``score`` on ``board`` (checked)."""
    check_dense(board)
    counts, floors = dense_keys(board)
    better = (board.codec.stored(score) + 1) * board.codec.slots
    if board.sharded:
        return _sharded_ahead(client, board, counts, floors, better)
    ahead, counted, members = counted_ahead(client, board.keys[0], counts, floors, better)
    if ahead is None:
        raise _incomplete(board, counted, members)
    return ahead


def counted_ahead(
    client: RedisClient, board: str, counts: str, values: str, better: int | str
) -> tuple[int | None, int, int]:
    """Distinct values from ``better`` up on one board, if its counts are complete.

    One MULTI/EXEC: the board's size, the members its counts hash holds (``#``)
    and ``ZCOUNT values better +inf``. Returns (that count, or None when the
    counts miss members; members counted; the board's size). Shared by player
    boards (values: score floors) and team boards (values: the aggregates).
    """
    pipe = client.pipeline(transaction=True)
    pipe.zcard(board)
    pipe.hget(counts, "#")
    pipe.zcount(values, better, "+inf")
    members, counted, ahead = execute(pipe)
    complete = int(counted or 0) == int(members)
    return (int(ahead) if complete else None), int(counted or 0), int(members)


def _sharded_ahead(client: RedisClient, board: Board, counts: str, floors: str, better: int) -> int:
    """The game-wide count of a sharded board: one pipelined round trip (per node).

    Each shard's own counts must be complete (``#`` = its ``ZCARD``); the
    game-wide ones follow the shards' writes by one
    round trip (``sinks.boards.dense_union``) and must not be marked broken.
    """
    shard_counts = [
        key.removesuffix(board.window.id) + f"meta:dense:n:{board.window.id}" for key in board.keys
    ]
    applied = counts.removesuffix(f"n:{board.window.id}") + "wm"
    # One MULTI on a standalone Redis; a cluster's pipeline spans slots, so a
    # group write may land between a shard's two reads: read again before refusing.
    atomic = not isinstance(client, RedisCluster)
    for _ in range(1 if atomic else 3):
        pipe = client.pipeline(transaction=atomic)
        for key, hash_key in zip(board.keys, shard_counts, strict=True):
            pipe.zcard(key)
            pipe.hget(hash_key, "#")
        pipe.hget(applied, "!")
        pipe.zcount(floors, better, "+inf")
        replies = execute(pipe)
        sizes = [int(n) for n in replies[0:-2:2]]
        counted = [int(n or 0) for n in replies[1:-2:2]]
        if sizes == counted:
            break
    if sizes != counted:
        raise _incomplete(board, sum(counted), sum(sizes))
    if replies[-2] is not None:
        raise DenseRanksUnavailable(
            f"the game-wide distinct-score counts of game {board.game_id!r} do not follow "
            f"its shards (Redis lost writes: {text(replies[-2])}); run lb rebuild to recount them"
        )
    return int(replies[-1])


def _incomplete(board: Board, counted: int, members: int) -> DenseRanksUnavailable:
    return DenseRanksUnavailable(
        f"board {board.window.id!r} of game {board.game_id!r} has incomplete "
        f"distinct-score counts ({counted} of {members} members "
        f"counted: it predates dense_ranks); run lb rebuild to recount it"
    )


def share_dense(client: RedisClient, board: Board, lines: list[Entry]) -> None:
    """Rewrite consecutive lines' unique ranks as dense ranks, in place."""
    check_dense(board)
    if not lines or lines[0]["rank"] is None:
        return
    first = distinct_ahead(client, board, lines[0]["score"]) + 1
    for line, rank in zip(lines, dense_ranks(lines, first), strict=True):
        line["rank"] = rank
