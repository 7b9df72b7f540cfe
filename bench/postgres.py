"""A throwaway PostgreSQL server for the read benchmark, on loopback only.

The design articles compare sorted sets with "a database and an index"; this
starts the real thing to compare against: Debian's PostgreSQL (installed with
``apt-get`` when missing), a fresh cluster in a temporary directory, listening
on 127.0.0.1 only, stopped and deleted on exit. It refuses to run as root, so
as root every server command runs as the ``postgres`` user the package creates.

Settings are tuned for a read benchmark on a machine with memory to spare
(2 GB of shared buffers so the table and its index stay cached, as Redis
keeps everything in memory) and durability switched off for the bulk load
(``fsync``, ``synchronous_commit``, ``full_page_writes``): that makes loading
faster and does not change how reads perform.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.common import log

PORT = 25432
USER = "bench"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "shared_buffers": "2GB",
    "effective_cache_size": "8GB",
    "work_mem": "64MB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "8GB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "jit": "off",
}


def _bin_dir() -> Path | None:
    root = Path("/usr/lib/postgresql")
    versions = sorted(root.glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


def _install() -> Path:
    found = _bin_dir()
    if found is not None:
        return found
    log("installing PostgreSQL with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "postgresql"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    found = _bin_dir()
    if found is None:
        raise SystemExit("apt-get installed postgresql but no server binary was found")
    return found


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def postgres_server(port: int = PORT) -> Iterator[str]:
    """Start a fresh server; yields a libpq connection string; stops and deletes it."""
    bin_dir = _install()
    home = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data = home / "data"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    options = " ".join(f"-c {k}={v}" for k, v in SETTINGS.items())
    options += f" -p {port} -c unix_socket_directories={home}"
    started = False
    try:
        subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    USER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(home / "server.log"),
                    "-w",
                    "start",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        started = True
        log(f"PostgreSQL ({bin_dir.parts[-2]}) listening on 127.0.0.1:{port}")
        yield f"host=127.0.0.1 port={port} user={USER} dbname=postgres"
    finally:
        if started:
            subprocess.run(
                _as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                check=False,
                stdout=subprocess.DEVNULL,
            )
        shutil.rmtree(home, ignore_errors=True)
