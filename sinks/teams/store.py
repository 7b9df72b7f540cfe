"""The membership write: one atomic Lua call per game and batch piece, no decisions.

Delivery guarantee: every membership record's effect lands exactly once per
game. The call skips records at or below the game's stored watermark for the
record's partition (``teams:wm``) and writes the new watermark in the same
call, so a batch re-read after a crash changes nothing it changed before; and
each record sets a state (the player's team), so the team boards depend on the
last record per player only (docs/DESIGN.md, "Team boards").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from adapters.redis import RedisClient, Script
from domain.teams import TeamAggregate, TeamKeys

_HERE = Path(__file__).parent

#: The team helpers every team-aware script starts with.
TEAM_LIB = (_HERE / "team_lib.lua").read_text()

#: A batch of membership records for one game (``apply_membership.lua``).
APPLY_MEMBERSHIP = Script(TEAM_LIB + (_HERE / "apply_membership.lua").read_text())

#: Records per Lua call: a bound on how long one call holds Redis.
PIECE = 500


def apply_membership(
    client: RedisClient,
    keys: TeamKeys,
    aggregate: TeamAggregate,
    field: str,
    records: Sequence[tuple[int, str, str | None]],
    through: int,
) -> int:
    """Apply ``(offset, player, team or None)`` records of one partition to one game.

    ``through`` is the batch's last offset (dead letters included): the game's
    watermark for ``field`` ends there. Returns how many players changed team.
    """
    moved = 0
    pieces = [records[at : at + PIECE] for at in range(0, len(records), PIECE)] or [[]]
    for index, piece in enumerate(pieces):
        last = through if index == len(pieces) - 1 else piece[-1][0]
        args: list[object] = [field, last, aggregate.value, keys.prefix, len(piece)]
        for offset, player, team in piece:
            args += [offset, player, team or ""]
        moved += int(APPLY_MEMBERSHIP(client, [keys.membership, keys.watermarks, keys.slots], args))
    return moved
