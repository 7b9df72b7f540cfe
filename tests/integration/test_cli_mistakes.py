"""Every mistake a newcomer made, fed to the CLI: one line on stderr naming the setting or
argument, exit code 2, no traceback, no panic, nothing created; and a job asked to stop
during a Redis outage stops within 5 s.

Services are never stopped here: "down" means an address where nothing listens, and the
Redis outage is a private ``redis-server`` this test starts and stops itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from adapters.redis import RedisClient
from tests.integration.streams import REPO, generate, job_env, lb, produce
from tests.poll import poll

#: Nothing listens here (a port number below 1024 that no test service uses).
NOWHERE = "127.0.0.1:9"
CLUSTER_NODE = "redis://127.0.0.1:17101/0"
GAMES_G1 = '[games."g1"]\nmax_score = 1000\n'

#: (case id, argv, environment overrides, what the one line must name)
MISTAKES: list[tuple[str, list[str], dict[str, str], str]] = [
    ("run-games-not-toml", ["run"], {"LB_GAMES": "{tmp}/broken.toml"}, "LB_GAMES"),
    ("run-games-missing", ["run"], {"LB_GAMES": "{tmp}/none.toml"}, "LB_GAMES"),
    ("run-games-bad-value", ["run"], {"LB_GAMES": "{tmp}/badvalue.toml"}, "LB_GAMES"),
    ("run-games-tournament", ["run"], {"LB_GAMES": "{tmp}/badtour.toml"}, "max_entries"),
    ("run-hmac-keys", ["run"], {"LB_HMAC_KEYS": "k1:nothex"}, "LB_HMAC_KEYS"),
    ("run-redis-down", ["run"], {"LB_REDIS_URL": f"redis://{NOWHERE}/0"}, "LB_REDIS_URL"),
    ("run-kafka-down", ["run"], {"LB_KAFKA_BOOTSTRAP": NOWHERE}, "LB_KAFKA_BOOTSTRAP"),
    ("run-cluster-flag", ["run"], {"LB_REDIS_CLUSTER": "1"}, "LB_REDIS_CLUSTER"),
    ("run-no-topic", ["run", "--until-end"], {"LB_TOPIC": "absent-{uid}"}, "LB_TOPIC"),
    ("run-batch-ms", ["run"], {"LB_BATCH_MS": "fast"}, "LB_BATCH_MS"),
    ("rebuild-redis-down", ["rebuild"], {"LB_REDIS_URL": f"redis://{NOWHERE}/0"}, "LB_REDIS"),
    ("top-redis-down", ["top", "g1"], {"LB_REDIS_URL": f"redis://{NOWHERE}/0"}, "LB_REDIS_URL"),
    ("top-redis-scheme", ["top", "g1"], {"LB_REDIS_URL": "http://127.0.0.1/"}, "LB_REDIS_URL"),
    ("top-cluster-flag", ["top", "g1"], {"LB_REDIS_CLUSTER": "1"}, "LB_REDIS_CLUSTER"),
    ("top-limit", ["top", "g1", "--limit", "0"], {}, "limit"),
    ("top-limit-type", ["top", "g1", "--limit", "ten"], {}, "--limit"),
    ("top-window", ["top", "g1", "--window", "monthly"], {}, "monthly"),
    ("rank-window", ["rank", "g1", "p1", "--window", "daily:2026-13-40"], {}, "2026-13-40"),
    ("around-k", ["around", "g1", "p1", "--k", "1000"], {}, "k"),
    ("top-unknown-game", ["top", "nope"], {"LB_GAMES": "{tmp}/g1.toml"}, "nope"),
    ("top-tournament", ["top", "g1", "--window", "tournament:cup"], {}, "tournament"),
    ("tournaments-player", ["tournaments", "g1", ""], {}, "playerId"),
    ("serve-port-range", ["serve", "--port", "99999"], {}, "--port"),
    ("produce-kafka-down", ["produce"], {"LB_KAFKA_BOOTSTRAP": NOWHERE}, "LB_KAFKA_BOOTSTRAP"),
    ("produce-unserved", ["produce", "--games", "g2"], {"LB_GAMES": "{tmp}/g1.toml"}, "g2"),
    (
        "produce-max-score",
        ["produce", "--max-score", "5000"],
        {"LB_GAMES": "{tmp}/g1.toml"},
        "1000",
    ),
    (
        "produce-metadata-too-large",
        ["produce", "--metadata", "é" * 300],
        {},
        "--metadata is 600 UTF-8 bytes, above the metadata_max_bytes 512",
    ),
    ("dlq-kafka-down", ["dlq", "show"], {"LB_KAFKA_BOOTSTRAP": NOWHERE}, "LB_KAFKA_BOOTSTRAP"),
    ("dlq-code", ["dlq", "redrive", "--code", "OOPS"], {}, "OOPS"),
    ("sketches-game", ["sketches", "publish", "--game", "g9"], {"LB_GAMES": "{tmp}/g1.toml"}, "g9"),
    ("sketches-every", ["sketches", "publish", "--every", "0"], {}, "--every"),
    ("topk-every", ["topk", "run", "--every", "0"], {}, "--every"),
    ("archive-margin", ["archive", "run", "--once", "--margin", "-1"], {}, "--margin"),
    ("unknown-command", ["tpo", "g1"], {}, "tpo"),
    ("backfill-from", ["backfill", "--from", "yesterday"], {}, "--from"),
    ("backfill-until", ["backfill", "--until", "0:5,0:6"], {}, "--until"),
    ("backfill-game", ["backfill", "--game", "g9"], {"LB_GAMES": "{tmp}/g1.toml"}, "g9"),
    ("backfill-window", ["backfill", "--window", "alltime"], {}, "--window"),
    ("backfill-redis-down", ["backfill"], {"LB_REDIS_URL": f"redis://{NOWHERE}/0"}, "LB_REDIS"),
    ("backfill-no-topic", ["backfill", "--topic", "absent-{uid}"], {}, "absent-"),
    ("rebuild-workers", ["rebuild", "--workers", "2"], {}, "--offline"),
    # An audit of a game found nowhere is a typo, not a pass (with and without LB_GAMES).
    ("verify-game-nowhere", ["verify", "--game", "nosuch", "--quiet"], {}, "nosuch"),
    ("verify-game", ["verify", "--game", "g9"], {"LB_GAMES": "{tmp}/g1.toml"}, "g9"),
    # Every window form is named, seasons and tournaments included.
    ("top-window-forms", ["top", "g1", "--window", "tourney"], {}, "tournament:NAME"),
    # A typo of a game or of LB_NAMESPACE is not an empty board: what exists is named.
    ("top-game-nowhere", ["top", "gl"], {}, "'gl'"),
    ("rank-game-nowhere", ["rank", "gl", "p1"], {}, "'gl'"),
    ("top-namespace-nowhere", ["top", "g1"], {"LB_NAMESPACE": "nosuch{uid}"}, "LB_NAMESPACE"),
    # Ranges a person cannot have meant.
    (
        "backfill-from-after-until",
        ["backfill", "--dry-run", "--from", "2026-12-01", "--until", "2026-11-01"],
        {},
        "not before --until",
    ),
    (
        "backfill-offsets-after",
        ["backfill", "--dry-run", "--from", "0:9", "--until", "0:3"],
        {},
        "not before --until 0:3",
    ),
    ("backfill-offset-past-end", ["backfill", "--dry-run", "--from", "1:5"], {}, "past the end"),
    ("backfill-from-future", ["backfill", "--dry-run", "--from", "2099-01-01"], {}, "no record"),
    # Help and messages in words.
    ("run-processes-zero", ["run", "--processes", "0"], {}, "--processes: must be at least 1"),
    ("rebuild-processes-zero", ["rebuild", "--processes", "0"], {}, "--processes"),
    ("produce-rate-word", ["produce", "--rate", "fast"], {}, "--rate: not a number: 'fast'"),
    ("top-redis-no-scheme", ["top", "g1"], {"LB_REDIS_URL": "127.0.0.1:26379"}, "no scheme"),
    (
        "produce-unknown-served-by-defaults",
        ["produce", "--unknown-games", "g2"],
        {},
        "built-in defaults",
    ),
]
CLUSTER_MISTAKES: list[tuple[str, list[str], dict[str, str], str]] = [
    ("run-cluster-url", ["run"], {"LB_REDIS_URL": CLUSTER_NODE}, "LB_REDIS_CLUSTER=1"),
    ("top-cluster-url", ["top", "g1"], {"LB_REDIS_URL": CLUSTER_NODE}, "LB_REDIS_CLUSTER=1"),
]


@pytest.fixture
def bare_topic(kafka_bootstrap: str) -> Iterator[str]:
    """A topic without its dead-letter topic: ``lb run`` would create that one."""
    name = f"t-mistakes-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=2)])[name].result(timeout=30)
    yield name
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


def _files(tmp_path: Path) -> Path:
    (tmp_path / "broken.toml").write_text("[games\n")
    (tmp_path / "badvalue.toml").write_text('[games."g1"]\noperator = "max"\n')
    (tmp_path / "g1.toml").write_text(GAMES_G1)
    (tmp_path / "badtour.toml").write_text(
        GAMES_G1 + '[games."g1".tournaments]\ncup = { start = 2026-11-01, end = 2026-11-02, '
        "max_entries = 0 }\n"
    )
    return tmp_path


def _python_module(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _assert_one_clear_line(done: Any, needle: str, argv: list[str]) -> None:
    err = done.stderr
    assert done.returncode == 2, (argv, done.returncode, err[-2000:])
    assert "Traceback" not in err and "panicked" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("lb"), lines
    assert needle in lines[0], lines


def _check(
    case: tuple[str, list[str], dict[str, str], str], topic: str, tmp_path: Path, kafka: str
) -> None:
    _, argv, overrides, needle = case
    files = _files(tmp_path)
    env = job_env(topic, "tmistakes", tmp_path / "state", files / "g1.toml")
    env.pop("LB_GAMES")  # the built-in defaults unless a case sets LB_GAMES
    uid = uuid.uuid4().hex[:8]
    # A mistake is named at once, not after a service's retry budget ran out: with
    # budgets far beyond the call's 60 s bound, a command that waited would time out.
    env.update(LB_REDIS_RETRY_S="600")
    env.update({k: v.format(tmp=files, uid=uid) for k, v in overrides.items()})
    done = lb(argv, env, timeout=60)
    _assert_one_clear_line(done, needle, argv)
    if argv[0] == "run":  # checked before anything is created
        assert not (tmp_path / "state").exists()
        admin = AdminClient({"bootstrap.servers": kafka})
        assert f"{topic}.dlq" not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("case", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_one_line_and_exit_2(
    case: tuple[str, list[str], dict[str, str], str],
    bare_topic: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    _check(case, bare_topic, tmp_path, kafka_bootstrap)


@pytest.mark.cluster
@pytest.mark.parametrize("case", CLUSTER_MISTAKES, ids=[m[0] for m in CLUSTER_MISTAKES])
def test_cluster_mismatches_are_one_line(
    case: tuple[str, list[str], dict[str, str], str],
    cluster_services: list[str],
    bare_topic: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    node = cluster_services[0]
    fixed = (case[0], case[1], {"LB_REDIS_URL": f"{node}/0"}, case[3])
    _check(fixed, bare_topic, tmp_path, kafka_bootstrap)


def test_serve_on_a_busy_port(tmp_path: Path, bare_topic: str, kafka_bootstrap: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        case: tuple[str, list[str], dict[str, str], str] = (
            "serve-busy",
            ["serve", "--port", str(port)],
            {},
            "the port is in use",
        )
        _check(case, bare_topic, tmp_path, kafka_bootstrap)


def test_flow_started_by_hand_without_its_dead_letter_topic(
    bare_topic: str, tmp_path: Path
) -> None:
    env = job_env(bare_topic, "tmistakes", tmp_path / "state", _files(tmp_path) / "g1.toml")
    done = _python_module(["bytewax.run", "flows.scoreboard:build()"], env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "panicked" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"scoreboard: error: the dead-letter topic '{bare_topic}.dlq' (LB_DLQ_TOPIC) does not "
        f"exist: `lb run` creates it, or create it with 2 partitions (as many as '{bare_topic}')"
    ]


def test_a_second_lb_run_on_the_same_topic_and_state_dir_is_refused(
    bare_topic: str, tmp_path: Path
) -> None:
    env = job_env(bare_topic, "tmistakes", tmp_path / "state", _files(tmp_path) / "g1.toml")
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "lb.cli", "run"],
            env=env,
            cwd=REPO,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "state" / "run").glob("job-*.json")):  # serving metrics
            assert time.monotonic() < deadline and first.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        second = lb(["run"], env, timeout=60)
        _assert_one_clear_line(second, f"pid {first.pid}", ["run"])
        line = second.stderr.strip()
        assert "another lb run" in line and bare_topic in line and "since" in line, line
        assert "/metrics" in line, line
        assert first.poll() is None, "the running job must not be disturbed"
        # Another topic on the same state directory is another job: not refused.
        other = dict(env, LB_TOPIC=f"{bare_topic}-other")
        assert "another lb run" not in lb(["run", "--dry-run"], other, timeout=60).stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0, log.read_text()[-2000:]
    # The lock went with the process: the next start is not refused.
    again = lb(["run", "--until-end"], env, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]


def test_dry_run_touches_nothing(tmp_path: Path) -> None:
    env = job_env("never-created", "tmistakes", tmp_path / "state", _files(tmp_path) / "g1.toml")
    env["LB_KAFKA_BOOTSTRAP"] = NOWHERE  # would fail if it were contacted
    env["LB_REDIS_URL"] = f"redis://{NOWHERE}/0"
    done = lb(["run", "--dry-run", "--processes", "2"], env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all("flows.scoreboard:build()" in line for line in lines)
    assert not (tmp_path / "state").exists()
    rebuild = lb(["rebuild", "--offline", "--dry-run"], env, timeout=60)
    assert rebuild.returncode == 0, rebuild.stderr
    # The printed command pastes into a shell as is: no nested single quotes.
    assert """'flows.scoreboard:build(until_end=True, namespace="tmistakes~rebuild", """ in (
        rebuild.stdout
    )


