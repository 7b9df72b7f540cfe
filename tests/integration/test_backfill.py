"""``lb backfill``'s typical uses against real Kafka and Redis, each checked
against the independent oracle: a game's configuration gains windows, a game
is recomputed after a scoring fix, an expired window is rebuilt for an audit;
plus the plan of ``--dry-run`` and the clean-up on Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient, text
from tests.faults.harness import verify
from tests.integration.streams import (
    GAMES_TOML,
    REPO,
    lb,
    oracle,
    read_boards,
    stream_and_env,
)

pytestmark = pytest.mark.timeout(300)


def group_snapshot(client: RedisClient, namespace: str, game: str) -> dict[str, Any]:
    """Every key of a game's group: its type, value and absolute expiry (PEXPIRETIME)."""
    out: dict[str, Any] = {}
    for raw in client.scan_iter(match=f"{namespace}:{{{game}}}:*", count=1000):
        key = text(raw)
        kind = text(client.type(key))
        if kind == "zset":
            value: Any = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "set":
            value = sorted(client.smembers(key))
        else:
            value = kind
        out[key] = (value, client.execute_command("PEXPIRETIME", key))
    return out


def _games(env: dict[str, str], text: str) -> None:
    Path(env["LB_GAMES"]).write_text(text)


def _backfill(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = lb(["backfill", *args], env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "records" in done.stderr and "ETA" in done.stderr  # progress on stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    # Folded in memory, loaded, then the rest; the phases add up to the run.
    last = "move_in" if report["mode"] == "fill" else "catch_up_and_cut_over"
    phases = report["phases_s"]
    assert list(phases) == ["replay", "load", last] and min(phases.values()) >= 0
    assert abs(sum(phases.values()) - report["seconds"]) < 0.05
    return report


def _no_staging(client: RedisClient, namespace: str) -> None:
    assert not list(client.scan_iter(match=f"{namespace}~*", count=1000))


def test_a_game_gains_windows_and_its_missing_boards_are_built_from_history(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=21, count=6000)
    _games(
        env,
        GAMES_TOML.replace(
            'operator = "best"\nmax_score', 'windows = ["alltime"]\noperator = "best"\nmax_score', 1
        ),
    )
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    assert not [k for k in read_boards(redis_client, namespace) if k.startswith("gbest:daily")]
    other = group_snapshot(redis_client, namespace, "gincr")
    _games(env, GAMES_TOML)  # gbest now has daily and weekly boards too
    report = _backfill(env, "--game", "gbest")
    assert report["mode"] == "replace" and report["groups"] == 1
    verify(stream.records, redis_client, namespace, kafka_bootstrap, topic, "")
    assert group_snapshot(redis_client, namespace, "gincr") == other
    _no_staging(redis_client, namespace)


def test_one_game_is_recomputed_after_a_scoring_fix(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=22, count=6000)
    wrong = GAMES_TOML.replace(
        '[games."gset"]\noperator = "set"', '[games."gset"]\noperator = "best"'
    )
    assert wrong != GAMES_TOML
    _games(env, wrong)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    expected, _ = oracle(stream.records)
    assert read_boards(redis_client, namespace)["gset:alltime"] != expected["gset:alltime"]
    other = group_snapshot(redis_client, namespace, "gbest")
    _games(env, GAMES_TOML)  # the fix
    _backfill(env, "--game", "gset", "--processes", "3")  # 4 partitions over 3 processes
    verify(stream.records, redis_client, namespace, kafka_bootstrap, topic, "")
    assert group_snapshot(redis_client, namespace, "gbest") == other
    _no_staging(redis_client, namespace)


def test_an_expired_window_is_rebuilt_for_an_audit(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=23, count=6000)
    gday = '[games."gday"]\noperator = "best"\nmax_score = 1000000\nwindows = ["daily"]\n'
    short = GAMES_TOML.replace(
        f"{gday}lateness_seconds = 3600\nhourly_retention_seconds = 3153600000\n"
        "daily_retention_seconds = 3153600000\n",
        f"{gday}lateness_seconds = 3600\nhourly_retention_seconds = 3153600000\n"
        "daily_retention_seconds = 3600\n",
    )
    assert short != GAMES_TOML
    _games(env, short)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    assert not [k for k in read_boards(redis_client, namespace) if k.startswith("gday:")]
    before = group_snapshot(redis_client, namespace, "gday")
    others = group_snapshot(redis_client, namespace, "gbest")
    # From the window's first day to the end of the log: a RETRACT later in the
    # log removes a player from old windows too.
    window = "daily:2026-11-01"
    plan = lb(
        [
            *("backfill", "--game", "gday", "--from", "2026-11-01T00:00:00Z"),
            *("--window", window, "--dry-run"),
        ],
        env,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stderr
    described = json.loads(plan.stdout)
    assert described["mode"] == "fill" and described["games"] == ["gday"]
    assert 0 < described["records"] < len(stream.records)
    report = _backfill(
        env,
        *("--game", "gday", "--from", "2026-11-01T00:00:00Z"),
        *("--window", window, "--keep-hours", "2"),
        *("--processes", "2"),  # the 4 partitions replayed by two processes
    )
    assert report["boards_moved"] == {"gday": [window]}
    expected, _ = oracle(stream.records)
    assert read_boards(redis_client, namespace) == {
        **{
            k: v
            for k, v in read_boards(redis_client, namespace).items()
            if not k.startswith("gday")
        },
        f"gday:{window}": expected[f"gday:{window}"],
    }
    board = f"{namespace}:{{gday}}:{window}"
    assert 3600 < redis_client.ttl(board) <= 7200
    after = group_snapshot(redis_client, namespace, "gday")
    after.pop(board)
    assert after == before  # watermarks, counters, dedupe ids: untouched
    assert group_snapshot(redis_client, namespace, "gbest") == others
    _no_staging(redis_client, namespace)


def _exit_code(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """``proc``'s exit code; if it has not exited by then, fail with every thread's stack."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # lb's faulthandler: stacks to stderr
        time.sleep(2.0)
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"no exit in {timeout_s:g} s; its stderr:\n{err[-8000:]}") from None


def _kernel_lines(pid: int) -> str:
    """What the kernel logged about process ``pid`` (a segfault's faulting library), if readable."""
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return "".join(f"\nkernel: {line}" for line in log.splitlines() if f"[{pid}]" in line)


def test_dry_run_prints_the_plan_and_ctrl_c_drops_the_staging_keys(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    stream, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=24, count=4000)
    plan = lb(["backfill", "--dry-run", "--from", "0:10,1:20", "--until", "0:15"], env, timeout=60)
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert doc["partitions"]["0"] == {"from": 10, "until": 15, "records": 5}
    assert doc["partitions"]["1"]["from"] == 20 and doc["mode"] == "fill"
    full = json.loads(lb(["backfill", "--dry-run"], env, timeout=60).stdout)
    assert full["records"] == len(stream.records) and full["mode"] == "replace"
    assert not list(redis_client.scan_iter(match=f"{namespace}*"))  # wrote nothing

    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    live = read_boards(redis_client, namespace)
    # A live job sitting exactly at the head keeps a strict cut-over waiting: interrupt it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "rebuild", "--strict-for", "600", "--processes", "2"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "ETA" in line:
            break
    proc.send_signal(signal.SIGUSR1)  # asked for its stacks, it prints them and goes on
    time.sleep(1.5)  # into the cut-over loop (not a timed assert: either way it must clean up)
    proc.send_signal(signal.SIGINT)
    code = _exit_code(proc, 60)
    rest = proc.stderr.read()
    # On a crash: its Python stacks, and the kernel's line naming the library that faulted.
    assert code == 130, "".join(lines) + rest[-6000:] + _kernel_lines(proc.pid)
    assert "(most recent call first):" in rest and "lb/cli.py" in rest, rest[-3000:]
    _no_staging(redis_client, namespace)
    assert read_boards(redis_client, namespace) == live


def test_another_topic_is_replayed_for_a_game_the_live_topic_does_not_carry(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.integration.streams import generate, produce

    live_stream = generate(seed=25, count=4000).records
    live_records = [r for r in live_stream if r.event is None or r.event.game_id != "gday"]
    produce(kafka_bootstrap, topic, live_records)
    _, env = stream_and_env(kafka_bootstrap, topic, namespace, tmp_path, seed=1, count=0)
    assert lb(["run", "--until-end"], env, timeout=300).returncode == 0
    others = group_snapshot(redis_client, namespace, "gbest")
    export = f"{topic}-export"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(export, num_partitions=2)]).values():
        future.result(timeout=30)
    try:
        tournament = [
            r
            for r in generate(seed=26, count=4000).records
            if r.event is not None and r.event.game_id == "gday"
        ]
        produce(kafka_bootstrap, export, tournament)
        report = _backfill(env, "--topic", export, "--game", "gday")
        assert report["groups"] == 1
    finally:
        for future in admin.delete_topics([export]).values():
            future.result(timeout=30)
    expected, counts = oracle(tournament)
    boards = read_boards(redis_client, namespace)
    assert {k: v for k, v in boards.items() if k.startswith("gday:")} == expected
    stats = {
        text(k): int(v) for k, v in redis_client.hgetall(f"{namespace}:{{gday}}:meta:stats").items()
    }
    assert stats.get("applied", 0) + stats.get("noop", 0) == counts["accepted"]
    assert stats.get("duplicate", 0) == counts.get("duplicate", 0)
    wm = redis_client.hgetall(f"{namespace}:{{gday}}:meta:wm")
    assert {text(k).rpartition("/")[0] for k in wm} == {export}
    assert group_snapshot(redis_client, namespace, "gbest") == others
    _no_staging(redis_client, namespace)
