"""A real Prometheus (Debian's) scraping a running job; the rules checked by promtool.

``lb monitoring up`` starts Prometheus on loopback with the generated config
in the test's own state directory, the job registers itself there, and the
test reads lag and rates back through Prometheus' HTTP query API. The shipped
rules pass ``promtool check rules`` and ``promtool test rules`` (each alert
fires on the series that should fire it), and the systemd unit of
docs/OPERATIONS.md passes ``systemd-analyze verify``.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from telemetry import prometheus, server
from tests.integration.streams import GAMES_TOML, REPO, generate, job_env, lb, produce
from tests.integration.watching import free_port, start_job, until

RULES = REPO / "telemetry" / "rules" / "lb.rules.yml"


def test_the_shipped_rules_pass_promtool_check_and_their_unit_tests(tmp_path: Path) -> None:
    tool = prometheus.promtool()
    checked = subprocess.run(
        [tool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout
    # The file Prometheus is given is the one shipped.
    assert prometheus.rules_text() == RULES.read_text()
    cases = (REPO / "tests" / "integration" / "fixtures" / "rules_test.yml").read_text()
    test_file = tmp_path / "rules_test.yml"
    test_file.write_text(cases.replace("RULES", str(RULES)))
    tested = subprocess.run(
        [tool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _unit_from_operations_doc() -> str:
    text = (REPO / "docs" / "OPERATIONS.md").read_text()
    found = re.search(r"```ini\n(\[Unit\].*?)```", text, re.S)
    assert found, "docs/OPERATIONS.md has no systemd unit"
    return found.group(1)


def test_the_systemd_unit_of_the_operations_doc_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    unit = _unit_from_operations_doc()
    # The unit names /opt/leaderboard; verify it against this checkout, which has the binary.
    path = tmp_path / "lb-run.service"
    path.write_text(unit.replace("/opt/leaderboard", str(REPO)))
    done = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lb-run.service" not in done.stderr, done.stderr  # no warning about our unit
    # And verify does catch a broken unit (so the check above means something).
    broken = tmp_path / "broken.service"
    broken.write_text(unit.replace("ExecStart=/opt/leaderboard", "ExecStart=opt/leaderboard"))
    bad = subprocess.run(
        [analyze, "verify", str(broken)], capture_output=True, text=True, check=False, timeout=120
    )
    assert bad.returncode != 0


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        doc = json.loads(answer.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _value(base: str, expr: str) -> float | None:
    found = _query(base, expr)
    return float(found[0]["value"][1]) if found else None


def test_prometheus_scrapes_the_job_and_answers_lag_and_rates(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (scripts/bootstrap.sh installs it)")
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    env = job_env(topic, namespace, state, games)
    env["LB_PROMETHEUS_PORT"] = str(free_port())
    stream = generate(seed=21, count=3000)
    log = tmp_path / "job.log"
    up = lb(["monitoring", "up", "--json"], env, timeout=60)
    assert up.returncode == 0, up.stderr
    base = json.loads(up.stdout)["prometheus"]
    assert base == f"http://127.0.0.1:{env['LB_PROMETHEUS_PORT']}"
    proc = start_job(["run", "--processes", "2"], env, log)
    try:
        until(
            "two registered processes", lambda: len(server.registered(state, "job")) == 2, log, proc
        )
        # Prometheus found both through file_sd and scrapes them.
        until(
            "both targets up",
            lambda: _value(base, 'sum(up{job="lb-job"})') == 2.0,
            log,
            proc,
        )
        # The stream arrives in pieces, so a rate is measured while records flow.
        rates: list[float] = []
        for piece in range(0, len(stream.records), 300):
            produce(kafka_bootstrap, topic, stream.records[piece : piece + 300])
            time.sleep(0.5)
            rate = _value(base, "sum(rate(lb_records_total[10s]))")
            if rate:
                rates.append(rate)
        until(
            "every record counted through Prometheus",
            lambda: _value(base, "sum(lb_records_total)") == len(stream.records),
            log,
            proc,
        )
        until(
            "lag 0 through Prometheus (the recording rule too)",
            lambda: (
                _value(base, "sum(lb_consumer_lag_records)") == 0.0
                and _value(base, f'lb:consumer_lag_records:sum{{topic="{topic}"}}') == 0.0
            ),
            log,
            proc,
        )
        partitions = _query(base, f'lb_consumer_lag_records{{topic="{topic}"}}')
        assert sorted(s["metric"]["partition"] for s in partitions) == ["0", "1", "2", "3"]
        assert {s["metric"]["process"] for s in partitions} == {"0", "1"}
        assert rates and max(rates) > 0
        recorded = until(
            "the recording rule of rates",
            lambda: _query(base, f'lb:records:rate1m{{topic="{topic}"}}'),
            log,
            proc,
        )
        assert {s["metric"]["outcome"] for s in recorded} >= {"applied", "dead_letter"}
        letters = _value(base, "sum(lb_dead_letters_total)")
        bad = sum(1 for r in stream.records if r.expected not in ("ok", "duplicate"))
        assert letters == bad
        # The rules are loaded: Prometheus knows every alert.
        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10) as answer:
            groups = json.loads(answer.read())["data"]["groups"]
        names = {rule["name"] for group in groups for rule in group["rules"]}
        assert {"LbConsumerLagGrowing", "LbDeadLettersAbove1Percent", "LbNoProgress"} <= names
        # lb status names the Prometheus next to the services and the processes.
        status = json.loads(lb(["status", "--json", "--interval", "0"], env, timeout=60).stdout)
        assert status["prometheus"] == base and status["prometheus_up"] is True
        assert len(status["jobs"]) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        down = lb(["monitoring", "down", "--json"], env, timeout=60)
    assert down.returncode == 0 and json.loads(down.stdout) == {"stopped": ["prometheus"]}
    assert proc.returncode == 0, log.read_text()[-3000:]
