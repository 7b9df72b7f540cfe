"""The pure side of the telemetry: lag, health, rates, histogram buckets, logs, settings."""

from __future__ import annotations

import io
import json
import logging
from bisect import bisect_left
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from domain.errors import ConfigError
from lb.live_view import Frame, frame
from telemetry import derive, prometheus, server
from telemetry.logs import JsonFormatter, step_of


@pytest.mark.parametrize(
    ("base", "process", "port"),
    [(9464, None, 9464), (9464, 0, 9464), (9464, 3, 9467), (0, 2, 0)],
)
def test_each_process_gets_its_own_port(base: int, process: int | None, port: int) -> None:
    assert derive.metrics_port(base, process) == port


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run.py", "flows.scoreboard:build()", "-s", "5"], (None, None)),
        (["run.py", "f:build()", "-r", "/r", "-s", "5", "-b", "0"], (None, "/r")),
        (["run.py", "f:build()", "-r", "/r", "-i", "1", "-a", "a;b"], (1, "/r")),
        (["run.py", "f", "--process-id=2", "--recovery-directory=/x"], (2, "/x")),
    ],
)
def test_the_process_id_and_recovery_dir_come_from_the_command_line(
    argv: list[str], expected: tuple[int | None, str | None]
) -> None:
    assert derive.process_args(argv) == expected


@pytest.mark.parametrize(
    ("end", "next_offset", "lag"),
    [(100, 100, 0), (100, 40, 60), (-1, 10, None), (10, 12, 0), (5, -1, None)],
)
def test_lag_in_records(end: int, next_offset: int, lag: int | None) -> None:
    assert derive.lag_records(end, next_offset) == lag


@pytest.mark.parametrize(
    ("lag", "last_ts", "now", "seconds"),
    [
        (0, 1_000, 61_000, 0.0),  # caught up: not late, however old the last record
        (5, 1_000, 3_500, 2.5),
        (5, None, 3_500, None),  # records wait and nothing applied yet: unknown
        (None, 1_000, 3_500, None),
        (5, 4_000, 3_500, 0.0),  # a record stamped ahead of this clock
    ],
)
def test_lag_in_seconds(
    lag: int | None, last_ts: int | None, now: int, seconds: float | None
) -> None:
    assert derive.lag_seconds(lag, last_ts, now) == seconds


def test_weighted_buckets_equal_one_observation_per_record() -> None:
    buckets = derive.WeightedBuckets()
    now = 1_000_000
    batches = [[now - 10, now - 30, now - 999], [now - 5_000, now + 20], [now - 400_000]]
    reference = [0] * (len(derive.FRESHNESS_BUCKETS_S) + 1)
    total = 0.0
    for batch in batches:
        buckets.add_timestamps(now, batch)
        for ts in batch:
            age_s = (now - ts) / 1000
            reference[bisect_left(derive.FRESHNESS_BUCKETS_S, age_s)] += 1
            total += age_s
    cumulative = buckets.cumulative()
    assert cumulative[-1] == ("+Inf", 6.0)
    running = 0
    for (bound, count), own in zip(cumulative, reference, strict=True):
        running += own
        assert count == running, bound
    assert buckets.total_s == pytest.approx(total)
    buckets.add_timestamps(now, [])
    assert buckets.cumulative() == cumulative


def test_readiness_and_liveness() -> None:
    health = derive.Health(started_at=0.0)
    assert derive.readiness(health, 1.0, 30, 15) == ["not connected yet"]
    health.connected = True
    assert derive.readiness(health, 1.0, 30, 15) == []
    health.failing_since["LB_REDIS_RETRY_S"] = 10.0
    assert derive.readiness(health, 39.0, 30, 15) == []  # a short outage does not flap
    assert derive.readiness(health, 41.0, 30, 15) == ["retrying for 31s (LB_REDIS_RETRY_S)"]
    assert derive.liveness(health, 500.0, 120) is None  # retrying is being alive
    health.failing_since.clear()
    # Kafka: errors keep coming (no 15 s gap) for longer than the threshold.
    health.kafka_errors_since, health.kafka_last_error = 100.0, 140.0
    assert derive.readiness(health, 145.0, 30, 15) == ["Kafka errors for 45s"]
    assert derive.readiness(health, 160.0, 30, 15) == []  # quiet for 20 s: it is back
    assert derive.liveness(health, 100.0, 120) is None
    assert derive.liveness(health, 121.0, 120) == "no batch, tick or retry for 121s"
    health.last_activity = 110.0
    assert derive.liveness(health, 200.0, 120) is None


EXPOSITION_BEFORE = """\
# TYPE lb_records_total counter
lb_records_total{game="g1",outcome="applied"} 100.0
lb_records_total{game="*",outcome="dead_letter"} 4.0
"""
EXPOSITION_AFTER = """\
# TYPE lb_records_total counter
lb_records_total{game="g1",outcome="applied"} 160.0
lb_records_total{game="g2",outcome="noop"} 20.0
lb_records_total{game="*",outcome="dead_letter"} 24.0
# TYPE lb_dead_letters_total counter
lb_dead_letters_total{code="LATE"} 24.0
# TYPE lb_consumer_lag_records gauge
lb_consumer_lag_records{partition="1",topic="t"} 7.0
lb_consumer_lag_records{partition="0",topic="t"} 0.0
# TYPE lb_consumer_lag_seconds gauge
lb_consumer_lag_seconds{partition="1",topic="t"} 1.5
# TYPE lb_ready gauge
lb_ready 1.0
# TYPE lb_live gauge
lb_live 1.0
"""


