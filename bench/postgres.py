"""A throwaway PostgreSQL server for benchmarks, on loopback only.

The design articles compare sorted sets with "a database and an index"; the
read benchmark starts the real thing to compare against instead of quoting
them: Debian's PostgreSQL (installed with ``apt-get`` when its binaries are
missing), a fresh cluster in a temporary directory, listening on
127.0.0.1:25432 and a Unix socket inside that directory only, stopped
(``pg_ctl stop -m fast``) and deleted on exit. PostgreSQL refuses to run as
root, so as root every server command runs as the ``postgres`` user that the
package creates, and the directory is handed to that user.

Settings are chosen for a *read* benchmark on a machine with memory to spare:

* ``shared_buffers`` 2 GB, so a 10M-row table and its indexes stay in
  PostgreSQL's own cache, as Redis keeps everything in memory;
* ``fsync`` and ``full_page_writes`` off: they only make the bulk load
  faster (nothing here needs to survive a crash) and do not change how reads
  perform. A production server would keep them on. ``synchronous_commit``
  stays on on purpose: with asynchronous commit, a ``VACUUM`` run right after
  the load may not set the hint bits (the commit record is not flushed yet),
  so it leaves the visibility map empty and every "index-only" scan would
  still read the table;
* ``autovacuum`` off: the benchmark runs ``VACUUM ANALYZE`` itself right after
  loading, and a background vacuum waking up mid-measurement would only add
  noise;
* ``jit`` off: JIT compilation costs milliseconds per query and pays off only
  for long analytical queries; an OLTP server would disable it too.

Parallel query keeps its defaults (2 workers per gather), so a large ``count``
may use both cores as it would on a real server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from bench.common import log
from config.settings import child_environment

#: The benchmark server's port: away from 5432 so a system PostgreSQL can keep it.
PORT = 25432
#: The superuser ``initdb`` creates; trust authentication (loopback, throwaway data).
USER = "bench"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "shared_buffers": "2GB",
    "effective_cache_size": "8GB",
    "work_mem": "64MB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "8GB",
    "fsync": "off",
    "full_page_writes": "off",
    "autovacuum": "off",
    "jit": "off",
}


class PostgresError(RuntimeError):
    """The benchmark server could not be installed or started."""


def bin_dir() -> Path | None:
    """The newest installed server's binaries (``/usr/lib/postgresql/<ver>/bin``), if any."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0,
    )
    return found[-1].parent if found else None


def install() -> Path:
    """The server binaries, installing Debian's ``postgresql`` first when they are missing."""
    found = bin_dir()
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise PostgresError(
            "PostgreSQL is not installed; run as root or `apt-get install postgresql`"
        )
    log("installing PostgreSQL with apt-get")
    env = child_environment({"DEBIAN_FRONTEND": "noninteractive"})
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PostgresError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    found = bin_dir()
    if found is None:
        raise PostgresError("apt-get installed postgresql but no server binary was found")
    return found


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as ``postgres`` when we are root (the server refuses root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str], what: str, log_file: Path | None = None) -> None:
    """Run a server command as the server user; its output in the error when it fails."""
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stdout + done.stderr).strip()
        if log_file is not None and log_file.exists():
            detail += "\n" + "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
        raise PostgresError(f"{what} failed (exit {done.returncode}):\n{detail}")


def _check_port_free(port: int) -> None:
    """Refuse early, with a clear reason, when something already listens on ``port``.

    Otherwise the server would exit at start with a bind error buried in its log;
    the usual cause is another run of a benchmark using the same port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise PostgresError(
                f"127.0.0.1:{port} is already in use ({exc.strerror}): another benchmark's "
                f"server? Pick another port or wait for it to finish"
            ) from exc


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into an exception while the server runs, so it is stopped and deleted.

    ``pg_ctl start`` daemonizes the server: if this process died from a plain
    SIGTERM (a ``timeout`` wrapper, a parent benchmark runner stopping us), the
    server and its 2 GB of shared memory would outlive it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def postgres_server(port: int = PORT) -> Iterator[str]:
    """A fresh server on 127.0.0.1:``port``; yields a libpq connection string.

    The server is stopped and its directory deleted on exit, also after an
    error, Ctrl-C or SIGTERM.
    """
    binaries = install()
    _check_port_free(port)
    home = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data = home / "data"
    server_log = home / "server.log"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    options = " ".join(f"-c {name}={value}" for name, value in SETTINGS.items())
    options += f" -p {port} -c unix_socket_directories={home}"
    started = False
    try:
        with _sigterm_unwinds():
            initdb = [str(binaries / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"]
            _run([*initdb, "-E", "UTF8", "--locale=C"], "initdb")
            pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data)]
            started = True  # from here on a half-started server must be stopped too
            _run(
                [*pg_ctl, "-o", options, "-l", str(server_log), "-w", "start"],
                "pg_ctl start",
                server_log,
            )
            log(f"PostgreSQL {binaries.parts[-2]} ready on 127.0.0.1:{port} ({home})")
            yield f"host=127.0.0.1 port={port} user={USER} dbname=postgres"
    finally:
        if started:
            subprocess.run(
                _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                capture_output=True,
                check=False,
            )
        shutil.rmtree(home, ignore_errors=True)
