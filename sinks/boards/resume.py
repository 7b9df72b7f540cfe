"""Where a partition resumes after a restart, from what Redis holds now."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from domain.backoff import Backoff
from domain.healing import PROGRESS_FIELD, resume_offset
from domain.keys import GroupKeys, progress_key, watermark_field

log = logging.getLogger(__name__)


class BoardReads(Protocol):
    """The reads healing and resuming need (:class:`~sinks.boards.store.RedisBoardStore`)."""

    def read_progress(self, key: str) -> dict[str, int]: ...

    def read_watermarks(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]: ...


def read_resume_state(
    store: BoardReads, namespace: str, topic: str, partition: int
) -> tuple[dict[str, int], dict[str, int | None]]:
    """A partition's progress hash and the watermark each group it names holds now.

    What :func:`domain.healing.resume_offset` decides from, at a reader's start
    and again at the sink's first sight of the partition.
    """
    progress = store.read_progress(progress_key(namespace, topic, partition))
    tags = [tag for tag in progress if tag != PROGRESS_FIELD]
    wm_field = watermark_field(topic, partition)
    stored = store.read_watermarks(
        [(GroupKeys(namespace, tag).watermarks, wm_field) for tag in tags]
    )
    return progress, dict(zip(tags, stored, strict=True))


class ResumeFromRedis:
    """Where a partition reader starts after a restart.

    Bytewax's snapshot, or earlier when Redis no longer holds what was written
    before it (:func:`domain.healing.resume_offset`).
    """

    def __init__(self, client_factory: Callable[[], Any], namespace: str, retry: Backoff) -> None:
        self._client_factory = client_factory
        self._namespace = namespace
        self._retry = retry

    def __call__(self, topic: str, partition: int, snapshot: int | None) -> int | None:
        if snapshot is None:
            return None
        from sinks.boards.store import RedisBoardStore, connect

        client = connect(self._client_factory, self._retry)
        try:
            store = RedisBoardStore(client, self._retry)
            progress, stored = read_resume_state(store, self._namespace, topic, partition)
        finally:
            client.close()
        start = resume_offset(snapshot, progress, stored)
        if start != snapshot:
            log.warning(
                "Redis holds less of %s[%d] than the recovery snapshot (offset %d): "
                "re-reading from offset %s",
                topic,
                partition,
                snapshot,
                start,
            )
        return start
