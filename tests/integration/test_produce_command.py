"""``lb produce`` against the real broker, checked by the real job: every record the
generator calls bad is dead-lettered with that code, the rest are counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from adapters.kafka import header_map
from adapters.redis import RedisClient
from tests.integration.streams import job_env, lb, read_dead_letters, read_stats


def test_lb_produce_outcomes_match_what_the_job_does(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text('[default]\noperator = "incr"\n[games."g1"]\noperator = "best"\n')
    env = job_env(topic, namespace, tmp_path / "state", games)
    env.pop("LB_HMAC_KEYS")  # producer and job both use the built-in development key
    produced = lb(
        [
            "produce",
            "--count", "4000",
            "--players", "500",
            "--games", "g1,g2",
            "--dup-ratio", "0.05",
            "--bad-ratio", "0.05",
            "--seed", "5",
            "--quiet",
        ],
        env,
        timeout=120,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-2000:]
    # --quiet: nothing on stderr, no librdkafka line (a BGQUEUE purge, a PID retry) either.
    assert produced.stderr == "", produced.stderr
    summary = json.loads(produced.stdout)
    assert summary["delivered"] == 4000
    expected = summary["expected"]

    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "signing keys: dev1 (the built-in development key)" in done.stderr

    codes = Counter(
        header_map(m.headers())["error.code"]
        for m in read_dead_letters(kafka_bootstrap, f"{topic}.dlq")
    )
    assert dict(codes) == {k: v for k, v in expected.items() if k not in ("ok", "duplicate")}
    stats = read_stats(redis_client, namespace)
    assert stats["applied"] + stats["noop"] == expected["ok"]
    assert stats["duplicate"] == expected["duplicate"]
