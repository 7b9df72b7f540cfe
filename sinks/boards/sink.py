"""The Bytewax output that projects accepted batches into Redis boards."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bytewax.outputs import DynamicSink

from domain.backoff import Backoff
from domain.games import GameConfig
from domain.planner import MAX_UPDATES, BoardPlanner
from domain.records import CheckedBatch
from domain.rewinds import Rewinds
from sinks.boards.partition import BoardPartition
from sinks.boards.store import RedisBoardStore, connect
from telemetry import hooks


class RedisBoardSink(DynamicSink[CheckedBatch]):
    """Each worker projects the partitions it reads (no exchange: one owner per player)."""

    def __init__(
        self,
        client_factory: Any,
        namespace: str,
        dedupe_horizon_ms: int,
        cache_capacity: int,
        retry: Backoff,
        rewinds: Rewinds | None = None,
        heal_check_s: float = 5.0,
        stopping: Callable[[], bool] = lambda: False,
        partitions: Mapping[str, int] | None = None,
        max_updates: int = MAX_UPDATES,
        writes_in_flight: int = 0,
        fence: Callable[[], int] | None = None,
        games: Callable[[str], GameConfig | None] | None = None,
    ) -> None:
        """The sink factory; ``partitions`` are the source topics' partition counts.

        Read once at start: a tournament's ``max_entries`` is split into
        per-partition seats (``domain.games.Tournament.seats``). ``max_updates``
        bounds one atomic group write (:func:`domain.planner.pieces`); ``fence``
        gives each write's lease epoch (see :class:`RedisBoardStore`);
        ``writes_in_flight`` paces the group writes on the connection
        (:class:`sinks.wire.RawPipeline`).
        """
        self._max_updates = max_updates
        self._writes_in_flight = writes_in_flight
        self._fence = fence
        self._client_factory = client_factory
        self._stopping = stopping
        self._namespace = namespace
        self._horizon_ms = dedupe_horizon_ms
        self._capacity = cache_capacity
        self._retry = retry
        self._rewinds = rewinds or Rewinds()
        self._heal_check_s = heal_check_s
        self._partitions = dict(partitions or {})
        self._games = games

    def build(self, step_id: str, worker_index: int, worker_count: int) -> BoardPartition:
        """Connect (waiting under the retry budget if Redis is not up yet) and ping."""
        client = connect(self._client_factory, self._retry, self._stopping)
        planner = BoardPlanner(
            self._namespace,
            self._horizon_ms,
            self._capacity,
            partitions=self._partitions,
            max_updates=self._max_updates,
            games=self._games,
        )
        store = RedisBoardStore(
            client,
            self._retry,
            self._stopping,
            fence=self._fence,
            writes_in_flight=self._writes_in_flight,
        )
        hooks.board_sink_started(planner)
        return BoardPartition(
            store,
            planner,
            self._namespace,
            self._rewinds,
            self._heal_check_s,
        )
