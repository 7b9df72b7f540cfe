"""Plan the Redis writes of a partition's batches: coalesced, exactly once.

The projection's state lives in Redis itself: each board group (one hash tag)
keeps, next to its boards, the last applied offset of every source partition
(``meta:wm``) and the event ids seen within the dedupe horizon. A group's share
of a batch is applied in atomic Lua calls, each writing the boards, the seen
ids, the counters *and* the watermark of the records it covers, so after a
crash a replayed record is recognised by its offset and skipped: every effect
happens exactly once.

Planning needs current values. They come from a write-through cache that is
authoritative for this worker's players (a Kafka partition, hence a player, has
exactly one owner, and only the owner writes that player's members), falling
back to one batched read for what the cache lacks. The planner does no I/O.
Per (board, player) only the final value of a piece is written, and only when
it differs from the current one: most events in a steady stream cannot change
a board and cost no Redis write at all.

Where each step lives:

==========================  ====================================================
:mod:`.rounds`              one round: lookups, (the caller reads), plan, commit
:mod:`.board_planner`       :class:`BoardPlanner`: what to read; batch -> plan
:mod:`.fold`                the per-event fold and the pieces a group is cut into
:mod:`.dedupe`              duplicates by event id (the symmetric horizon rule)
:mod:`.tournaments`         seats and attempts inside the fold
:mod:`.changes`             what a piece wrote: members, cache values, live changes
:mod:`.cache`               the players' values this worker keeps
:mod:`.model`               lookups, results, group writes, plans (plain data)
==========================  ====================================================
"""

from domain.planner.board_planner import BoardPlanner
from domain.planner.cache import GenerationalCache
from domain.planner.fold import MAX_UPDATES, pieces
from domain.planner.model import (
    APPLIED,
    ATTEMPTS_USED_UP,
    COUNTERS,
    DUPLICATE,
    NOOP,
    SATURATED,
    TOURNAMENT_FULL,
    Change,
    GroupWrite,
    LookupResults,
    Lookups,
    WritePlan,
)
from domain.planner.rounds import PlanRound

__all__ = [
    "APPLIED",
    "ATTEMPTS_USED_UP",
    "COUNTERS",
    "DUPLICATE",
    "MAX_UPDATES",
    "NOOP",
    "SATURATED",
    "TOURNAMENT_FULL",
    "BoardPlanner",
    "Change",
    "GenerationalCache",
    "GroupWrite",
    "LookupResults",
    "Lookups",
    "PlanRound",
    "WritePlan",
    "pieces",
]
