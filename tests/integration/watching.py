"""Helpers of the operability tests: a tailing job, waiting for a condition, HTTP GETs.

A wait here is for a condition that must become true, with a generous bound
so a slow, shared machine only makes it slower; nothing asserts on timing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import redis

from tests.integration.streams import REPO
from tests.poll import poll

#: How long a condition may take to become true before the test fails (a long job).
PATIENCE_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis(NamedTuple):
    """A redis-server process of one test's own."""

    pid: int
    port: int


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server of the test's own on a free port, answering.

    For a test that stalls or pauses Redis, which nothing else may share.
    Stopped (and resumed first, if the test left it stopped) on the way out.
    """
    binary = shutil.which("redis-server")
    assert binary, "redis-server is installed by scripts/bootstrap.sh"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the private Redis answering", lambda: _pings(port), 30)
        yield PrivateRedis(proc.pid, port)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=30)


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:  # not listening yet, or still loading
        return False


def http_get(url: str) -> tuple[int, str]:
    """(status, body), also for a 4xx/5xx answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start_job(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """``lb <args>`` in the background, its output in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lb.cli", *args],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def until(
    what: str,
    check: Callable[[], Any],
    log: Path,
    proc: subprocess.Popen[str] | None = None,
    every_s: float = 0.3,
) -> Any:
    """``check()``'s first truthy answer; fails naming ``what`` (and the job's log tail)."""

    def checked() -> Any:
        try:
            found = check()
        except OSError:  # e.g. its HTTP port refusing: say why when the job ended
            if proc is not None and proc.poll() is not None:
                raise AssertionError(
                    f"{what}: the job ended (exit {proc.returncode}): {log.read_text()[-3000:]}"
                ) from None
            raise
        if not found and proc is not None:
            assert proc.poll() is None, f"the job ended: {log.read_text()[-3000:]}"
        return found

    return poll(what, checked, PATIENCE_S, every_s, context=lambda: log.read_text()[-3000:])