def test_status_under_a_custom_state_dir_reports_the_configured_services(
    tmp_path: Path,
) -> None:
    env = job_env("any", "tmistakes", tmp_path / "elsewhere", _files(tmp_path) / "g1.toml")
    done = lb(["status"], env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no services recorded" in done.stdout and "the configured ones" in done.stdout
    assert "kafka" in done.stdout and " up " in done.stdout and "[" not in done.stdout


def test_a_closed_pipe_ends_the_command_quietly(
    redis_client: RedisClient, namespace: str, tmp_path: Path
) -> None:
    redis_client.zadd(f"{namespace}:{{g1}}:alltime", {f"p{i:05d}": i for i in range(1000)})
    env = job_env("any", namespace, tmp_path / "state", _files(tmp_path) / "g1.toml")
    env.pop("LB_GAMES")
    reader = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "top", "g1", "--limit", "1000"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # like `| head` that has read enough
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_schemas_compat_help() -> None:
    done = _python_module(["schemas.compat", "--help"], dict(os.environ))
    assert done.returncode == 0 and "usage: python -m schemas.compat" in done.stdout


# -- stopping during a Redis outage -------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_redis(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A throwaway redis-server on a spare loopback port; always stopped."""
    port = _free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the private redis-server accepts connections", lambda: _accepts(port), 10)
        yield port, server
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=10)


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def _wait_for(path: Path, text: str, timeout_s: float) -> None:
    poll(
        f"{text!r} in the log",
        lambda: text in path.read_text(errors="replace"),
        timeout_s,
        context=lambda: path.read_text(errors="replace")[-2000:],
    )


