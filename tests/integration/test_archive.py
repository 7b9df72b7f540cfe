"""Closed daily/weekly boards to Parquet, once, against real Redis (standalone and cluster).

Boards of a past, closed window are written straight into Redis with
composites from the game's codec (and the job's key expiry), archived, and the
Parquet file read back with pyarrow is compared with the board sorted by an
oracle written out here.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from adapters.redis import RedisClient, text
from domain.games import GameCatalog
from domain.windows import WindowKind, window_for, window_from_id
from jobs.archiver import Archiver, archive_path, archived_key, is_final, manifest_path
from readers.boards import BoardReader

TEN_YEARS_S = 10 * 365 * 86_400
GAMES = f"""
[default]
daily_retention_seconds = {TEN_YEARS_S}
weekly_retention_seconds = {TEN_YEARS_S}
lateness_seconds = 3600
[games."arc"]
[games."arcsh"]
shards = 3
"""
SHARDS = {"arc": 1, "arcsh": 3, "anon": 1}
CLOSED_DAY = "daily:2026-05-04"
CLOSED_WEEK = "weekly:2026-W18"
REPO = Path(__file__).resolve().parents[2]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def tag(game: str, player: str) -> str:
    shards = SHARDS[game]
    return game if shards == 1 else f"{game}/{zlib.crc32(player.encode()) % shards}"


def write(
    client: RedisClient, catalog: GameCatalog, ns: str, game: str, window_id: str, n: int, seed: int
) -> dict[str, int]:
    """A board of ``n`` players with many ties, written like the job would (with expiry)."""
    config = catalog.lookup(game)
    assert config is not None
    window = window_from_id(window_id)
    codec = config.codec(window)
    assert window.start_ms is not None and window.end_ms is not None
    rng = random.Random(seed)
    board = {}
    for i in range(n):
        ts = window.start_ms + rng.randrange(0, window.end_ms - window.start_ms, 3_600_000)
        board[f"p{i}" if i % 7 else f"ü{i}"] = codec.encode(rng.randrange(50), ts)
    expire_at_s = (config.expire_at_ms(window) or 0) // 1000
    pipe = client.pipeline(transaction=False)
    for player, composite in board.items():
        key = f"{ns}:{{{tag(game, player)}}}:{window_id}"
        pipe.zadd(key, {player: composite})
        pipe.expireat(key, expire_at_s)
    for shard in range(SHARDS[game]):
        group = game if SHARDS[game] == 1 else f"{game}/{shard}"
        pipe.sadd(f"{ns}:{{{group}}}:meta:boards", window_id)
    pipe.execute()
    return board


def oracle_rows(
    catalog: GameCatalog,
    game: str,
    window_id: str,
    board: dict[str, int],
    metadata: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    config = catalog.lookup(game)
    assert config is not None
    codec = config.codec(window_from_id(window_id))
    ordered = sorted(board.items(), key=lambda pc: (pc[1], pc[0].encode()), reverse=True)
    return [
        {
            "rank": i,
            "playerId": p,
            "score": codec.split(c)[0],
            "composite": c,
            "metadata": (metadata or {}).get(p),
        }
        for i, (p, c) in enumerate(ordered, start=1)
    ]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def client(request: pytest.FixtureRequest, namespace: str) -> Iterator[Any]:
    name = "redis_client" if request.param == "standalone" else "cluster_client"
    yield request.getfixturevalue(name)


@pytest.fixture
def catalog() -> GameCatalog:
    return GameCatalog.from_toml(GAMES)


def test_closed_boards_are_archived_once_and_stay_readable_by_id(
    client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    now = now_ms()
    today = window_for(WindowKind.DAILY, now).id
    boards = {
        ("arc", CLOSED_DAY): write(client, catalog, namespace, "arc", CLOSED_DAY, 2500, 1),
        ("arcsh", CLOSED_DAY): write(client, catalog, namespace, "arcsh", CLOSED_DAY, 2500, 2),
        ("arcsh", CLOSED_WEEK): write(client, catalog, namespace, "arcsh", CLOSED_WEEK, 300, 3),
    }
    write(client, catalog, namespace, "arcsh", today, 50, 4)  # open: not archived
    client.sadd(f"{namespace}:{{arc}}:meta:boards", "alltime")  # never closes
    # Entry metadata (what the job keeps beside a board for v2 events with metadata).
    metadata = {p: f"car-{i} | Zoë" for i, p in enumerate(sorted(boards[("arc", CLOSED_DAY)])[:40])}
    client.hset(f"{namespace}:{{arc}}:meta:entry:{CLOSED_DAY}", mapping=metadata)
    reader = BoardReader(client, catalog, namespace)
    before = reader.top("arcsh", CLOSED_DAY, 100, now_ms=now)

    archiver = Archiver(client, catalog, namespace, tmp_path, chunk=700, batch_rows=1000)
    report = archiver.run_once(now)
    assert sorted((a["game"], a["window"]) for a in report.archived) == sorted(boards)
    assert report.open == 1 and report.already == 0

    for (game, window_id), board in boards.items():
        path = archive_path(tmp_path, game, window_id)
        assert path.parent.parent.name == game and ":" not in path.name
        table = pq.read_table(path)
        assert table.column_names == ["rank", "playerId", "score", "composite", "metadata"]
        expected = oracle_rows(catalog, game, window_id, board, metadata if game == "arc" else None)
        assert table.to_pylist() == expected
        meta = table.schema.metadata
        assert meta[b"leaderboard.window"] == window_id.encode()
        assert meta[b"leaderboard.namespace"] == namespace.encode()
        manifest = json.loads(manifest_path(tmp_path, game).read_text())
        entry = next(e for e in manifest["archives"] if e["window"] == window_id)
        assert entry == {
            "window": window_id,
            "file": path.relative_to(tmp_path / game).as_posix(),
            "rows": len(board),
            "sha256": sha256(path),
            "bytes": path.stat().st_size,
            "written_at_ms": now,
            "namespace": namespace,
        }
        assert client.sismember(archived_key(namespace, game), window_id)
    assert not archive_path(tmp_path, "arcsh", today).exists()
    assert [
        e["window"] for e in json.loads(manifest_path(tmp_path, "arcsh").read_text())["archives"]
    ] == [CLOSED_DAY, CLOSED_WEEK]

    # Re-running is a no-op: nothing rewritten.
    files = sorted(tmp_path.rglob("*"))
    stamps = {p: p.stat().st_mtime_ns for p in files if p.is_file()}
    again = archiver.run_once(now_ms())
    assert again.archived == [] and again.already == 3 and again.open == 1
    assert sorted(tmp_path.rglob("*")) == files
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps

    # Still readable from Redis by its explicit id, until the key's TTL.
    assert reader.top("arcsh", CLOSED_DAY, 100, now_ms=now_ms()) == before
    key = f"{namespace}:{{arc}}:{CLOSED_DAY}"
    assert client.ttl(key) > 0
    first = pq.read_table(archive_path(tmp_path, "arc", CLOSED_DAY)).slice(0, 10).to_pylist()
    page = reader.top("arc", CLOSED_DAY, 10, now_ms=now_ms())
    assert [(e["rank"], e["playerId"], e["score"]) for e in page["entries"]] == [
        (r["rank"], r["playerId"], r["score"]) for r in first
    ]
    client.pexpire(key, 1)
    time.sleep(0.05)
    assert reader.top("arc", CLOSED_DAY, 10, now_ms=now_ms())["entries"] == []


def test_a_lost_redis_marker_is_recovered_from_the_manifest(
    redis_client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    write(redis_client, catalog, namespace, "arc", CLOSED_DAY, 100, 5)
    archiver = Archiver(redis_client, catalog, namespace, tmp_path)
    assert len(archiver.run_once(now_ms()).archived) == 1
    path = archive_path(tmp_path, "arc", CLOSED_DAY)
    stamp = path.stat().st_mtime_ns
    redis_client.delete(archived_key(namespace, "arc"))  # e.g. a rebuild swap dropped it
    report = archiver.run_once(now_ms())
    assert (report.archived, report.recovered) == ([], 1)
    assert path.stat().st_mtime_ns == stamp
    assert redis_client.sismember(archived_key(namespace, "arc"), CLOSED_DAY)
    # A damaged file is not trusted: the board is archived again.
    redis_client.delete(archived_key(namespace, "arc"))
    path.write_bytes(b"not parquet")
    assert len(archiver.run_once(now_ms()).archived) == 1
    assert pq.read_table(path).num_rows == 100


def test_finality_empty_expired_and_unknown_boards(
    redis_client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    config = catalog.lookup("arc")
    assert config is not None
    window = window_from_id(CLOSED_DAY)
    assert window.end_ms is not None
    grace_end = window.end_ms + config.lateness_ms
    assert not is_final(config, window, grace_end)
    assert is_final(config, window, grace_end + 1)
    assert not is_final(config, window, grace_end + 1, margin_ms=1)
    assert not is_final(config, window_from_id("alltime"), grace_end * 2)

    write(redis_client, catalog, namespace, "arc", CLOSED_DAY, 30, 6)
    redis_client.sadd(f"{namespace}:{{arc}}:meta:boards", "daily:2026-05-01")  # no members
    redis_client.sadd(f"{namespace}:{{arc}}:meta:boards", "daily:2016-01-01")  # key expired
    redis_client.sadd(f"{namespace}:{{nogame}}:meta:boards", CLOSED_DAY)
    strict = GameCatalog.from_toml(
        f'[games."arc"]\ndaily_retention_seconds = {TEN_YEARS_S}\n'
    )  # no [default]: "nogame" is not served
    # Before the grace is over (by the caller's clock) nothing is archived.
    early = Archiver(redis_client, strict, namespace, tmp_path).run_once(grace_end)
    assert early.archived == [] and early.open == 1 and early.unknown_games == 1
    report = Archiver(redis_client, strict, namespace, tmp_path).run_once(now_ms())
    assert [a["window"] for a in report.archived] == [CLOSED_DAY]
    assert (report.empty, report.expired, report.unknown_games) == (1, 1, 1)
    assert not (tmp_path / "nogame").exists()


def test_a_board_that_changes_while_read_is_read_again(
    redis_client: RedisClient, catalog: GameCatalog, namespace: str, tmp_path: Path
) -> None:
    board = write(redis_client, catalog, namespace, "arcsh", CLOSED_DAY, 400, 7)

    class Retracting(Archiver):
        """A RETRACT lands in the first shard read, between two of its chunks."""

        reads = 0

        def _stream(self, key: str) -> Iterator[Any]:
            type(self).reads += 1
            first = type(self).reads == 1
            for i, member in enumerate(super()._stream(key)):
                if i == 60 and first:
                    gone = text(redis_client.zrange(key, 0, 0)[0])
                    redis_client.zrem(key, gone)
                    del board[gone]
                yield member

    archiver = Retracting(redis_client, catalog, namespace, tmp_path, chunk=50)
    assert len(archiver.run_once(now_ms()).archived) == 1
    assert Retracting.reads == 6  # three shards, read twice
    table = pq.read_table(archive_path(tmp_path, "arcsh", CLOSED_DAY))
    assert table.to_pylist() == oracle_rows(catalog, "arcsh", CLOSED_DAY, board)


def test_lb_archive_run_once(
    redis_client: RedisClient, catalog: GameCatalog, namespace: str, redis_url: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES)
    write(redis_client, catalog, namespace, "anon", CLOSED_WEEK, 40, 8)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "LB_REDIS_URL": redis_url,
        "LB_NAMESPACE": namespace,
        "LB_GAMES": str(games),
        "LB_REDIS_CLUSTER": "0",
    }
    argv = [sys.executable, "-m", "lb.cli", "archive", "run", "--once", "--dir", str(out)]
    done = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    assert [(a["game"], a["window"], a["rows"]) for a in report["archived"]] == [
        ("anon", CLOSED_WEEK, 40)
    ]
    assert (out / "anon" / "weekly" / "2026-W18.parquet").is_file()
    again = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(again.stdout)["archived"] == []
    # A new directory gets its own copy: the Redis marker does not hide the board from it.
    fresh = tmp_path / "fresh"
    argv[-1] = str(fresh)
    other = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert [a["window"] for a in json.loads(other.stdout)["archived"]] == [CLOSED_WEEK]
    assert pq.read_table(fresh / "anon" / "weekly" / "2026-W18.parquet").num_rows == 40
