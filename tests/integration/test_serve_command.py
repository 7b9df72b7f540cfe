"""``lb serve`` as a user runs it: one line and exit 2 for a mistake, exit 0 on SIGTERM."""

from __future__ import annotations

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
