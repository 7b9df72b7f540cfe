"""Requests from the board sink to re-read a partition from an earlier offset.

When Redis lost writes the board sink knows where the gap starts; only the
source can move the Kafka position. Both halves of one partition run on the
same Bytewax worker (the sinks are dynamic: a batch never leaves the worker
that read it), so one in-process object shared by the flow's source and sink
carries the request. Each rewind starts a new *generation* of the partition:
batches read before it (already on their way to the sinks) carry the old one
and are dropped by the board sink, so nothing is applied across the gap.
"""

from __future__ import annotations

import threading


class Rewinds:
    """Pending rewinds and current generations, per (topic, partition); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], int] = {}
        self._generation: dict[tuple[str, int], int] = {}

    def request(self, topic: str, partition: int, offset: int) -> int:
        """Ask the reader to re-read from ``offset``; returns the generation its batches will carry.

        Several requests before the reader acts merge into the lowest offset.
        """
        key = (topic, partition)
        with self._lock:
            self._pending[key] = min(self._pending.get(key, offset), offset)
            return self._generation.get(key, 0) + 1

    def take(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The reader's side: ``(offset, new generation)`` when a rewind is pending."""
        key = (topic, partition)
        with self._lock:
            offset = self._pending.pop(key, None)
            if offset is None:
                return None
            generation = self._generation.get(key, 0) + 1
            self._generation[key] = generation
            return offset, generation
