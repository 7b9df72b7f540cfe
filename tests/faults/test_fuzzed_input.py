"""100K random and mutated records: the job never crashes and dead-letters every one."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from adapters.kafka import header_map
from adapters.redis import RedisClient
from domain.signing import parse_keyring, signed_event
from schemas.codec import ScoreEventCodec
from tests.integration.streams import (
    KEYS,
    Planned,
    job_env,
    lb,
    produce,
    read_boards,
    read_dead_letters,
    read_stats,
)

TIMEOUT_S = 600

pytestmark = pytest.mark.timeout(TIMEOUT_S)

COUNT = 100_000
RECORD_TS = 1_778_000_000_000  # 2026-05-05, well inside every board's range


def _mutants(rng: random.Random, count: int) -> list[Planned]:
    keyring = parse_keyring(KEYS)
    codec = ScoreEventCodec.from_registry()
    out: list[Planned] = []
    for i in range(count):
        player = f"p{rng.randrange(500):04d}"
        event = signed_event(
            keyring,
            "k1",
            event_id=f"e{i}",
            game_id="gbest",
            player_id=player,
            score=rng.randrange(1000),
            ts_ms=RECORD_TS - rng.randrange(1000),
        )
        good = bytearray(codec.encode(event))
        kind = i % 6
        if kind == 0:  # truncated
            value = bytes(good[: rng.randrange(len(good))])
        elif kind == 1:  # flipped bits anywhere after the header
            at = rng.randrange(5, len(good))
            good[at] ^= 1 << rng.randrange(8)
            value = bytes(good)
        elif kind == 2:  # wrong or unknown schema id
            good[1:5] = rng.choice([0, 2, 7, 2**31 - 1]).to_bytes(4, "big")
            value = bytes(good)
        elif kind == 3:  # huge strings
            big = rng.choice([200, 5_000, 60_000])
            huge = signed_event(
                keyring, "k1", event_id="x" * big, game_id="gbest", player_id=player,
                score=1, ts_ms=RECORD_TS,
            )  # fmt: skip
            value = codec.encode(huge)
        elif kind == 4:  # random bytes, sometimes with a valid header
            body = rng.randbytes(rng.randrange(0, 300))
            value = (b"\x00\x00\x00\x00\x01" + body) if rng.random() < 0.5 else body
        else:  # a valid frame of the wrong types: strings where longs belong
            value = b"\x00\x00\x00\x00\x01" + bytes(good[5:])[::-1]
        if value == bytes(codec.encode(event)):
            value = value[:-1]  # a mutation must mutate
        out.append(Planned(player.encode(), value, RECORD_TS, "bad"))
    return out


def test_the_job_survives_fuzzed_input_and_dead_letters_all_of_it(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    rng = random.Random(1234)
    records = _mutants(rng, COUNT)
    produce(kafka_bootstrap, topic, records)
    games = tmp_path / "games.toml"
    games.write_text('[games."gbest"]\n')
    env = job_env(topic, namespace, tmp_path / "state", games)

    done = lb(["run", "--until-end"], env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "decode + verify: native" in done.stderr  # LB_DECODER's default, auto

    letters = read_dead_letters(kafka_bootstrap, f"{topic}.dlq")
    positions = {
        (int(h["source.partition"]), int(h["source.offset"]))
        for h in (header_map(m.headers()) for m in letters)
    }
    assert len(letters) == len(positions) == COUNT
    assert positions == {(r.partition, r.offset) for r in records}
    codes = Counter(header_map(m.headers())["error.code"] for m in letters)
    assert set(codes) <= {"DECODE", "SCHEMA", "SIGNATURE", "UNKNOWN_KEY", "BOUNDS"}
    assert read_boards(redis_client, namespace) == {}
    assert sum(read_stats(redis_client, namespace).values()) == 0
