"""The archive on disk: file layout, the Parquet schema, the manifest, durable writes.

``<dir>/<game>/<kind>/<period>.parquet`` per final board (:func:`archive_path`),
listed in ``<dir>/<game>/manifest.json`` (:func:`manifest_path`, one
:class:`ArchiveEntry` per file), and in Redis in ``<ns>:{<game>}:meta:archived``
(:func:`archived_key`). Files are written to a temporary sibling, fsynced,
hashed and renamed, then the directory is fsynced.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from domain.errors import ServiceError
from domain.keys import GroupKeys

MANIFEST_VERSION = 1

#: Columns of every archive file.
SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int64(), nullable=False),
        pa.field("playerId", pa.string(), nullable=False),
        pa.field("score", pa.int64(), nullable=False),
        pa.field("composite", pa.int64(), nullable=False),
        # What the event that set the score carried (schema v2); null: none.
        pa.field("metadata", pa.string(), nullable=True),
    ]
)


def archive_path(directory: Path, game_id: str, window_id: str) -> Path:
    """``<dir>/<game>/<kind>/<period>.parquet``.

    The window id's colon becomes a directory level: a colon in a file name
    breaks Hadoop-style path handling (Spark, Hive), which Parquet files
    usually end up in.
    """
    kind, _, period = window_id.partition(":")
    if not period:
        raise ValueError(f"not a windowed board id: {window_id!r}")
    return directory / game_id / kind / f"{period}.parquet"


def manifest_path(directory: Path, game_id: str) -> Path:
    """``<dir>/<game>/manifest.json``."""
    return directory / game_id / "manifest.json"


def archived_key(namespace: str, game_id: str) -> str:
    """``<ns>:{<game>}:meta:archived``: window ids already archived (the game's own tag)."""
    return f"{GroupKeys(namespace, game_id).prefix}meta:archived"


@dataclass(frozen=True)
class ArchiveEntry:
    """One manifest line: what was written for one window."""

    window: str
    file: str  # relative to <dir>/<game>/
    rows: int
    sha256: str
    bytes: int
    written_at_ms: int
    namespace: str


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path`` (an empty one when the file does not exist)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": MANIFEST_VERSION, "game": path.parent.name, "archives": []}
    except (OSError, ValueError) as exc:
        raise ServiceError(f"cannot read archive manifest {path}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("archives"), list):
        raise ServiceError(f"archive manifest {path} is not a manifest")
    return doc


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_and_sync(path: Path) -> tuple[str, int]:
    """The file's SHA-256 and size, read once; the file is fsynced on the way."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        os.fsync(f.fileno())
    return digest.hexdigest(), size


def temp_name(path: Path) -> Path:
    """A hidden sibling of ``path`` to write to before the atomic rename."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
