"""One ``lb run`` per topic and state directory on this machine.

Two job processes on one recovery store would snapshot over each other's
state, so ``lb run`` holds an exclusive ``flock`` on
``<LB_STATE_DIR>/recovery/<flow>/<topic>.lock`` for as long as it runs (the
kernel drops it when the process ends, even on ``kill -9``: no stale lock to
clean up). A second ``lb run`` on the same topic and state directory is
refused with one line naming the running one: its pid, since when, and its
metrics URL when it serves one.

This is a local mistake, and only that: a second *deployment* of the same
projection on other hosts has its own state directory and is a different
matter (docs/OPERATIONS.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from config.settings import Settings
from domain.errors import ConfigError
from telemetry import server


def lock_path(settings: Settings, flow: str) -> Path:
    """The lock file beside the recovery store of (flow, topic)."""
    store = settings.recovery_dir(flow)
    return store.with_name(f"{store.name}.lock")


def hold(settings: Settings, flow: str) -> IO[str]:
    """Take the lock of (flow, topic), or raise the one line naming the holder.

    The returned file must stay open for as long as the job runs.
    """
    path = lock_path(settings, flow)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read()
        handle.close()
        raise ConfigError(_refusal(settings, flow, holder)) from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "since": time.time(), "topic": settings.topic}))
    handle.flush()
    return handle


def _refusal(settings: Settings, flow: str, holder: str) -> str:
    try:
        doc = json.loads(holder)
        pid, since = int(doc["pid"]), float(doc["since"])
    except (ValueError, KeyError, TypeError):
        pid, since = 0, 0.0
    started = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    who = f"pid {pid}, running since {started}" if pid else "pid unknown"
    urls = [
        str(entry["metrics"])
        for entry in server.registered(settings.state_dir, "job")
        if entry.get("topic") == settings.topic
        and entry.get("flow") == flow
        and entry.get("kind") == "live"
    ]
    metrics = f", metrics {', '.join(urls)}" if urls else ""
    return (
        f"another lb run is already running on topic {settings.topic!r} with this state "
        f"directory ({who}{metrics}; recovery store {settings.recovery_dir(flow)}): stop it "
        "first, or give this one its own LB_TOPIC or LB_STATE_DIR"
    )
