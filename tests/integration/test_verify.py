"""``lb verify`` against real Kafka and Redis: equal boards, tampered boards, a live job."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from adapters.redis import RedisClient, text_of
from tests.integration.streams import (
    GAMES,
    GAMES_TOML,
    generate,
    job_env,
    lb,
    produce,
    read_boards,
    read_stats,
    stream_and_env,
)
from tests.poll import poll


def _verify(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    done = lb(["verify", "--json", *args], env, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


def _everything(client: RedisClient, namespace: str) -> dict[Any, Any]:
    """Every key of the namespace with its serialized value (to prove nothing was written)."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"{namespace}:*", count=1000)}


def test_equal_boards_verify_and_tampered_ones_are_named(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=21, count=4000)
    done = lb(["run", "--until-end"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    before = _everything(redis_client, namespace)

    code, report, stderr = _verify(env)
    assert code == 0, report
    assert report["equal"] is True and report["differences"] == {}
    assert (
        report["groups"] == len(GAMES) and report["boards"] >= len(GAMES) and report["members"] > 0
    )
    assert report["records_replayed"] == 4000
    assert "replayed" in stderr  # progress
    assert _everything(redis_client, namespace) == before  # no live key written
    assert not list(redis_client.scan_iter(match=f"{namespace}~verify*"))  # scratch gone

    board = f"{namespace}:{{gbest}}:alltime"
    pairs: list[Any] = redis_client.zrange(board, 0, 1, withscores=True)
    (changed, score), (removed, _) = pairs
    redis_client.zadd(board, {changed: score + 1})
    redis_client.zrem(board, removed)
    redis_client.zadd(f"{namespace}:{{gincr}}:alltime", {"intruder": 5})
    redis_client.hincrby(f"{namespace}:{{gset}}:meta:stats", "noop", 1)
    attempts = f"{namespace}:{{gtour}}:meta:attempts:cup"  # a tournament's attempts count
    tried = min(redis_client.hkeys(attempts))
    redis_client.hincrby(attempts, tried, 1)

    code, report, _ = _verify(env)
    assert code == 1
    assert report["differences"] == {"wrong value": 2, "missing": 1, "extra": 1, "counter": 1}
    found = {(d["group"], d["board"], d["player"], d["kind"]) for d in report["examples"]}
    assert found == {
        ("gbest", "alltime", text_of(changed), "wrong value"),
        ("gbest", "alltime", text_of(removed), "missing"),
        ("gincr", "alltime", "intruder", "extra"),
        ("gset", "meta:stats", "noop", "counter"),
        ("gtour", "meta:attempts:cup", text_of(tried), "wrong value"),
    }
    wrong = next(d for d in report["examples"] if d["kind"] == "wrong value")
    assert wrong["live"] == int(score) + 1 and wrong["log"] == int(score)

    # --game limits the audit; the text form names the board and the player.
    code, report, _ = _verify(env, "--game", "gday")
    assert code == 0 and report["groups"] == 1
    text = lb(["verify", "--game", "gincr", "--quiet"], env, timeout=300)
    assert text.returncode == 1, text.stderr
    assert "extra: group gincr board alltime intruder" in text.stdout


def test_verify_beside_a_running_job_reports_no_false_differences(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    records = generate(seed=22, count=24_000).records
    produce(kafka_bootstrap, topic, records[:8000])
    job = lb_background(env)
    try:

        def feed() -> None:
            for at in range(8000, len(records), 400):
                produce(kafka_bootstrap, topic, records[at : at + 400])
                time.sleep(0.1)

        feeder = threading.Thread(target=feed, daemon=True)
        poll(
            "the job applies records",
            lambda: sum(read_stats(redis_client, namespace).values()) >= 5000,
            120,
        )
        feeder.start()
        code, report, _ = _verify(env)
        moving = feeder.is_alive()
        feeder.join(timeout=120)
    finally:
        job.terminate()
        job.wait(timeout=60)
    assert moving, "the stream ended before the audit did: nothing was running beside it"
    assert code == 0, report
    assert report["equal"] is True
    assert read_boards(redis_client, namespace)  # the job did write while verify ran


def lb_background(env: dict[str, str]) -> Any:
    import subprocess
    import sys

    from tests.integration.streams import REPO

    return subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "run"],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
