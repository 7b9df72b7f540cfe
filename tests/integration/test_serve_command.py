"""``lb serve`` as a user runs it: one line and exit 2 for a mistake, exit 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.integration.streams import REPO
from tests.poll import poll


def _healthy(port: int, proc: subprocess.Popen[str]) -> bool:
    """Whether the server answers ``/healthz`` with 200 (fails at once if it ended)."""
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "serve", "--quiet", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_an_invalid_port_is_one_line_and_exit_2(port: str) -> None:
    proc = serve("--port", port)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0 and "--port" in err and "Traceback" not in err
    assert err.startswith("lb serve: error:")


@pytest.mark.usefixtures("services")
def test_a_busy_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = serve("--port", str(port))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip() == f"lb serve: error: cannot listen on 127.0.0.1:{port}: the port is in use"


@pytest.mark.usefixtures("services")
def test_sigterm_stops_it_cleanly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = serve("--port", str(port))
    poll("the server answers /healthz", lambda: _healthy(port, proc), 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def _status_of_post(port: int, size: int) -> int:
    """The status of a ``POST /healthz`` with a body of ``size`` bytes."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/healthz", data=b"x" * size, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


@pytest.mark.usefixtures("services")
def test_workers_serve_one_port_from_several_processes_and_stop_together() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = serve("--port", str(port), "--workers", "2", "--max-body", "1000")
    try:
        poll("two workers come up", lambda: len(_children(proc.pid)) >= 2, 90)
        pids = _children(proc.pid)
        for _ in range(20):
            poll("a worker answers /healthz", lambda: _healthy(port, proc), 90)
            # Every worker got --max-body from the command line.
            assert _status_of_post(port, 1001) == 413
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    poll("every worker is gone", lambda: not any(_alive(pid) for pid in pids), 10)


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--workers", "0"),
        ("--workers", "65"),
        ("--workers", "two"),
        ("--page-cache-ms", "-1"),
        ("--page-cache-ms", "60001"),
        ("--page-cache-ms", "1s"),
    ],
)
def test_a_bad_worker_count_or_cache_bound_is_one_line_and_exit_2(option: str, value: str) -> None:
    proc = serve(option, value)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0 and option in err and "Traceback" not in err


def _children(pid: int) -> set[int]:
    """Worker processes: children of ``pid`` running the server (uvicorn spawns them)."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                    if b"spawn_main" in cmd.read():
                        found.add(int(entry))
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
