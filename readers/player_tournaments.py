"""A player's tournaments: each one the player is on, with rank, score and attempts.

:meth:`readers.boards.BoardReader.player_tournaments` answers with this; the
attempts come from ``meta:attempts:<name>`` of the player's shard (one
pipelined read), each standing from :meth:`~readers.boards.BoardReader.rank`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from domain.keys import GroupKeys, shard_of, shard_tag
from domain.ranking import rank_mode
from readers.answers import PlayerTournaments
from readers.board_reads import check_player_id, execute

if TYPE_CHECKING:
    from readers.boards import BoardReader


def player_tournaments(
    reader: BoardReader, game_id: str, player_id: str, *, now_ms: int, ranks: str = "unique"
) -> PlayerTournaments:
    """The game's tournaments that have the player on their board, earliest start first.

    Each with the player's rank, score and percentile on it (as :meth:`rank`)
    and the attempts counted (``meta:attempts:<name>``, written by the job
    with the board). A tournament the player never entered, or left (a
    ``RETRACT``), is not listed. ``now_ms`` only decides ``status``.
    """
    rank_mode(ranks)
    check_player_id(player_id)
    config = reader.game(game_id)
    keys = GroupKeys(reader.namespace, shard_tag(game_id, shard_of(player_id, config.shards)))
    tournaments = sorted(config.tournaments, key=lambda t: (t.start_ms, t.name))
    answer: PlayerTournaments = {"gameId": game_id, "playerId": player_id, "tournaments": []}
    if not tournaments:
        return answer
    pipe = reader.client.pipeline(transaction=False)
    for tournament in tournaments:
        pipe.hget(keys.attempts(tournament.name), player_id)
    for tournament, used in zip(tournaments, execute(pipe), strict=True):
        if used is None:
            continue  # never entered: not on the board
        window = tournament.window
        standing = reader.rank(game_id, player_id, window.id, now_ms=now_ms, ranks=ranks)
        if standing["score"] is None:
            continue  # entered, then removed (RETRACT)
        status: Literal["upcoming", "running", "ended"] = (
            "upcoming"
            if now_ms < tournament.start_ms
            else "running"
            if now_ms < tournament.end_ms
            else "ended"
        )
        answer["tournaments"].append(
            {
                "tournament": tournament.name,
                "window": window.id,
                "startMs": tournament.start_ms,
                "endMs": tournament.end_ms,
                "status": status,
                "rank": standing["rank"],
                "score": standing["score"],
                "percentile": standing["percentile"],
                "attempts": int(used),
                "maxAttempts": tournament.max_attempts,
                "maxEntries": tournament.max_entries,
            }
        )
        if "metadata" in standing:
            answer["tournaments"][-1]["metadata"] = standing["metadata"]
    return answer
