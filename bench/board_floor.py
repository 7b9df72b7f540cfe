"""The least board work a stream needs from Redis: the members it changes, nothing else.

A job that knew every board value already would send Redis, per batch, only
the members whose value the batch raises, each once (a player scoring twice in
a batch is written once, with the better value), and nothing beside them: no
script, no dedupe ids, no counters, no watermarks. :class:`BestBoards` works
out that write set for a stream of best-operator updates (the workloads'
built-in game); ``bench.ingest`` sends it as plain ``ZADD`` calls and counts
Redis' own time, the shape's floor, next to what the job costs Redis.
"""

from __future__ import annotations

from collections.abc import Iterable

#: One event's board updates: the player, then (board key, packed value) per board.
Updates = tuple[str, list[tuple[str, int]]]


class BestBoards:
    """Every board's values under the best operator, as a perfect writer would hold them."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, int]] = {}

    def changes(self, batch: Iterable[Updates]) -> dict[str, dict[str, int]]:
        """What ``batch`` changes, coalesced: board key -> member -> its new value.

        Only members whose value rises (or that were absent) are listed, each
        with its last value of the batch; the held values are updated.
        """
        out: dict[str, dict[str, int]] = {}
        values = self.values
        for player, windows in batch:
            for key, value in windows:
                board = values.get(key)
                if board is None:
                    board = values[key] = {}
                held = board.get(player)
                if held is None or value > held:
                    board[player] = value
                    changed = out.get(key)
                    if changed is None:
                        changed = out[key] = {}
                    changed[player] = value
        return out
