"""Readiness follows a real outage: a private Redis stalled (SIGSTOP) under a running job.

The job stays live (it is retrying, by design) but stops being ready once the
retry loop is older than ``LB_READY_RETRY_S``; ``lb_redis_retries_total``
counts the retries; when Redis comes back the job is ready again and every
record is counted exactly once. Also: a busy ``LB_METRICS_PORT`` is one line
naming the setting and exit 2.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

from telemetry import derive, server
from tests.integration.streams import GAMES_TOML, Stream, generate, job_env, lb, produce
from tests.integration.watching import http_get, private_redis, start_job, until


def test_a_stalled_redis_makes_the_job_unready_but_live_and_it_recovers(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    stream = generate(seed=3, count=800)
    log = tmp_path / "job.log"
    with private_redis() as redis_server:
        env = job_env(topic, namespace, state, games)
        env.update(
            LB_REDIS_URL=f"redis://127.0.0.1:{redis_server.port}/0",
            LB_READY_RETRY_S="2",
            LB_REDIS_TIMEOUT_S="1",
            LB_HEAL_CHECK_S="1",
        )
        job = start_job(["run"], env, log)
        try:
            _stall_and_recover(redis_server.pid, job, state, log, kafka_bootstrap, topic, stream)
        finally:
            os.kill(redis_server.pid, signal.SIGCONT)
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=60)
    assert job.returncode == 0, log.read_text()[-3000:]


def _stall_and_recover(
    redis_pid: int,
    job: subprocess.Popen[str],
    state: Path,
    log: Path,
    kafka_bootstrap: str,
    topic: str,
    stream: Stream,
) -> None:
    """Ready, then not ready (but live) while Redis is stopped, then ready with nothing lost."""
    entry = until("registered", lambda: server.registered(state, "job"), log, job)[0]
    base = entry["metrics"].removesuffix("/metrics")
    produce(kafka_bootstrap, topic, stream.records[:400])
    until("ready", lambda: http_get(base + "/readyz")[0] == 200, log, job)

    os.kill(redis_pid, signal.SIGSTOP)  # a stall: connections hang, then time out
    produce(kafka_bootstrap, topic, stream.records[400:])
    _, body = until(
        "not ready while Redis stalls",
        lambda: (got := http_get(base + "/readyz"))[0] == 503 and got,
        log,
        job,
    )
    assert any("LB_REDIS_RETRY_S" in reason for reason in json.loads(body)["reasons"])
    assert http_get(base + "/livez")[0] == 200  # retrying is not being stuck
    samples = derive.parse_exposition(http_get(entry["metrics"])[1])
    assert derive.total(samples, "lb_ready") == 0
    assert derive.total(samples, "lb_live") == 1
    assert derive.total(samples, "lb_redis_retries_total") >= 1

    os.kill(redis_pid, signal.SIGCONT)
    until("ready again", lambda: http_get(base + "/readyz")[0] == 200, log, job)

    def everything_counted() -> bool:
        found = derive.parse_exposition(http_get(entry["metrics"])[1])
        return derive.total(found, "lb_records_total") == len(stream.records)

    until("every record counted once", everything_counted, log, job)


def test_a_busy_metrics_port_is_one_line_and_exit_2(
    kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    env = job_env(topic, namespace, tmp_path / "state", games)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        env["LB_METRICS_PORT"] = str(holder.getsockname()[1])
        done = lb(["run", "--until-end"], env, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "LB_METRICS_PORT" in line]
    assert len(lines) == 1 and "cannot listen" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_api_serves_request_metrics_and_health_and_is_listed_by_status(
    topic: str, namespace: str, tmp_path: Path
) -> None:
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    env = job_env(topic, namespace, state, games)
    log = tmp_path / "api.log"
    api = start_job(["serve", "--port", "0", "--quiet"], env, log)
    try:
        entry = until("the API registered", lambda: server.registered(state, "api"), log, api)[0]
        base = f"http://{entry['address']}"
        assert http_get(base + "/livez")[0] == 200
        assert http_get(base + "/readyz")[0] == 200
        for player in ("p1", "p2", "p3"):  # three raw paths, one route template
            assert http_get(f"{base}/v1/leaderboards/gbest/players/{player}")[0] == 404
        assert http_get(base + "/no/such/page")[0] == 404
        samples = derive.parse_exposition(http_get(base + "/metrics")[1])
        route = "/v1/leaderboards/{gameId}/players/{playerId}"
        assert derive.total(samples, "lb_http_requests_total", route=route, status="404") == 3
        assert derive.total(samples, "lb_http_requests_total", route="/readyz", status="200") == 1
        assert derive.total(samples, "lb_http_requests_total", route="unmatched") == 1
        assert derive.total(samples, "lb_http_request_seconds_count", route=route) == 3
        routes = {dict(labels)["route"] for labels in samples["lb_http_requests_total"]}
        assert not any("p1" in r for r in routes)  # bounded labels: never a raw path
        status = json.loads(lb(["status", "--json", "--interval", "0"], env, timeout=60).stdout)
        assert status["api"] == [
            {
                "pid": api.pid,
                "metrics": f"{base}/metrics",
                "url": f"{base}/",
                "ready": True,
            }
        ]
    finally:
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=60)
    assert api.returncode == 0, log.read_text()[-2000:]
    assert server.registered(state, "api") == []
