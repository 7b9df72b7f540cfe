"""Detached local server processes: start, probe, stop, and read their logs.

Servers are started in their own session so ``lb``'s exit does not take
them down, and stopped by pid with SIGTERM (graceful: Redis fsyncs its AOF,
Kafka closes its logs) before a bounded wait and SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from domain.errors import ServiceError


def port_open(host: str, port: int, timeout_s: float = 0.3) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def pid_alive(pid: int | None) -> bool:
    """True when ``pid`` names a live (non-zombie) process."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def spawn(argv: Sequence[str], log_path: Path, cwd: Path | None = None) -> int:
    """Start a server detached from this process; its output goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServiceError(f"cannot start {argv[0]}: {exc}") from exc
    return proc.pid


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    pid: int | None,
    log_path: Path,
) -> None:
    """Poll ``check`` until true; fail early with the log tail if the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if pid is not None and not pid_alive(pid):
            raise ServiceError(
                f"{what} exited during start-up; last log lines:\n{log_tail(log_path)}"
            )
        time.sleep(0.1)
    raise ServiceError(
        f"{what} did not become ready within {timeout_s:.0f}s; "
        f"last log lines:\n{log_tail(log_path)}"
    )


def stop_pid(pid: int | None, timeout_s: float = 30.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL; a dead pid is fine."""
    if not pid_alive(pid):
        return
    assert pid is not None
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while pid_alive(pid):
        time.sleep(0.05)


def started(pid: int, wait: Callable[[], None]) -> int:
    """``pid`` once ``wait`` returns; if it raises, the process is stopped first.

    ``lb down`` stops only the pids ``lb up`` recorded, and a pid is recorded
    only after its server is ready: a server that failed to become ready in
    time must not live on unrecorded, holding its port for the next start.
    """
    try:
        wait()
    except BaseException:
        stop_pid(pid)
        raise
    return pid


def require_binary(binary: str, apt_package: str) -> str:
    """Path of ``binary``; installs ``apt_package`` with apt-get when running as root."""
    found = shutil.which(binary)
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        quiet = ["env", "DEBIAN_FRONTEND=noninteractive", apt]
        for argv in ([*quiet, "update", "-qq"], [*quiet, "install", "-y", "-qq", apt_package]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ServiceError(
                    f"{binary} is missing and `{' '.join(argv)}` failed:\n{done.stderr[-2000:]}"
                )
        found = shutil.which(binary)
        if found:
            return found
    raise ServiceError(
        f"{binary} is not installed; install it with `sudo apt-get install {apt_package}`"
    )
