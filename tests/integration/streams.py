"""Test streams and an independent oracle for the streaming job.

The generator writes real signed Avro records (plus every kind of bad record
and exact duplicates) with chosen Kafka timestamps; the oracle recomputes every
board from the intended outcomes with plain dictionaries and its own composite
formula, sharing no code with the job's planner.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from confluent_kafka import Producer

from adapters.kafka import read_topic
from adapters.redis import RedisClient, text
from domain.events import EventKind
from domain.signing import parse_keyring, signed_event
from schemas.codec import ScoreEventCodec

REPO = Path(__file__).resolve().parents[2]
KEYS = "k1:" + "11" * 32 + ",k2:" + "22" * 32
ORIGIN_S = int(datetime(2020, 1, 1, tzinfo=UTC).timestamp())
UNTIL_S = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp())
MAX_SCORE = 1_000_000
DEDUPE_HORIZON_MS = 300_000
LATENESS_S = 3600  # the built-in default, and gday's explicit value

# Boards of the stream's days must not have expired whenever the test runs: keep them 100 years.
_KEEP = (
    "hourly_retention_seconds = 3153600000\ndaily_retention_seconds = 3153600000\n"
    "weekly_retention_seconds = 3153600000\nmonthly_retention_seconds = 3153600000\n"
)
#: ``gasc``: lowest wins. ``gtz``: resets in Los Angeles, weeks from Sunday, every
#: period, and a season that is exactly the 25-hour day clocks fall back on.
#: ``gtour``: an ``incr`` game with a 36-hour tournament capped both ways (a sum
#: shows every attempt that counted, not only the best one).
TZ = "America/Los_Angeles"
TOUR_START_S = int(datetime(2026, 11, 1, 0, 0, tzinfo=UTC).timestamp())
TOUR_END_S = int(datetime(2026, 11, 2, 12, 0, tzinfo=UTC).timestamp())
TOUR_ENTRIES = 30
TOUR_ATTEMPTS = 3
#: Partitions of every test topic (``tests/conftest.py``): they split the tournament's seats.
TOPIC_PARTITIONS = 4
GAMES_TOML = (
    f'[games."gbest"]\noperator = "best"\nmax_score = 1000000\n{_KEEP}'
    f'[games."gincr"]\noperator = "incr"\nmax_score = 1000000\n{_KEEP}'
    f'[games."gset"]\noperator = "set"\nmax_score = 1000000\n{_KEEP}'
    f'[games."gday"]\noperator = "best"\nmax_score = 1000000\nwindows = ["daily"]\n'
    f"lateness_seconds = 3600\n{_KEEP}"
    f'[games."gasc"]\noperator = "best"\norder = "asc"\nmax_score = 1000000\n{_KEEP}'
    f'[games."gtz"]\noperator = "best"\nmax_score = 1000000\nreset_timezone = "{TZ}"\n'
    f'week_start = "sunday"\nwindows = ["hourly", "daily", "weekly", "monthly", "alltime"]\n'
    f'{_KEEP}[games."gtz".seasons]\nfallback = {{ start = 2026-11-01, end = 2026-11-02 }}\n'
    f'[games."gtour"]\noperator = "incr"\nmax_score = 1000000\n{_KEEP}'
    f'[games."gtour".tournaments.cup]\nstart = 2026-11-01T00:00:00Z\n'
    f"end = 2026-11-02T12:00:00Z\nmax_entries = {TOUR_ENTRIES}\nmax_attempts = {TOUR_ATTEMPTS}\n"
)
GAMES = {
    "gbest": "best",
    "gincr": "incr",
    "gset": "set",
    "gday": "best",
    "gasc": "best",
    "gtz": "best",
    "gtour": "incr",
}
WINDOWS = {"gbest": 3, "gincr": 3, "gset": 3, "gday": 1, "gasc": 3, "gtz": 6, "gtour": 4}
#: Board key suffixes the job writes (everything else is bookkeeping).
BOARD_PREFIXES = ("alltime", "daily:", "weekly:", "hourly:", "monthly:", "season:", "tournament:")


@dataclass
class Planned:
    key: bytes
    value: bytes
    record_ts: int
    expected: str  # "ok" or a dead-letter code
    event: Any = None
    partition: int = -1
    offset: int = -1


@dataclass
class Stream:
    records: list[Planned] = field(default_factory=list)


def _local_midnight_s(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(TZ)).timestamp())


def _zoned_window_ids(ts_ms: int) -> list[tuple[str, int, int]]:
    """gtz's boards in Los Angeles time, by zoneinfo arithmetic (not domain.windows)."""
    local = datetime.fromtimestamp(ts_ms / 1000, tz=ZoneInfo(TZ))
    day = local.date()
    offset = local.utcoffset() or timedelta(0)
    hour = local.replace(minute=0, second=0, microsecond=0, tzinfo=timezone(offset))
    hh, mm = divmod(abs(int(offset.total_seconds()) // 60), 60)
    sign = "+" if offset >= timedelta(0) else "-"
    out = [
        (
            f"hourly:{day.isoformat()}T{local.hour:02d}{sign}{hh:02d}{mm:02d}",
            int(hour.timestamp()),
            3600,
        )
    ]
    start, end = _local_midnight_s(day), _local_midnight_s(day + timedelta(days=1))
    out.append((f"daily:{day.isoformat()}", start, end - start))
    sunday = day - timedelta(days=(day.weekday() + 1) % 7)
    start, end = _local_midnight_s(sunday), _local_midnight_s(sunday + timedelta(days=7))
    out.append((f"weekly:{sunday.isoformat()}", start, end - start))
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    start, end = _local_midnight_s(first), _local_midnight_s(following)
    out.append((f"monthly:{first:%Y-%m}", start, end - start))
    season = _local_midnight_s(date(2026, 11, 1)), _local_midnight_s(date(2026, 11, 2))
    if season[0] <= ts_ms // 1000 < season[1]:
        out.append(("season:fallback", season[0], season[1] - season[0]))
    out.append(("alltime", ORIGIN_S, UNTIL_S - ORIGIN_S))
    return out


def _window_ids(ts_ms: int, only_daily: bool) -> list[tuple[str, int, int]]:
    """(window id, start s, slots) by a route independent of domain.windows."""
    moment = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    day_start = int(datetime(moment.year, moment.month, moment.day, tzinfo=UTC).timestamp())
    out = [(f"daily:{moment:%Y-%m-%d}", day_start, 86_400)]
    if only_daily:
        return out
    iso = moment.isocalendar()
    week_start = day_start - (iso.weekday - 1) * 86_400
    out.append((f"weekly:{iso.year}-W{iso.week:02d}", week_start, 7 * 86_400))
    out.append(("alltime", ORIGIN_S, UNTIL_S - ORIGIN_S))
    return out


#: Metadata the v2 records of a stream carry: ASCII, '|', 2- to 4-byte UTF-8, empty.
METADATA = ('{"car":"red"}', "lap|3", "Zoë 日本 🏎", "", "replay-42")


def generate(
    seed: int,
    count: int,
    players: int = 150,
    start_ms: int | None = None,
    metadata_ratio: float = 0.0,
    erasures: float = 0.0,
) -> Stream:
    """A mixed stream: 6 games, ties, duplicates, retracts and every bad kind.

    With ``metadata_ratio``, that share of the valid SCORE events are v2
    records with metadata (from :data:`METADATA`), a few more are v2 records
    without it, and about 1% of them carry too much (``METADATA_TOO_LARGE``);
    the choices come from a second random stream, so the rest of the stream is
    the one the same seed gives without metadata.

    ``erasures``: the share of records that are a player's erasure (expected
    ``"erased"``); 0 leaves the stream of a seed as it always was.
    """
    rng = random.Random(seed)
    meta_rng = random.Random(seed ^ 0x5EED)
    keyring = parse_keyring(KEYS)
    bad_ring = parse_keyring("k9:" + "99" * 32)
    codec = ScoreEventCodec.from_registry()
    start = start_ms or int(datetime(2026, 10, 31, 20, 0, tzinfo=UTC).timestamp() * 1000)
    out = Stream()
    ok: list[Planned] = []
    for i in range(count):
        # Three days that cross Los Angeles' fall-back (2026-11-01 09:00Z, a 25-hour
        # local day) and the ISO week boundary of Monday 2026-11-02.
        record_ts = start + int(i * (3 * 86_400_000) / count)
        ts = record_ts - rng.randrange(0, 3000)
        game = rng.choice(list(GAMES))
        player = f"p{rng.randrange(players):04d}"
        score = rng.randrange(0, 60)  # a narrow range makes many ties
        kind = EventKind.RETRACT if rng.random() < 0.01 else EventKind.SCORE
        roll = rng.random()
        key_id = rng.choice(["k1", "k2"])
        fields = dict(
            event_id=uuid.UUID(int=rng.getrandbits(128)).hex,
            game_id=game,
            player_id=player,
            score=score,
            ts_ms=ts,
            kind=kind,
        )
        expected = "ok"
        if erasures and rng.random() < erasures:
            event = signed_event(
                keyring,
                key_id,
                **{**fields, "game_id": "*", "score": 0, "kind": EventKind.RETRACT},
            )
            out.records.append(
                Planned(player.encode(), codec.encode(event), record_ts, "erased", event)
            )
            continue
        if roll < 0.05 and ok:
            # Mostly a quick retry through another gateway whose clock is up to
            # 3 s behind or ahead (its record time may precede the original's);
            # sometimes a copy from beyond the dedupe horizon, applied again.
            if rng.random() < 0.8:
                dup = rng.choice(ok[-2:])
                retry_ts = dup.record_ts + rng.randrange(-3000, 3001)
            else:
                dup = rng.choice(ok[-40:-20] or ok)
                retry_ts = record_ts
            out.records.append(Planned(dup.key, dup.value, retry_ts, "duplicate", dup.event))
            continue
        if roll < 0.07:
            value = rng.choice([b"", b"\x00\x00", b"garbage-bytes", b"\x01" + os.urandom(20)])
            out.records.append(Planned(player.encode(), value, record_ts, "DECODE"))
            continue
        if roll < 0.08:
            body = codec.encode(signed_event(keyring, key_id, **fields))
            value = b"\x00" + (99).to_bytes(4, "big") + body[5:]
            out.records.append(Planned(player.encode(), value, record_ts, "SCHEMA"))
            continue
        if roll < 0.09:
            event = signed_event(keyring, key_id, **fields)
            forged = _with_score(event, score + 1)
            out.records.append(
                Planned(player.encode(), codec.encode(forged), record_ts, "SIGNATURE")
            )
            continue
        if roll < 0.10:
            event = signed_event(bad_ring, "k9", **fields)
            out.records.append(
                Planned(player.encode(), codec.encode(event), record_ts, "UNKNOWN_KEY")
            )
            continue
        if roll < 0.11:
            event = signed_event(
                keyring, key_id, **{**fields, "score": MAX_SCORE + 1, "kind": EventKind.SCORE}
            )
            out.records.append(Planned(player.encode(), codec.encode(event), record_ts, "BOUNDS"))
            continue
        if roll < 0.12:
            event = signed_event(keyring, key_id, **{**fields, "ts_ms": record_ts + 3_600_000})
            out.records.append(Planned(player.encode(), codec.encode(event), record_ts, "FUTURE"))
            continue
        if roll < 0.13:
            event = signed_event(keyring, key_id, **{**fields, "game_id": "nosuchgame"})
            out.records.append(
                Planned(player.encode(), codec.encode(event), record_ts, "UNKNOWN_GAME")
            )
            continue
        if roll < 0.14:
            event = signed_event(
                keyring,
                key_id,
                **{**fields, "game_id": "gday", "ts_ms": record_ts - 3 * 86_400_000},
            )
            out.records.append(Planned(player.encode(), codec.encode(event), record_ts, "LATE"))
            continue
        event = signed_event(keyring, key_id, **fields)
        value = codec.encode(event)
        if metadata_ratio and kind is EventKind.SCORE:
            draw = meta_rng.random()
            if draw < 0.01:
                event = signed_event(keyring, key_id, **fields, metadata="é" * 257)
                too_large = Planned(
                    player.encode(), codec.encode(event), record_ts, "METADATA_TOO_LARGE"
                )
                out.records.append(too_large)
                continue
            if draw < 0.01 + metadata_ratio:
                event = signed_event(keyring, key_id, **fields, metadata=meta_rng.choice(METADATA))
                value = codec.encode(event)
            elif draw < 0.11 + metadata_ratio:
                value = codec.encode(event, 2)  # v2 without metadata
        planned = Planned(player.encode(), value, record_ts, expected, event)
        ok.append(planned)
        out.records.append(planned)
    return out


def _with_score(event: Any, score: int) -> Any:

    return event._replace(score=score)


def produce(bootstrap: str, topic: str, records: list[Planned]) -> None:
    """Produce in order; fill in each record's partition and offset."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 10}
    )

    def delivered(rec: Planned) -> Any:
        def callback(err: Any, msg: Any) -> None:
            assert err is None, err
            rec.partition, rec.offset = msg.partition(), msg.offset()

        return callback

    for rec in records:
        produce_planned(producer, topic, rec, delivered(rec))
    assert producer.flush(60) == 0


def produce_planned(
    producer: Producer, topic: str, rec: Planned, on_delivery: Callable[[Any, Any], None]
) -> None:
    """Queue one planned record, waiting for room while the producer's queue is full."""
    while True:
        try:
            producer.produce(
                topic,
                key=rec.key,
                value=rec.value,
                timestamp=rec.record_ts,
                on_delivery=on_delivery,
            )
            return
        except BufferError:
            producer.poll(0.1)


def _tournament_seats(partition: int, partitions: int) -> int:
    """gtour's seats in one partition: max_entries split evenly, the first partitions one more."""
    return TOUR_ENTRIES // partitions + (1 if partition < TOUR_ENTRIES % partitions else 0)


def oracle(
    records: list[Planned], partitions: int = TOPIC_PARTITIONS
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Expected boards ({window-key suffix: {player: composite}}) and outcome counts."""
    boards, counts, _ = oracle_with_metadata(records, partitions)
    return boards, counts


def oracle_with_metadata(
    records: list[Planned], partitions: int = TOPIC_PARTITIONS
) -> tuple[dict[str, dict[str, int]], dict[str, int], dict[str, dict[str, str]]]:
    """Expected boards ({window-key suffix: {player: composite}}), outcome counts and metadata.

    Keys are ``"{game}:{window id}"``; every "ok" record is applied in its
    player's order; a copy of an event id whose record time is within the
    dedupe horizon of an applied copy's, before or after, is a no-op; one
    further away is applied again. gtour's tournament admits, per source
    partition (records must carry theirs), the first players of that
    partition's log to submit within its range, up to the partition's share
    of the seats, and counts each player's first attempts only; refusals are
    counted as ``tournament_full`` and ``attempts_used_up``. An entry's
    metadata is that of the last event that changed its value (none when that
    event carried none, or the player was retracted).
    """
    metas: dict[str, dict[str, str | None]] = {}
    boards: dict[str, dict[str, tuple[int, int, int]]] = {}  # key -> player -> (score, slot, slots)
    windows_of: dict[str, set[str]] = {}
    applied_at: dict[str, list[int]] = {}  # event id -> record times of applied copies
    counts: dict[str, int] = {}
    tries: dict[str, int] = {}  # gtour player -> attempts counted
    seats: dict[int, int] = {}  # partition -> gtour players entered
    for rec in records:
        if rec.expected == "erased":  # every game; attempts forgotten, seats stay taken
            counts["erased"] = counts.get("erased", 0) + 1
            for game_id, wids in windows_of.items():
                for wid in wids:
                    boards.get(f"{game_id}:{wid}", {}).pop(rec.event.player_id, None)
            tries.pop(rec.event.player_id, None)
            continue
        if rec.expected not in ("ok", "duplicate"):
            counts["dead"] = counts.get("dead", 0) + 1
            continue
        event = rec.event
        copies = applied_at.setdefault(event.event_id, [])
        if any(abs(rec.record_ts - t) <= DEDUPE_HORIZON_MS for t in copies):
            counts["duplicate"] = counts.get("duplicate", 0) + 1
            continue
        copies.append(rec.record_ts)
        counts["accepted"] = counts.get("accepted", 0) + 1
        game, player, op = event.game_id, event.player_id, GAMES[event.game_id]
        if event.kind is EventKind.RETRACT:
            for wid in windows_of.get(game, set()):
                boards.get(f"{game}:{wid}", {}).pop(player, None)
                metas.get(f"{game}:{wid}", {}).pop(player, None)
            continue
        ids = (
            _zoned_window_ids(event.ts_ms)
            if game == "gtz"
            else _window_ids(event.ts_ms, only_daily=game == "gday")
        )
        asc = game == "gasc"
        tour_span = TOUR_END_S - TOUR_START_S
        if (
            game == "gtour"
            and TOUR_START_S <= event.ts_ms // 1000 < TOUR_END_S
            and rec.record_ts <= (TOUR_END_S + LATENESS_S) * 1000
        ):
            used = tries.get(player, 0)
            if used == 0 and seats.get(rec.partition, 0) >= _tournament_seats(
                rec.partition, partitions
            ):
                counts["tournament_full"] = counts.get("tournament_full", 0) + 1
            elif used >= TOUR_ATTEMPTS:
                counts["attempts_used_up"] = counts.get("attempts_used_up", 0) + 1
            else:
                if used == 0:
                    seats[rec.partition] = seats.get(rec.partition, 0) + 1
                tries[player] = used + 1
                ids = [("tournament:cup", TOUR_START_S, tour_span), *ids]
        for wid, start_s, slots in ids:
            closes_s = start_s + slots + LATENESS_S  # windowed boards: end + lateness
            if wid != "alltime" and rec.record_ts > closes_s * 1000:
                continue  # this board closed before the record arrived (a late copy)
            windows_of.setdefault(game, set()).add(wid)
            board = boards.setdefault(f"{game}:{wid}", {})
            slot = event.ts_ms // 1000 - start_s
            cur = board.get(player)
            if cur is None:
                board[player] = (event.score, slot, slots)
            elif op == "best" and asc:  # lowest wins, the earlier achiever at a tie
                if (event.score, slot) < (cur[0], cur[1]):
                    board[player] = (event.score, slot, slots)
            elif op == "best":
                if (event.score, -slot) > (cur[0], -cur[1]):
                    board[player] = (event.score, slot, slots)
            elif op == "incr":
                board[player] = (min(cur[0] + event.score, MAX_SCORE), max(cur[1], slot), slots)
            elif op == "set" and slot >= cur[1]:
                board[player] = (event.score, slot, slots)
            if board[player] != cur:
                metas.setdefault(f"{game}:{wid}", {})[player] = event.metadata
    expected = {
        key: {
            # A lowest-wins board stores max_score - score (docs/GAMES.md).
            p: (MAX_SCORE - s if key.startswith("gasc:") else s) * n + (n - 1 - slot)
            for p, (s, slot, n) in members.items()
        }
        for key, members in boards.items()
    }
    metadata = {
        key: {p: m for p, m in members.items() if m is not None and p in boards.get(key, {})}
        for key, members in metas.items()
    }
    return (
        {k: v for k, v in expected.items() if v},
        counts,
        {k: v for k, v in metadata.items() if v},
    )


def read_metadata(client: RedisClient, namespace: str) -> dict[str, dict[str, str]]:
    """Every board's entry metadata as ``{"game:window": {player: metadata}}``."""
    out: dict[str, dict[str, str]] = {}
    for raw in client.scan_iter(match=f"{namespace}:*:meta:entry:*", count=1000):
        key = raw.decode()
        game = key.split("{", 1)[1].split("}", 1)[0]
        window = key.split(":meta:entry:", 1)[1]
        stored = client.hgetall(key)
        if stored:
            out[f"{game}:{window}"] = {text(p): text(m) for p, m in stored.items()}
    return out


def read_boards(client: RedisClient, namespace: str) -> dict[str, dict[str, int]]:
    """Every non-empty board of the namespace as ``{"game:window": {player: composite}}``."""
    out: dict[str, dict[str, int]] = {}
    for raw in client.scan_iter(match=f"{namespace}:*", count=1000):
        key = raw.decode()
        if not key.split("}:", 1)[1].startswith(BOARD_PREFIXES):
            continue  # bookkeeping, friend sets, caches
        game = key.split("{", 1)[1].split("}", 1)[0]
        window = key.split("}:", 1)[1]
        members: list[Any] = client.zrange(key, 0, -1, withscores=True)
        if members:
            out[f"{game}:{window}"] = {text(m): int(s) for m, s in members}
    return out


def read_stats(client: RedisClient, namespace: str) -> dict[str, int]:
    """The job's exactly-once counters summed over every board group of the namespace."""
    total: dict[str, int] = {}
    for key in client.scan_iter(match=f"{namespace}:*:meta:stats"):
        for name, value in client.hgetall(key).items():
            total[text(name)] = total.get(text(name), 0) + int(value)
    return total


def read_dead_letters(bootstrap: str, topic: str, timeout_s: float = 90.0) -> list[Any]:
    """Every committed record of a dead-letter topic, up to each partition's end offset.

    A partition is read when the consumer's position reaches the end offset
    taken at the start (transaction markers take offsets no record has), not
    when a poll comes back empty: a broker that just restarted may take
    seconds to serve its first fetch. Fails after ``timeout_s`` naming the gap.
    """
    return read_topic({"bootstrap.servers": bootstrap}, topic, timeout_s)


def job_env(topic: str, namespace: str, state_dir: Path, games_file: Path) -> dict[str, str]:
    """The environment of a job run for one test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    from config.settings import Settings

    base = Settings.from_env()
    env.update(
        LB_KAFKA_BOOTSTRAP=base.kafka_bootstrap,
        LB_REDIS_URL=base.redis_url.reveal(),
        LB_TOPIC=topic,
        LB_NAMESPACE=namespace,
        LB_STATE_DIR=str(state_dir),
        LB_CACHE_DIR=str(base.cache_dir),
        LB_HMAC_KEYS=KEYS,
        LB_GAMES=str(games_file),
        LB_BATCH_MS="20",
        LB_SNAPSHOT_INTERVAL_S="1",
        LB_DEDUPE_HORIZON_S=str(DEDUPE_HORIZON_MS // 1000),
    )
    return env


def stream_and_env(
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    tmp_path: Path,
    *,
    seed: int,
    count: int,
    state: str = "state",
) -> tuple[Stream, dict[str, str]]:
    """Produce a generated stream into ``topic``; the job environment that reads it."""
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    stream = generate(seed=seed, count=count)
    produce(kafka_bootstrap, topic, stream.records)
    return stream, job_env(topic, namespace, tmp_path / state, games)


def lb(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the ``lb`` CLI of this checkout."""
    return subprocess.run(
        [sys.executable, "-m", "lb.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def chunks(items: list[Planned], size: int) -> Iterator[list[Planned]]:
    for at in range(0, len(items), size):
        yield items[at : at + size]
