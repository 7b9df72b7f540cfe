"""Read the registered processes' endpoints: what ``lb status`` and ``lb top --watch`` show.

Each job process is scraped twice, ``interval_s`` apart, so its rates are
measured rather than guessed; the arithmetic is :func:`telemetry.derive.job_view`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from telemetry import derive, server

TIMEOUT_S = 2.0


def fetch(url: str, timeout_s: float = TIMEOUT_S) -> str | None:
    """The body at ``url`` (also for a 503), or ``None`` when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode())
    except (OSError, ValueError):
        return None


def samples(address: str) -> derive.Samples | None:
    """One scrape of ``http://<address>/metrics``, parsed."""
    text = fetch(f"http://{address}/metrics")
    return None if text is None else derive.parse_exposition(text)


def health(address: str, which: str) -> dict[str, Any]:
    """``/livez`` or ``/readyz`` as a document (``ok`` false when nothing answers)."""
    body = fetch(f"http://{address}/{which}")
    if body is None:
        return {"ok": False, "reasons": ["no answer"]}
    try:
        doc = json.loads(body)
    except ValueError:
        return {"ok": False, "reasons": ["not JSON"]}
    return doc if isinstance(doc, dict) else {"ok": False, "reasons": ["not an object"]}


def processes(state_dir: Path, interval_s: float = 1.0) -> dict[str, list[dict[str, Any]]]:
    """``{"jobs": [...], "api": [...]}``: every registered process with its state.

    A job entry has its pid, process index, metrics URL, readiness, lag per
    ``topic/partition`` and its total, counters, and rates over ``interval_s``.
    """
    found = server.registered(state_dir)
    jobs = [entry for entry in found if entry.get("role") == "job"]
    apis = [entry for entry in found if entry.get("role") == "api"]
    before = {entry["address"]: samples(entry["address"]) for entry in jobs}
    started = time.monotonic()
    if jobs and interval_s > 0:
        time.sleep(interval_s)
    seconds = time.monotonic() - started
    out_jobs = []
    for entry in jobs:
        after = samples(entry["address"])
        doc = {k: entry[k] for k in ("pid", "process", "topic", "namespace", "kind", "metrics")}
        if after is None:
            doc.update(up=False)
        else:
            view = derive.job_view(before.get(entry["address"]) or {}, after, seconds)
            doc.update(up=True, **asdict(view))
            doc["lag_total"] = sum(view.lag.values())
            doc["keeping_up"] = view.ready and (
                doc["lag_total"] == 0 or view.rates.get("records_per_s", 0.0) > 0
            )
        out_jobs.append(doc)
    out_apis = []
    for entry in apis:
        doc = {k: entry[k] for k in ("pid", "metrics") if k in entry}
        doc["url"] = f"http://{entry['address']}/"
        answer = health(entry["address"], "readyz")
        doc["ready"] = answer.get("ok") is True or answer.get("status") == "ok"
        out_apis.append(doc)
    return {"jobs": out_jobs, "api": out_apis}
