"""The Go and Java producer kits beside ``lb produce``: one topic, one job, the oracle's boards.

Each kit's command produces a few thousand signed events into the same topic
as ``lb produce``, all three at once, with bad records planted by the kits
(one of each code in turn). The job applies the topic; the boards must equal
the independent oracle of :mod:`tests.integration.streams`, and the dead-letter
topic must hold exactly the planted records, at their source positions, with
their codes. Player ids do not overlap between producers, so each player's
events keep the order of one producer's partition.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from adapters.kafka import header_map
from adapters.kafka import read_topic as records_of
from adapters.redis import RedisClient
from domain.events import EventKind, ScoreEvent
from schemas.codec import ScoreEventCodec
from tests.integration.streams import (
    GAMES_TOML,
    KEYS,
    REPO,
    Planned,
    job_env,
    lb,
    oracle_with_metadata,
    read_boards,
    read_dead_letters,
    read_metadata,
    read_stats,
)

GAMES = "gbest,gincr,gset,gasc"
PER_KIT = 3000
PLANTED = 14  # two of each code the kits plant
GO_COMMAND = REPO / "clients" / "go" / "bin" / "lb-produce-go"
JAVA_DIR = REPO / "clients" / "java"


def build_kits() -> None:
    """scripts/kits.sh: a no-op when the kits are built and tested already."""
    done = subprocess.run(
        [str(REPO / "scripts" / "kits.sh")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def java_command() -> list[str]:
    classpath = (JAVA_DIR / "target" / "classpath.txt").read_text().strip()
    return [
        "java",
        "-cp",
        f"{JAVA_DIR / 'target' / 'classes'}:{classpath}",
        "leaderboard.kit.Produce",
    ]


def kit_args(topic: str, report: Path, key_id: str, seed: int) -> list[str]:
    return [
        "--topic", topic, "--keys", KEYS, "--key-id", key_id, "--games", GAMES,
        "--count", str(PER_KIT), "--bad", str(PLANTED), "--players", "200",
        "--max-score", "1000000", "--retract-ratio", "0.01", "--seed", str(seed),
        "--report", str(report),
    ]  # fmt: skip


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic``, in (partition, offset) order."""
    got = records_of({"bootstrap.servers": bootstrap}, topic, timeout_s=120)
    return sorted(got, key=lambda m: (m.partition(), m.offset()))


def planned(messages: list[Any], reports: list[Path]) -> list[Planned]:
    """Each record with the outcome its producer intended: the kits' reports, else ``ok``."""
    intended: dict[tuple[int, int], dict[str, Any]] = {}
    for report in reports:
        for line in report.read_text().splitlines():
            row = json.loads(line)
            intended[(row["partition"], row["offset"])] = row
    codec = ScoreEventCodec.from_registry()
    out = []
    for msg in messages:
        position = (msg.partition(), msg.offset())
        row = intended.pop(position, None)
        rec = Planned(msg.key(), msg.value(), msg.timestamp()[1], "ok")
        rec.partition, rec.offset = position
        if row is None:  # lb produce's: every one valid (no bad or duplicate ratio)
            rec.event = codec.decode(msg.value())
        elif row["expected"] == "ok":
            e = row["event"]
            rec.event = ScoreEvent(
                e["eventId"], e["gameId"], e["playerId"], e["score"], e["ts"],
                EventKind(e["kind"]), e["keyId"], b"", e.get("metadata"),
            )  # fmt: skip
            assert rec.key == e["playerId"].encode()
        else:
            rec.expected = row["expected"]
        out.append(rec)
    assert not intended, f"reported records missing from the topic: {list(intended)[:5]}"
    return out


def test_go_and_java_kits_beside_lb_produce_give_the_oracle_boards(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    build_kits()
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    go_report, java_report = tmp_path / "go.jsonl", tmp_path / "java.jsonl"
    python = [
        "produce", "--count", str(PER_KIT), "--players", "300", "--games", GAMES,
        "--bad-ratio", "0", "--dup-ratio", "0", "--quiet", "--metadata", "py | Zoë 🏎",
    ]  # fmt: skip
    # Python and Go write v2 records with metadata, Java v1 (no --metadata): one topic.
    procs = {
        "go": subprocess.Popen(
            [str(GO_COMMAND), *kit_args(topic, go_report, "k1", 1), "--metadata", "go | 日本"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ),
        "java": subprocess.Popen(
            [*java_command(), *kit_args(topic, java_report, "k2", 2)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ),
    }  # fmt: skip
    made = lb(python, env, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    summaries = {"python": json.loads(made.stdout)}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
        summaries[name] = json.loads(out)
    assert summaries["python"]["expected"] == {"ok": PER_KIT}
    for name in ("go", "java"):
        expected = summaries[name]["expected"]
        assert expected["ok"] == PER_KIT - PLANTED and sum(expected.values()) == PER_KIT, name

    records = planned(read_topic(kafka_bootstrap, topic), [go_report, java_report])
    assert len(records) == 3 * PER_KIT

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    expected_boards, counts, expected_metadata = oracle_with_metadata(records)
    assert read_boards(redis_client, namespace) == expected_boards
    assert read_metadata(redis_client, namespace) == expected_metadata
    kept = {m for board in expected_metadata.values() for m in board.values()}
    assert kept == {"py | Zoë 🏎", "go | 日本"}

    letters: dict[tuple[int, int], str] = {}
    for msg in read_dead_letters(kafka_bootstrap, f"{topic}.dlq"):
        h = header_map(msg.headers())
        position = (int(h["source.partition"]), int(h["source.offset"]))
        assert position not in letters, f"dead letter {position} written twice"
        letters[position] = h["error.code"]
    bad = {(r.partition, r.offset): r.expected for r in records if r.expected != "ok"}
    assert letters == bad
    assert len(bad) == 2 * PLANTED
    assert set(bad.values()) == {
        "SIGNATURE", "UNKNOWN_KEY", "BOUNDS", "FUTURE", "UNKNOWN_GAME", "SCHEMA", "DECODE",
    }  # fmt: skip

    stats = read_stats(redis_client, namespace)
    assert stats["applied"] + stats["noop"] == counts["accepted"] == 3 * PER_KIT - 2 * PLANTED
    assert stats.get("duplicate", 0) == 0
