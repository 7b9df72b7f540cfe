"""Remove an erased player from Parquet archives already written (``lb forget --archives``).

An archive is a closed board's final standings, written once (``jobs/archiver.py``):
the erasure record cannot reach it. This rewrites each file that holds the player
without their row, ranks renumbered, the schema metadata kept, through a temporary
file and an atomic rename, and updates the game's manifest line (rows, bytes,
SHA-256) under the archiver's manifest lock. Copies made elsewhere are out of reach.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from domain.errors import ServiceError
from jobs.archive_files import (
    MANIFEST_VERSION,
    fsync_dir,
    read_manifest,
    sha256_and_sync,
    temp_name,
)


@dataclass(frozen=True, slots=True)
class Scrubbed:
    """One archive file rewritten without the player."""

    game: str
    window: str
    file: str


def scrub_archives(directory: Path, player: str) -> list[Scrubbed]:
    """Rewrite every archive under ``directory`` that holds ``player``; what was rewritten."""
    out: list[Scrubbed] = []
    for manifest in sorted(directory.glob("*/manifest.json")):
        game_dir = manifest.parent
        lock = manifest.with_name(".manifest.lock")
        with lock.open("a") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            doc = read_manifest(manifest)
            changed = False
            for entry in doc["archives"]:
                path = game_dir / str(entry.get("file"))
                if _rewrite(path, player, entry):
                    changed = True
                    out.append(Scrubbed(game_dir.name, str(entry["window"]), str(path)))
            if changed:
                _write_manifest(manifest, {**doc, "version": MANIFEST_VERSION})
    return out


def _rewrite(path: Path, player: str, entry: dict[str, object]) -> bool:
    """``path`` without ``player``'s row (ranks renumbered); False when it had none."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ServiceError(f"cannot read archive {path}: {exc}") from exc
    keep = pc.not_equal(table["playerId"], player)
    if pc.all(keep).as_py() in (True, None):
        return False
    kept = table.filter(keep)
    ranks = pa.array(range(1, kept.num_rows + 1), type=pa.int64())
    kept = kept.set_column(kept.schema.get_field_index("rank"), "rank", ranks)
    tmp = temp_name(path)
    try:
        pq.write_table(kept, tmp)
        sha, size = sha256_and_sync(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    entry.update(rows=kept.num_rows, sha256=sha, bytes=size)
    return True


def _write_manifest(path: Path, doc: dict[str, object]) -> None:
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