def test_a_job_view_from_two_scrapes() -> None:
    before = derive.parse_exposition(EXPOSITION_BEFORE)
    after = derive.parse_exposition(EXPOSITION_AFTER)
    view = derive.job_view(before, after, 2.0)
    assert view.lag == {"t/0": 0, "t/1": 7}
    assert view.lag_seconds == 1.5
    assert view.records == {"applied": 160, "noop": 20, "dead_letter": 24}
    assert view.dead_letters == {"LATE": 24}
    assert view.rates == {
        "applied_per_s": 30.0,
        "noop_per_s": 10.0,
        "duplicate_per_s": 0.0,
        "dead_letter_per_s": 10.0,
        "records_per_s": 50.0,
    }
    assert view.ready and view.live
    assert derive.conservation(view.records) == 204
    assert derive.total(after, "lb_records_total", outcome="applied") == 160
    assert derive.rates_between(before, after, 0) == {}


def test_a_frame_sums_the_processes_and_reads_plainly() -> None:
    one = derive.job_view({}, derive.parse_exposition(EXPOSITION_AFTER), 1.0)
    shown = frame("g1 alltime top 2", [{"rank": 1, "playerId": "p1", "score": 1200}], [one, one])
    assert shown.jobs == 2 and shown.lag == 14 and shown.dead_letters == {"LATE": 48}
    text = shown.plain()
    assert text.splitlines()[0] == "g1 alltime top 2"
    assert "p1" in text and "1,200" in text
    assert "job: 2 process(es)" in text and "LATE 48" in text
    assert "\x1b" not in text
    assert "no running job" in Frame("x", []).plain()


def test_json_log_lines_carry_level_step_partition_and_counters() -> None:
    record = logging.LogRecord(
        "sources.kafka_source", logging.WARNING, __file__, 1, "x %d", (3,), None
    )
    record.partition = 2
    record.counters = {"lag_records": 5}
    doc = json.loads(JsonFormatter().format(record))
    assert doc["level"] == "warning" and doc["msg"] == "x 3"
    assert doc["step"] == "score_events" and doc["partition"] == 2
    assert doc["counters"] == {"lag_records": 5}
    assert step_of("sinks.boards.partition") == "boards"
    assert step_of("something.else") == "something.else"


@pytest.mark.parametrize(
    ("raw", "port"), [(None, 0), ("", 0), ("off", None), ("OFF", None), ("9464", 9464)]
)
def test_metrics_port_setting(raw: str | None, port: int | None) -> None:
    env = {} if raw is None else {"LB_METRICS_PORT": raw}
    assert Settings.from_env(env).metrics_port == port


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LB_METRICS_PORT": "nine"}, "LB_METRICS_PORT must be an integer"),
        ({"LB_METRICS_PORT": "70000"}, "LB_METRICS_PORT must be a port"),
        ({"LB_LOG_FORMAT": "xml"}, "LB_LOG_FORMAT must be text or json"),
        ({"LB_READY_RETRY_S": "0"}, "LB_READY_RETRY_S must be at least 1"),
    ],
)
def test_telemetry_setting_mistakes_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_the_prometheus_config_discovers_registered_processes(tmp_path: Path) -> None:
    doc = json.loads(prometheus.config_text(tmp_path, tmp_path / "rules.yml"))
    assert doc["rule_files"] == [str(tmp_path / "rules.yml")]
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    assert jobs["lb-job"]["file_sd_configs"][0]["files"] == [str(tmp_path / "run" / "job-*.json")]
    assert jobs["lb-api"]["file_sd_configs"][0]["files"] == [str(tmp_path / "run" / "api-*.json")]
    assert all(job["honor_labels"] for job in jobs.values())


def _call(app: Any, path: str) -> tuple[str, Any]:
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"] = status

    body = b"".join(
        app(
            {
                "PATH_INFO": path,
                "REQUEST_METHOD": "GET",
                "QUERY_STRING": "",
                "wsgi.input": io.BytesIO(),
            },
            start_response,
        )
    )
    return got["status"], body.decode()


def test_health_routes_answer_200_or_503_with_reasons() -> None:
    app = server.wsgi_app(lambda: (None, ["retrying for 40s (LB_REDIS_RETRY_S)"]))
    assert _call(app, "/livez") == ("200 OK", '{"ok": true, "reasons": []}')
    status, body = _call(app, "/readyz")
    assert status == "503 Service Unavailable"
    assert json.loads(body) == {"ok": False, "reasons": ["retrying for 40s (LB_REDIS_RETRY_S)"]}
    status, body = _call(app, "/metrics")
    assert status.startswith("200") and "# TYPE" in body


def test_registrations_of_dead_processes_are_ignored_and_removed(tmp_path: Path) -> None:
    path = server.register(tmp_path, "job", "127.0.0.1", 9999, {"process": "0", "topic": "t"})
    entries = server.registered(tmp_path, "job")
    assert [e["address"] for e in entries] == ["127.0.0.1:9999"]
    assert entries[0]["metrics"] == "http://127.0.0.1:9999/metrics"
    dead = tmp_path / "run" / "job-999999999.json"
    dead.write_text(json.dumps([{"targets": ["x:1"], "labels": {"pid": "999999999"}}]))
    assert len(server.registered(tmp_path)) == 1
    assert not dead.exists()
    path.unlink()
