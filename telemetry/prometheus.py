"""``lb up --monitoring`` / ``lb monitoring up``: Debian's Prometheus on loopback, set up for us.

The generated ``prometheus.yml`` discovers targets through ``file_sd``: every
job and API process registers itself under ``<LB_STATE_DIR>/run/`` (see
:mod:`telemetry.server`), so processes that start later, on free ports, are
scraped within seconds without touching the config. The rules shipped in
``telemetry/rules/lb.rules.yml`` are copied next to it. Everything lives in
``<LB_STATE_DIR>/prometheus/`` (config, rules, TSDB, log, ``prometheus.json``
with the pid and port); ``lb monitoring down`` (or ``lb down``) stops it.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from domain.errors import ConfigError
from infra.process import (
    pid_alive,
    port_open,
    require_binary,
    spawn,
    started,
    stop_pid,
    wait_until,
)
from telemetry import server

#: Scrape and rule-evaluation interval: loopback targets, seconds matter in a demo.
SCRAPE_INTERVAL = "1s"


def rules_text() -> str:
    """The shipped recording and alerting rules."""
    return (resources.files("telemetry") / "rules" / "lb.rules.yml").read_text()


def config_text(state_dir: Path, rules_file: Path, scrape_interval: str = SCRAPE_INTERVAL) -> str:
    """``prometheus.yml``: the job and API processes found through ``<state>/run/*.json``.

    ``honor_labels`` keeps the job's own ``topic`` label when the target's
    labels name one too; the pid is dropped so a restart continues the series.
    """
    run = server.run_dir(state_dir)
    jobs: list[dict[str, Any]] = []
    for name, role in (("lb-job", "job"), ("lb-api", "api")):
        jobs.append(
            {
                "job_name": name,
                "honor_labels": True,
                "file_sd_configs": [
                    {"files": [str(run / f"{role}-*.json")], "refresh_interval": "5s"}
                ],
                "relabel_configs": [{"action": "labeldrop", "regex": "pid|role"}],
            }
        )
    doc = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(rules_file)],
        "scrape_configs": jobs,
    }
    # JSON is YAML: no YAML library needed to write it.
    return json.dumps(doc, indent=2) + "\n"


def home(state_dir: Path) -> Path:
    """Where the monitoring state lives."""
    return state_dir / "prometheus"


def _record(state_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((home(state_dir) / "prometheus.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def status(state_dir: Path) -> dict[str, Any]:
    """``{"prometheus": url, "prometheus_up": bool}``, or ``{}`` when none was started here."""
    record = _record(state_dir)
    if not record:
        return {}
    port = int(record["port"])
    up = pid_alive(record.get("pid")) and port_open("127.0.0.1", port)
    return {"prometheus": f"http://127.0.0.1:{port}", "prometheus_up": up}


def up(state_dir: Path, port: int) -> dict[str, Any]:
    """Start Prometheus (idempotent: a live one is reused) and wait until it answers."""
    found = status(state_dir)
    if found.get("prometheus_up"):
        return found
    binary = require_binary("prometheus", "prometheus")
    if port_open("127.0.0.1", port):
        raise ConfigError(
            f"LB_PROMETHEUS_PORT: 127.0.0.1:{port} is already in use; set LB_PROMETHEUS_PORT"
        )
    where = home(state_dir)
    (where / "data").mkdir(parents=True, exist_ok=True)
    server.run_dir(state_dir).mkdir(parents=True, exist_ok=True)
    rules = where / "lb.rules.yml"
    rules.write_text(rules_text())
    config = where / "prometheus.yml"
    config.write_text(config_text(state_dir, rules))
    log = where / "prometheus.log"
    pid = spawn(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={where / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=7d",
        ],
        log,
        cwd=where,
    )
    started(
        pid,
        lambda: wait_until(lambda: port_open("127.0.0.1", port), 30.0, "Prometheus", pid, log),
    )
    (where / "prometheus.json").write_text(json.dumps({"pid": pid, "port": port}))
    return status(state_dir)


def down(state_dir: Path) -> bool:
    """Stop the Prometheus started here; True when one was running."""
    record = _record(state_dir)
    if not record:
        return False
    running = pid_alive(record.get("pid"))
    stop_pid(record.get("pid"))
    (home(state_dir) / "prometheus.json").unlink(missing_ok=True)
    return running


def promtool() -> str:
    """The ``promtool`` that ships with Debian's ``prometheus`` package."""
    found = shutil.which("promtool")
    if found is None:
        raise ConfigError("promtool is missing: apt-get install prometheus (scripts/bootstrap.sh)")
    return found