@pytest.mark.slow
def test_run_stops_on_sigterm_during_a_redis_outage_without_waiting_out_the_retry(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path
) -> None:
    stream = generate(seed=5, count=4000)
    produce(kafka_bootstrap, topic, stream.records[:2000])
    log = tmp_path / "job.log"
    with private_redis(tmp_path) as (port, server):
        env = job_env(topic, namespace, tmp_path / "state", _files(tmp_path) / "g1.toml")
        env.pop("LB_GAMES")
        # A retry budget far beyond the 30 s the stop is given: a job that waited it
        # out instead of stopping would not exit in time.
        env.update(
            LB_REDIS_URL=f"redis://127.0.0.1:{port}/0", LB_PROGRESS_S="1", LB_REDIS_RETRY_S="600"
        )
        with log.open("wb") as out:
            job = subprocess.Popen(
                [sys.executable, "-m", "lb.cli", "run"],
                env=env,
                cwd=REPO,
                stderr=out,
                start_new_session=True,
            )
        try:
            _wait_for(log, "scoreboard job: after", 60)  # the first records are applied
            server.terminate()  # the outage
            server.wait(timeout=10)
            produce(kafka_bootstrap, topic, stream.records[2000:])
            _wait_for(log, "failed (attempt 3", 60)  # the sink is retrying
            asked = time.monotonic()
            job.send_signal(signal.SIGTERM)
            code = job.wait(timeout=30)
            took = time.monotonic() - asked
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)  # lb run and its Bytewax child
                job.wait(timeout=10)
    text = log.read_text(errors="replace")
    print(f"lb run stopped {took:.2f} s after SIGTERM during the Redis outage")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text and "panicked" not in text
    assert "stopped without applying the current batch" in text
