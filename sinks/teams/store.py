"""The membership write: one atomic Lua call per game and batch piece, no decisions.

Delivery guarantee: every membership record's effect lands exactly once per
game. The call skips records at or below the game's stored watermark for the
record's partition (``teams:wm``) and writes the new watermark in the same
call, so a batch re-read after a crash changes nothing it changed before; and
each record sets a state (the player's team), so the team boards depend on the
last record per player only (docs/DESIGN.md, "Team boards").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters.redis import RedisClient, Script, text
from domain.errors import LeaderboardError
from domain.games import GameConfig
from domain.keys import GroupKeys
from domain.teams import TeamAggregate, TeamKeys
from sinks.boards.dense_union import DENSE_LIB

_HERE = Path(__file__).parent

#: The team helpers every team-aware script starts with (after the shared distinct counts).
TEAM_LIB = DENSE_LIB + (_HERE / "team_lib.lua").read_text()

#: A batch of membership records for one game (``apply_membership.lua``).
APPLY_MEMBERSHIP = Script(TEAM_LIB + (_HERE / "apply_membership.lua").read_text())

#: One game's team state recomputed from its membership and boards (``resync.lua``).
RESYNC = Script(TEAM_LIB + (_HERE / "resync.lua").read_text())

#: Records per Lua call: a bound on how long one call holds Redis.
PIECE = 500


def apply_membership(
    client: RedisClient,
    keys: TeamKeys,
    aggregate: TeamAggregate,
    field: str,
    records: Sequence[tuple[int, str, str | None]],
    through: int,
    *,
    dense: bool = False,
) -> int:
    """Apply ``(offset, player, team or None)`` records of one partition to one game.

    ``through`` is the batch's last offset (dead letters included): the game's
    watermark for ``field`` ends there. ``dense``: the game keeps distinct-score
    counts (``dense_ranks``), moved with the team boards. Returns how many players
    changed team.
    """
    moved = 0
    pieces = [records[at : at + PIECE] for at in range(0, len(records), PIECE)] or [[]]
    for index, piece in enumerate(pieces):
        last = through if index == len(pieces) - 1 else piece[-1][0]
        args: list[object] = [field, last, aggregate.value, keys.prefix, int(dense), len(piece)]
        for offset, player, team in piece:
            args += [offset, player, team or ""]
        moved += int(APPLY_MEMBERSHIP(client, [keys.membership, keys.watermarks, keys.slots], args))
    return moved


def resync_teams(client: RedisClient, namespace: str, games: Mapping[str, GameConfig]) -> int:
    """Recompute the team state of every game in ``games`` that keeps team boards.

    For after boards were replaced wholesale (``lb rebuild``, ``lb backfill``),
    or teams were configured for a game that already has boards. One atomic
    call per game. Returns the windows recomputed.
    """
    done = 0
    for game_id, config in games.items():
        if config.teams is None:
            continue
        keys = TeamKeys(namespace, game_id)
        registry: Any = client.smembers(GroupKeys(namespace, game_id).boards)
        args: list[object] = []
        for window_id in sorted(text(w) for w in registry):
            try:
                args += [window_id, config.codec(config.window(window_id)).slots]
            except LeaderboardError:  # a window the configuration no longer has
                continue
        done += int(
            RESYNC(
                client,
                [keys.membership, keys.slots],
                [
                    config.teams.value,
                    keys.prefix,
                    int(config.dense_ranks),
                    len(args) // 2,
                    *args,
                ],
            )
        )
    return done
