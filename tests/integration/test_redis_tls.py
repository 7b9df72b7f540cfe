"""``rediss://`` with ``LB_REDIS_TLS_CA``: the job's Redis client speaks TLS to a
TLS-only redis-server started here with a throwaway CA (loopback only)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import redis

from adapters.redis import RedisClient
from config.clients import redis_client
from config.settings import Settings
from tests.poll import poll


def _pings(client: RedisClient) -> bool:
    """Whether the server answers PING yet (not listening, or mid-handshake: not yet)."""
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_redis_client_uses_tls_with_the_configured_ca(tmp_path: Path) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=tmp_path)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=tmp_path)  # fmt: skip
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", "server.crt",
             cwd=tmp_path)  # fmt: skip
    port = _free_port()
    server = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
            "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no",
            "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        settings = Settings.from_env(
            {
                "LB_REDIS_URL": f"rediss://127.0.0.1:{port}/0",
                "LB_REDIS_TLS_CA": str(tmp_path / "ca.crt"),
                "LB_STATE_DIR": str(tmp_path / "state"),
            }
        )
        client = redis_client(settings)
        poll("the TLS server answers PING", lambda: _pings(client), 20)
        client.zadd("lb:{g}:alltime", {"p1": 5.0})
        assert client.zrevrange("lb:{g}:alltime", 0, -1, withscores=True) == [(b"p1", 5.0)]
        # Without the CA the server's certificate is refused.
        plain = Settings.from_env(
            {"LB_REDIS_URL": f"rediss://127.0.0.1:{port}/0", "LB_STATE_DIR": str(tmp_path / "s2")}
        )
        with pytest.raises(Exception, match=r"(?i)certificate|ssl"):
            redis_client(plain).ping()
    finally:
        server.terminate()
        server.wait(timeout=30)
