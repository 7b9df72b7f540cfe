"""``lb serve`` as a user runs it: one line and exit 2 for a mistake, exit 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.integration.streams import REPO

pytestmark = pytest.mark.integration


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
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                assert answer.status == 200
                break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.usefixtures("services")
def test_workers_serve_one_port_from_several_processes_and_stop_together() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = serve("--port", str(port), "--workers", "2")
    try:
        deadline = time.monotonic() + 90
        pids: set[int] = set()
        while len(pids) < 2:
            assert time.monotonic() < deadline, "the workers did not come up"
            pids = _children(proc.pid)
            time.sleep(0.2)
        answered = 0
        while answered < 20:
            assert time.monotonic() < deadline, "the workers did not answer"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    answered += r.status == 200
            except OSError:
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    gone = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


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
