"""The whole pipeline on ``lb up --secure``: Kafka on SASL_SSL (SCRAM-SHA-512), Redis on TLS
with an ACL user, every command configured by the settings file it writes and nothing else.

The module starts its own secured pair (``--secure-only``, on free ports, in a
state directory of its own) and stops it at the end. Every stdout and stderr of
the run is kept, and the last test greps them and every file the services and
commands wrote for either password.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config.clients import redis_client
from config.settings import Settings
from domain.events import EventKind
from domain.signing import parse_keyring, sign
from tests.integration.streams import KEYS, REPO, lb
from tests.poll import poll

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "openssl"], capture_output=True).returncode != 0,
    reason="openssl CLI not installed",
)

#: Everything any command of this module printed, for the secret grep.
OUTPUTS: list[str] = []
TOPIC = "secure-scores"
NAMESPACE = "lbsecure"


def _free_port(pair: bool = False) -> int:
    """A free loopback port below the ephemeral range (and the next one, with ``pair``)."""
    for port in range(21000 + (time.monotonic_ns() // 1000) % 2000, 24000, 7):
        wanted = [port, port + 1] if pair else [port]
        try:
            for p in wanted:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port")


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> Any:
    done = lb(args, env, timeout=timeout)
    OUTPUTS.extend([done.stdout, done.stderr])
    return done


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a client of the secured pair: the written settings file only."""
    state = tmp_path_factory.mktemp("secure-state")
    base = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    base.update(LB_STATE_DIR=str(state), LB_CACHE_DIR=str(Settings.from_env().cache_dir))
    kafka_port, redis_port = _free_port(pair=True), _free_port()
    up = _run(
        ["up", "--secure-only", "--secure-kafka-port", str(kafka_port),
         "--secure-redis-port", str(redis_port), "--json"],
        base,
        timeout=300,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        doc = json.loads(up.stdout)
        assert doc["secure_up"] is True
        env_file = Path(doc["secure"]["env_file"])
        assert env_file.stat().st_mode & 0o077 == 0
        env = dict(base)
        for line in env_file.read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
        env.update(
            LB_TOPIC=TOPIC,
            LB_NAMESPACE=NAMESPACE,
            LB_HMAC_KEYS=KEYS,
            LB_PROGRESS_S="0",
            LB_METRICS_PORT="off",
        )
        yield env
    finally:
        down = _run(["down", "--secure", "--json"], base, timeout=120)
        assert down.returncode == 0, down.stderr
        assert json.loads(down.stdout)["stopped"] == ["secure-kafka", "secure-redis"]


def _secrets(env: dict[str, str]) -> list[str]:
    url = env["LB_REDIS_URL"]
    redis_password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    return [env["LB_KAFKA_X_SASL_PASSWORD"], redis_password]


def _post_score(port: int, player: str, score: int) -> int:
    now_ms = int(time.time() * 1000)
    doc: dict[str, Any] = {
        "gameId": "g1",
        "playerId": player,
        "score": score,
        "timestamp": now_ms,
        "kind": "SCORE",
        "keyId": "k1",
    }
    sig = sign(parse_keyring(KEYS), "k1", "", "g1", player, score, now_ms, EventKind.SCORE)
    doc["sig"] = sig.hex()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/scores",
        data=json.dumps(doc).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(answer.status)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _intake(env: dict[str, str], player: str, score: int) -> None:
    """POST one score through ``lb serve`` (it produces to the secured Kafka)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll("lb serve answers /healthz", lambda: proc.poll() is None and _healthy(port), 90)
        assert _post_score(port, player, score) == 202
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        OUTPUTS.extend([out, err])
    assert proc.returncode == 0, err[-3000:]


def test_every_command_works_from_the_settings_file_alone(secured: dict[str, str]) -> None:
    produced = _run(
        ["produce", "--count", "400", "--bad-ratio", "0.05", "--partitions", "2"], secured
    )
    assert produced.returncode == 0, produced.stderr[-3000:]
    expected = json.loads(produced.stdout)["expected"]
    _intake(secured, "posted-player", 777)

    job = _run(["run", "--until-end"], secured)
    assert job.returncode == 0, job.stderr[-3000:]
    client = redis_client(Settings.from_env(secured))
    try:
        assert client.zscore(f"{NAMESPACE}:{{g1}}:alltime", "posted-player") is not None
    finally:
        client.close()

    for args in (["verify", "--json"], ["rebuild", "--quiet"], ["backfill", "--quiet"]):
        done = _run(args, secured)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])

    shown = _run(["dlq", "show", "--json"], secured)
    assert shown.returncode == 0, shown.stderr[-3000:]
    counts = json.loads(shown.stdout)["byCode"]
    assert counts == {code: n for code, n in expected.items() if code not in ("ok", "duplicate")}


@pytest.mark.parametrize("command", [["run", "--until-end"], ["produce", "--count", "5"]])
def test_a_wrong_password_or_an_untrusted_ca_is_one_line_and_exit_2(
    secured: dict[str, str], command: list[str], tmp_path: Path
) -> None:
    other_ca = tmp_path / "other-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=someone else", "-keyout", str(tmp_path / "other.key"),
         "-out", str(other_ca)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    mistakes = {
        "LB_KAFKA_X_SASL_PASSWORD": ("not-" + secured["LB_KAFKA_X_SASL_PASSWORD"], "credentials"),
        "LB_KAFKA_X_SSL_CA_LOCATION": (str(other_ca), "certificate"),
    }
    for name, (value, said) in mistakes.items():
        done = _run(command, {**secured, name: value}, timeout=120)
        lines = [line for line in done.stderr.splitlines() if " error: " in line]
        assert done.returncode == 2, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert len(lines) == 1 and said in lines[0] and name in lines[0], done.stderr


def test_no_secret_is_printed_or_logged(secured: dict[str, str]) -> None:
    state = Path(secured["LB_STATE_DIR"])
    holders = {"credentials.json", "lb.env", "server.properties"}  # where the secrets live
    logs = [p for p in state.rglob("*") if p.is_file() and p.name not in holders]
    assert any(p.name == "server.log" for p in logs) and any(p.name == "redis.log" for p in logs)
    assert len(OUTPUTS) > 10
    for secret in _secrets(secured):
        assert all(secret not in text for text in OUTPUTS)
        found = [str(p) for p in logs if secret.encode() in p.read_bytes()]
        assert found == []
