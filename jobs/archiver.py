"""Archive the final standings of closed boards (periods, seasons, tournaments) to Parquet.

A windowed board is **final** once ``now > window end + lateness`` (the
game's ``lateness_seconds``, plus an optional safety ``margin_ms`` for a job
running behind): after that the streaming job refuses every event for it as
``LATE``. Final boards that are not archived yet are read whole (every shard,
merged in board order), written to

    ``<dir>/<game>/<kind>/<period>.parquet``   e.g. ``archive/g1/daily/2026-05-04.parquet``,
    ``archive/arena/tournament/cup.parquet``

with columns ``rank`` (exact 1-based position, no ``exact_tier`` cut),
``playerId``, ``score`` (decoded with the window's codec) and ``composite``
(the exact board value), and recorded in ``<dir>/<game>/manifest.json``
and in Redis, in the set ``<ns>:{<game>}:meta:archived`` of window ids, so
each board is archived once per directory (a pass into another directory
writes there what its manifest lacks). The board itself stays in Redis, readable by its
id (``daily:2026-05-04``), until its key expires (``*_retention_seconds``
after the window end).

Crash safety, in the order things happen: the Parquet file is written to a
temporary name, fsynced and renamed into place; then the manifest is rewritten
the same way (under a lock file, so concurrent archivers do not lose each
other's entries); then the window id is added to the Redis set. A crash in
between leaves at worst a window that the next pass archives again (same
content, same name) or, when the manifest already lists it with a file of the
recorded SHA-256, simply marks in Redis. Re-running is a no-op.

Reading a board whole takes ``ceil(members / chunk)`` round trips per shard;
each chunk is read together with ``ZCARD`` in one ``MULTI`` (one slot), and a
board whose size changes while it is read (a ``RETRACT``, a rebuild swap) is
read again from the start.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient, text
from domain.errors import QueryError, ServiceError
from domain.games import GameCatalog, GameConfig
from domain.keys import GroupKeys, entry_metadata_key
from domain.ranking import Member, board_key
from domain.windows import Window, WindowKind
from jobs.archive_files import (
    MANIFEST_VERSION,
    SCHEMA,
    ArchiveEntry,
    archive_path,
    archived_key,
    fsync_dir,
    manifest_path,
    read_manifest,
    sha256_and_sync,
    temp_name,
)
from jobs.topk_merger import glob_escape
from readers.board_reads import call, execute, members_with_scores
from readers.boards import Board, BoardReader

__all__ = [
    "MANIFEST_VERSION",
    "SCHEMA",
    "ArchiveEntry",
    "ArchiveReport",
    "Archiver",
    "archive_path",
    "archived_key",
    "is_final",
    "manifest_path",
    "read_manifest",
]

#: How many times a board that changed while being read is read again.
_ATTEMPTS = 3


def is_final(config: GameConfig, window: Window, now_ms: int, margin_ms: int = 0) -> bool:
    """Whether ``window``'s board can no longer change: its lateness grace (+ margin) is over."""
    return window.end_ms is not None and config.is_late(window, now_ms - margin_ms)


@dataclass
class ArchiveReport:
    """What one pass did, per outcome."""

    archived: list[dict[str, Any]] = field(default_factory=list)
    #: Already in ``meta:archived``.
    already: int = 0
    #: Listed in the manifest with an intact file but not marked in Redis: marked now.
    recovered: int = 0
    #: Closed or not, still inside the lateness grace (+ margin).
    open: int = 0
    #: Final but without a single member: nothing written.
    empty: int = 0
    #: Final, never archived, and the board key has already expired.
    expired: int = 0
    #: Registries of games the catalog does not serve.
    unknown_games: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["seconds"] = round(self.seconds, 3)
        return doc


class _BoardChanged(Exception):
    """The board's size changed between two chunks: read it again."""


