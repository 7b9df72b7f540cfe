"""``lb serve`` as deployed: limits shared by two workers, tokens kept out of the log, TLS.

Each test starts ``lb serve`` in a process of its own on a free loopback port,
with its own namespace (the rate-limit counts live under it in Redis).
"""

from __future__ import annotations

import datetime as dt
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from api.auth.keyfile import key_line, new_key
from tests.integration.streams import KEYS, REPO
from tests.integration.test_callers import call, wait_for_a_fresh_window
from tests.jwt_keys import AUDIENCE, ISSUER, SECRET, hs256
from tests.poll import poll


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(
    env: dict[str, str], log: Path, *args: str, tls: ssl.SSLContext | None = None
) -> Iterator[str]:
    """``lb serve`` with ``env`` added, its stderr in ``log``; yields its base URL."""
    port = free_port()
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lb.cli", "serve", "--port", str(port), *args],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{url}/livez", timeout=2, context=tls):
                    return True
            except OSError:
                return False

        try:
            poll("lb serve answers", up, 90)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def api_env(topic: str, namespace: str, **over: str) -> dict[str, str]:
    return {
        "LB_TOPIC": topic,
        "LB_NAMESPACE": namespace,
        "LB_HMAC_KEYS": KEYS,
        "LB_JWT_SECRET": SECRET,
        "LB_JWT_AUDIENCE": AUDIENCE,
        "LB_JWT_ISSUER": ISSUER,
        **over,
    }


def server_pids(port: int) -> dict[int, int]:
    """``{client port: pid of the worker holding the connection}`` for ``port`` (from ss)."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pids = {}
    for line in out.splitlines():
        peer = re.search(r"127\.0\.0\.1:\d+\s+127\.0\.0\.1:(\d+)", line)
        pid = re.search(r"pid=(\d+)", line)
        if peer and pid:
            pids[int(peer.group(1))] = int(pid.group(1))
    return pids


def one_connection_per_worker(url: str, workers: int = 2) -> list[http.client.HTTPConnection]:
    """Keep-alive connections, one held by each worker process (found with ss)."""
    port = int(url.rsplit(":", 1)[1])
    held: dict[int, http.client.HTTPConnection] = {}
    spare = []
    for _ in range(64):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/livez")  # an open route: accepted, not counted
        conn.getresponse().read()
        pid = server_pids(port).get(conn.sock.getsockname()[1])
        if pid is not None and pid not in held:
            held[pid] = conn
        else:
            spare.append(conn)
        if len(held) == workers:
            break
    for conn in spare:
        conn.close()
    assert len(held) == workers, "the kernel gave every connection to one worker"
    return list(held.values())


@pytest.mark.usefixtures("services")
def test_two_workers_share_one_count_and_no_token_reaches_the_log(
    topic: str, namespace: str, tmp_path: Path
) -> None:
    env = api_env(topic, namespace, LB_RATE_READS="12/minute")
    log = tmp_path / "serve.log"
    token = hs256("ada")
    forged = hs256("ada", secret="another-secret-of-the-same-length-00000")
    wait_for_a_fresh_window(60, 40)
    with serving(env, log, "--workers", "2") as url:
        first, second = one_connection_per_worker(url)
        statuses = []
        for i in range(30):  # alternately on each worker
            conn = (first, second)[i % 2]
            conn.request("GET", "/v1/leaderboards/g1/top")
            answer = conn.getresponse()
            answer.read()
            statuses.append(answer.status)
        assert statuses == [200] * 12 + [429] * 18
        first.close()
        second.close()

        assert call(f"{url}/?game=g1&token={token}")[0] == 200
        ws = url.replace("http://", "ws://") + "/v1/leaderboards/g1/live"
        with connect(f"{ws}?top=1&token={token}", open_timeout=10) as live:
            assert json.loads(live.recv(timeout=10))["type"] == "top"
        with pytest.raises(InvalidStatus):
            connect(f"{ws}?top=1&token={forged}", open_timeout=10)
        assert call(f"{url}/v1/leaderboards/g1/events?top=1&token={forged}")[0] == 401
    text = log.read_text()
    assert '"WebSocket /v1/leaderboards/g1/live?top=1" [accepted]' in text
    assert "GET /?game=g1 HTTP/1.1" in text
    assert token not in text and forged not in text
    assert token.split(".")[2] not in text and "token=" not in text


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made now (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


@pytest.mark.usefixtures("services")
def test_tls_end_to_end_with_hsts_and_a_server_key(
    topic: str, namespace: str, tmp_path: Path
) -> None:
    certfile, keyfile = self_signed(tmp_path)
    key = new_key()
    keys = tmp_path / "keys"
    keys.write_text(key_line("backend", key) + "\n")
    env = api_env(topic, namespace, LB_API_KEYS=str(keys), LB_API_READS="authenticated")
    trust = ssl.create_default_context(cafile=str(certfile))
    log = tmp_path / "serve.log"
    args = ("--certfile", str(certfile), "--keyfile", str(keyfile))
    with serving(env, log, *args, tls=trust) as url:
        request = urllib.request.Request(
            f"{url}/v1/leaderboards/g1/top", headers={"Authorization": f"Bearer {key}"}
        )
        with urllib.request.urlopen(request, timeout=10, context=trust) as answer:
            assert answer.status == 200
            assert answer.headers["strict-transport-security"] == "max-age=31536000"
        wss = url.replace("https://", "wss://") + f"/v1/leaderboards/g1/live?top=1&token={key}"
        with connect(wss, ssl=trust, open_timeout=10) as live:
            assert json.loads(live.recv(timeout=10))["type"] == "top"
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # not a trusted cert
            urllib.request.urlopen(f"{url}/livez", timeout=10, context=ssl.create_default_context())
        plain = url.replace("https://", "http://")
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{plain}/livez", timeout=10)
    assert f"lb serve: {url} (live page at {url}/" in log.read_text()


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--keyfile", "key.pem"), "--keyfile needs --certfile"),
        (("--certfile", "missing.pem"), "--certfile missing.pem is not a file"),
        (("--certfile", "key.pem"), "do not hold a certificate and its private key"),
    ],
)
def test_a_tls_mistake_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    self_signed(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "lb.cli", "serve", "--port", str(free_port()), *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr


def test_new_api_key_appends_its_hash_and_refuses_a_name_twice(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys"

    def new(name: str) -> subprocess.CompletedProcess[str]:
        serve = [sys.executable, "-m", "lb.cli", "serve"]
        return subprocess.run(
            [*serve, "--new-api-key", name, "--key-file", str(keys)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = new("backend-eu")
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert key.startswith("lbk_") and key not in keys.read_text()
    assert keys.read_text() == key_line("backend-eu", key) + "\n"
    again = new("backend-eu")
    assert again.returncode == 2 and "already has a key named 'backend-eu'" in again.stderr
    assert again.stderr.strip().count("\n") == 0
    assert new("bad name").returncode == 2