class Archiver:
    """Finds final, unarchived windowed boards and writes each to Parquet once."""

    def __init__(
        self,
        client: RedisClient,
        catalog: GameCatalog,
        namespace: str,
        directory: Path,
        *,
        margin_ms: int = 0,
        chunk: int = 10_000,
        batch_rows: int = 65_536,
    ) -> None:
        if margin_ms < 0 or chunk < 1 or batch_rows < 1:
            raise ValueError("margin_ms must be >= 0, chunk and batch_rows positive")
        self._client: RedisClient = client
        self._catalog = catalog
        self._reader = BoardReader(client, catalog, namespace)
        self.namespace = namespace
        self.directory = Path(directory)
        self.margin_ms = margin_ms
        self.chunk = chunk
        self.batch_rows = batch_rows

    # -- discovery --------------------------------------------------------------------

    def games(self) -> list[str]:
        """Every game with a board registry in the namespace (any shard)."""
        pattern = f"{glob_escape(self.namespace)}:{{*}}:meta:boards"
        found: set[str] = set()
        try:
            for raw in self._client.scan_iter(match=pattern, count=1000):
                key = text(raw)
                found.add(key.split("{", 1)[1].split("}", 1)[0].split("/", 1)[0])
        except (redis.RedisError, RedisClusterException) as exc:
            raise ServiceError(f"Redis scan failed: {exc}") from exc
        return sorted(found)

    # -- one pass ---------------------------------------------------------------------

    def run_once(self, now_ms: int) -> ArchiveReport:
        """Archive every final board not archived yet; see :class:`ArchiveReport`."""
        started = time.perf_counter()
        report = ArchiveReport()
        served: list[tuple[str, GameConfig]] = []
        for game in self.games():
            config = self._catalog.lookup(game)
            if config is None:
                report.unknown_games += 1
            else:
                served.append((game, config))
        pipe = self._client.pipeline(transaction=False)
        for game, config in served:
            for tag in _tags(game, config):
                pipe.smembers(GroupKeys(self.namespace, tag).boards)
            pipe.smembers(archived_key(self.namespace, game))
        answers = iter(execute(pipe) if served else [])
        for game, config in served:
            ids = {text(m) for _ in _tags(game, config) for m in next(answers)}
            # The Redis set is a shortcut; this directory's manifest is the record, so
            # a pass into a new --dir archives there what another directory holds.
            done = {text(m) for m in next(answers)} & self._listed(game)
            for window_id in sorted(ids):
                self._consider(game, config, window_id, done, now_ms, report)
        report.seconds = time.perf_counter() - started
        return report

    def _consider(
        self,
        game: str,
        config: GameConfig,
        window_id: str,
        done: set[str],
        now_ms: int,
        report: ArchiveReport,
    ) -> None:
        try:
            window = config.window(window_id)
        except QueryError:
            return
        if window.end_ms is None or not config.keeps(window.kind):
            return  # the all-time board never closes
        if window.id in done:
            report.already += 1
            return
        if not is_final(config, window, now_ms, self.margin_ms):
            report.open += 1
            return
        if self._recover(game, window.id):
            report.recovered += 1
            return
        expire_at = config.expire_at_ms(window)
        if expire_at is not None and expire_at <= now_ms:
            report.expired += 1
            return
        entry = self.archive(game, window.id, now_ms)
        if entry is None:
            report.empty += 1
        else:
            report.archived.append({"game": game, **asdict(entry)})

    def _listed(self, game: str) -> set[str]:
        """Window ids of this namespace that this directory's manifest lists for ``game``."""
        archives = read_manifest(manifest_path(self.directory, game))["archives"]
        return {str(e.get("window")) for e in archives if e.get("namespace") == self.namespace}

    def _recover(self, game: str, window_id: str) -> bool:
        """Mark in Redis a window the manifest already lists with an intact file."""
        listed = next(
            (
                e
                for e in read_manifest(manifest_path(self.directory, game))["archives"]
                if e.get("window") == window_id and e.get("namespace") == self.namespace
            ),
            None,
        )
        if listed is None:
            return False
        path = self.directory / game / str(listed.get("file"))
        try:
            sha, _ = sha256_and_sync(path)
        except OSError:
            return False
        if sha != listed.get("sha256"):
            return False
        call(self._client.sadd, archived_key(self.namespace, game), window_id)
        return True

    # -- one board --------------------------------------------------------------------

    def archive(self, game_id: str, window_id: str, now_ms: int) -> ArchiveEntry | None:
        """Write one board's standings now (no finality check); ``None`` when it is empty."""
        board = self._reader.board(game_id, window_id, now_ms)
        path = archive_path(self.directory, game_id, board.window.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(path)
        try:
            rows = self._write_parquet(board, tmp)
            if rows == 0:
                return None
            sha, size = sha256_and_sync(tmp)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        entry = ArchiveEntry(
            window=board.window.id,
            file=path.relative_to(self.directory / game_id).as_posix(),
            rows=rows,
            sha256=sha,
            bytes=size,
            written_at_ms=now_ms,
            namespace=self.namespace,
        )
        self._record(game_id, entry)
        call(self._client.sadd, archived_key(self.namespace, game_id), board.window.id)
        return entry

    def _write_parquet(self, board: Board, tmp: Path) -> int:
        """Stream the merged board into ``tmp``; returns the row count."""
        metadata = {
            "leaderboard.game": board.game_id,
            "leaderboard.window": board.window.id,
            "leaderboard.namespace": self.namespace,
            "leaderboard.operator": board.config.operator.value,
            "leaderboard.slots": str(board.codec.slots),
        }
        if board.window.kind is WindowKind.TOURNAMENT:
            # The rules the standings were made under: its range and caps ("" = none).
            tournament = board.config.tournament(board.window.id.removeprefix("tournament:"))
            for key, value in (
                ("start_ms", tournament.start_ms),
                ("end_ms", tournament.end_ms),
                ("max_entries", tournament.max_entries),
                ("max_attempts", tournament.max_attempts),
            ):
                metadata[f"leaderboard.tournament.{key}"] = "" if value is None else str(value)
        schema = SCHEMA.with_metadata(metadata)
        for attempt in range(_ATTEMPTS):
            rows = 0
            try:
                with pq.ParquetWriter(tmp, schema) as writer:
                    columns: _Columns = ([], [], [], [], [])
                    for member, meta in self._members(board):
                        rows += 1
                        columns[0].append(rows)
                        columns[1].append(member.player_id)
                        columns[2].append(board.codec.split(member.composite)[0])
                        columns[3].append(member.composite)
                        columns[4].append(meta)
                        if len(columns[0]) >= self.batch_rows:
                            writer.write_batch(pa.record_batch(list(columns), schema=schema))
                            columns = ([], [], [], [], [])
                    if columns[0]:
                        writer.write_batch(pa.record_batch(list(columns), schema=schema))
                return rows
            except _BoardChanged as exc:
                if attempt + 1 == _ATTEMPTS:
                    raise ServiceError(
                        f"board {board.game_id} {board.window.id} kept changing while "
                        f"being archived ({exc})"
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _members(self, board: Board) -> Iterator[tuple[Member, str | None]]:
        """Every member of the board in board order, with its metadata (shards merged lazily)."""
        streams = [self._stream(key) for key in board.keys]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=lambda pair: board_key(pair[0]), reverse=True)

    def _stream(self, key: str) -> Iterator[tuple[Member, str | None]]:
        """One key in ZREVRANGE order, ``chunk`` members per round trip, size-checked.

        Each member comes with its entry metadata (None: none), read per chunk
        when the board has any (the first round trip says whether it does).
        """
        start = 0
        size: int | None = None
        meta_key = entry_metadata_key(key)
        has_metadata = False
        while True:
            pipe = self._client.pipeline(transaction=True)
            pipe.zcard(key)
            pipe.zrevrange(key, start, start + self.chunk - 1, withscores=True)
            if size is None:
                pipe.exists(meta_key)
            card, pairs, *exists = execute(pipe)
            if size is None:
                size = int(card)
                has_metadata = bool(exists and int(exists[0]))
            elif int(card) != size:
                raise _BoardChanged(f"{key}: {size} -> {card} members")
            members = members_with_scores(pairs)
            metas: list[Any] = [None] * len(members)
            if has_metadata and members:
                metas = call(self._client.hmget, meta_key, [m.player_id for m in members])
            for member, meta in zip(members, metas, strict=True):
                yield member, None if meta is None else text(meta)
            start += len(pairs)
            if len(pairs) < self.chunk or start >= size:
                return

    def _record(self, game_id: str, entry: ArchiveEntry) -> None:
        """Replace the window's line of the game's manifest, atomically and under a lock."""
        path = manifest_path(self.directory, game_id)
        lock = path.with_name(".manifest.lock")
        with lock.open("a") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            doc = read_manifest(path)
            lines = [e for e in doc["archives"] if e.get("window") != entry.window]
            lines.append(asdict(entry))
            lines.sort(key=lambda e: str(e.get("window")))
            doc = {"version": MANIFEST_VERSION, "game": game_id, "archives": lines}
            tmp = temp_name(path)
            try:
                with tmp.open("w", encoding="utf-8") as f:
                    json.dump(doc, f, indent=2, sort_keys=True)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                fsync_dir(path.parent)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()


#: The archive's columns as they are filled (rank, playerId, score, composite, metadata).
_Columns = tuple[list[int], list[str], list[int], list[int], list[str | None]]


def _tags(game: str, config: GameConfig) -> list[str]:
    """The hash tags holding a game's boards (one, or one per shard)."""
    return [game] if config.shards <= 1 else [f"{game}/{i}" for i in range(config.shards)]
