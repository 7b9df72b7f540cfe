"""The secured pair of ``lb up --secure``: Kafka on SASL_SSL and Redis on TLS with an ACL user.

Beside the plain services, on ports of their own (Kafka 29292, its controller
29293; Redis 26479), under ``<state dir>/secure/``:

- a local certificate authority and one server certificate (for 127.0.0.1),
  made with the ``openssl`` command line on the first start and kept;
- a KRaft broker whose only client listener is ``SASL_SSL`` with
  ``SCRAM-SHA-512``; the user ``lb`` and its credential are written into the
  metadata when the storage is formatted (``--add-scram``), brokers talk to
  themselves over the same listener as that user, and the controller listener
  speaks TLS with client certificates (the broker's own). No authorizer: a user
  who authenticates may do anything, transactions included;
- a Redis that listens on its ``tls-port`` only (no plain port), whose
  ``default`` user is off and whose one user ``lb`` has a password (stored
  hashed in ``redis.conf``).

The passwords are drawn once and kept in ``credentials.json``; ``lb.env``
(both mode 0600) holds every setting a client needs, passwords included, so
nothing secret has to be printed: ``set -a; . <state dir>/secure/lb.env; set +a``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from domain.errors import ServiceError
from infra import kafka
from infra.process import pid_alive, port_open, require_binary, spawn, started, stop_pid, wait_until

DEFAULT_KAFKA_PORT = 29292
DEFAULT_REDIS_PORT = 26479
USER = "lb"
MECHANISM = "SCRAM-SHA-512"
HOST = "127.0.0.1"
#: Listener lines of the plain broker that the secured one replaces.
_REPLACED = (
    "listeners=",
    "advertised.listeners=",
    "listener.security.protocol.map=",
    "inter.broker.listener.name=",
)


@dataclass(frozen=True)
class SecureLayout:
    """Where the secured pair listens and keeps its keys, configuration and data."""

    home: Path
    kafka_port: int = DEFAULT_KAFKA_PORT
    redis_port: int = DEFAULT_REDIS_PORT

    @property
    def ca_cert(self) -> Path:
        return self.home / "tls" / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.home / "tls" / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.home / "tls" / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.home / "tls" / "server.key"

    @property
    def broker_pem(self) -> Path:
        """The broker's key store: its private key and certificate in one PEM file."""
        return self.home / "tls" / "broker.pem"

    @property
    def credentials(self) -> Path:
        return self.home / "credentials.json"

    @property
    def env_file(self) -> Path:
        return self.home / "lb.env"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.kafka_port}"

    def kafka(self) -> kafka.KafkaLayout:
        return kafka.KafkaLayout(home=self.home / "kafka", port=self.kafka_port, heap="512m")

    @property
    def redis_home(self) -> Path:
        return self.home / "redis"

    def redis_url(self, password: str) -> str:
        return f"rediss://{USER}:{password}@{HOST}:{self.redis_port}/0"


def _private_file(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner may read (created so, never widened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def passwords(layout: SecureLayout) -> dict[str, str]:
    """``{"kafka": ..., "redis": ...}``, drawn on the first start and kept after."""
    try:
        data = json.loads(layout.credentials.read_text())
        if isinstance(data, dict) and data.get("kafka") and data.get("redis"):
            return {"kafka": str(data["kafka"]), "redis": str(data["redis"])}
    except (FileNotFoundError, json.JSONDecodeError):
        pass
    data = {"kafka": secrets.token_hex(24), "redis": secrets.token_hex(24)}
    _private_file(layout.credentials, json.dumps(data))
    return data


def _openssl(*args: str) -> None:
    openssl = require_binary("openssl", "openssl")
    done = subprocess.run([openssl, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed: {(done.stdout + done.stderr)[-2000:]}")


def make_certificates(layout: SecureLayout) -> None:
    """A local CA and a certificate for 127.0.0.1 it signed (kept once made)."""
    if layout.broker_pem.exists():
        return
    tls = layout.ca_cert.parent
    tls.mkdir(parents=True, exist_ok=True)
    os.chmod(tls, 0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "825",
             "-subj", "/CN=lb local CA", "-keyout", str(layout.ca_key),
             "-out", str(layout.ca_cert))  # fmt: skip
    csr = tls / "server.csr"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={HOST}",
             "-keyout", str(layout.server_key), "-out", str(csr))  # fmt: skip
    san = tls / "san.cnf"
    san.write_text(f"subjectAltName=IP:{HOST},DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(layout.ca_cert), "-CAkey",
             str(layout.ca_key), "-CAcreateserial", "-days", "825", "-extfile", str(san),
             "-out", str(layout.server_cert))  # fmt: skip
    _private_file(layout.broker_pem, layout.server_key.read_text() + layout.server_cert.read_text())


def _security_lines(layout: SecureLayout, password: str) -> list[str]:
    ctl = layout.kafka().controller_port
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{password}";'
    )
    return [
        "# Written by infra/secure.py: SASL_SSL (SCRAM) for clients, mutual TLS to the controller",
        f"listeners=SASL_SSL://{HOST}:{layout.kafka_port},CONTROLLER://{HOST}:{ctl}",
        f"advertised.listeners=SASL_SSL://{HOST}:{layout.kafka_port}",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name=SASL_SSL",
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config={jaas}",
        "listener.name.controller.ssl.client.auth=required",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={layout.broker_pem}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={layout.ca_cert}",
    ]


def _write_broker_config(layout: SecureLayout, password: str) -> None:
    """The plain broker's configuration with its listeners replaced by secured ones."""
    broker = layout.kafka()
    kafka._write_config(broker)
    lines = broker.properties.read_text().splitlines()
    kept = [line for line in lines if not line.startswith(_REPLACED)]
    _private_file(broker.properties, "\n".join(kept + _security_lines(layout, password)) + "\n")


def client_settings(layout: SecureLayout, pw: Mapping[str, str]) -> dict[str, str]:
    """Every ``LB_*`` setting a client of the secured pair needs (passwords included)."""
    return {
        "LB_KAFKA_BOOTSTRAP": layout.bootstrap,
        "LB_KAFKA_X_SECURITY_PROTOCOL": "SASL_SSL",
        "LB_KAFKA_X_SASL_MECHANISM": MECHANISM,
        "LB_KAFKA_X_SASL_USERNAME": USER,
        "LB_KAFKA_X_SASL_PASSWORD": pw["kafka"],
        "LB_KAFKA_X_SSL_CA_LOCATION": str(layout.ca_cert),
        "LB_REDIS_URL": layout.redis_url(pw["redis"]),
        "LB_REDIS_TLS_CA": str(layout.ca_cert),
    }


def shown_settings(layout: SecureLayout) -> dict[str, str]:
    """:func:`client_settings` with each password replaced by ``***`` (safe to print)."""
    return client_settings(layout, {"kafka": "***", "redis": "***"})


def _kafka_client_config(layout: SecureLayout, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": layout.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": USER,
        "sasl.password": password,
        "ssl.ca.location": str(layout.ca_cert),
        "log_level": 0,
    }


def kafka_answers(layout: SecureLayout, password: str, timeout_s: float = 2.0) -> bool:
    """True when the broker authenticates ``lb`` and returns cluster metadata."""
    if not port_open(HOST, layout.kafka_port):
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_kafka_client_config(layout, password))
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:
        return False


def redis_answers(layout: SecureLayout, password: str) -> bool:
    """True when Redis answers PING over TLS as ``lb``."""
    if not port_open(HOST, layout.redis_port):
        return False
    client = redis.Redis.from_url(
        layout.redis_url(password),
        ssl_ca_certs=str(layout.ca_cert),
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
    )
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _start_kafka(layout: SecureLayout, cache_dir: Path, password: str) -> int:
    broker = layout.kafka()
    if port_open(HOST, broker.port) or port_open(HOST, broker.controller_port):
        raise ServiceError(
            f"{HOST} port {broker.port} or {broker.controller_port} is already taken by another "
            "program; stop it or set another port with `lb up --secure-kafka-port`"
        )
    libs = kafka.fetch_jars(cache_dir)
    _write_broker_config(layout, password)
    scram = f"{MECHANISM}=[name={USER},password={password}]"
    try:
        kafka.format_storage(broker, libs, extra_args=("--add-scram", scram))
    except ServiceError as exc:
        raise ServiceError(str(exc).replace(password, "***")) from None
    pid = spawn(kafka.broker_argv(broker, libs), broker.stdout_log, cwd=broker.home)
    return started(
        pid,
        lambda: wait_until(
            lambda: kafka_answers(layout, password), 90, "secured Kafka", pid, broker.server_log
        ),
    )


def _redis_conf(layout: SecureLayout, password: str) -> str:
    digest = hashlib.sha256(password.encode()).hexdigest()
    home = layout.redis_home
    return "\n".join(
        [
            "# Written by infra/secure.py: TLS only, loopback only, one ACL user.",
            f"bind {HOST}",
            "port 0",
            f"tls-port {layout.redis_port}",
            f"tls-cert-file {layout.server_cert}",
            f"tls-key-file {layout.server_key}",
            f"tls-ca-cert-file {layout.ca_cert}",
            "tls-auth-clients no",
            "protected-mode yes",
            "daemonize no",
            f"dir {home}",
            f"logfile {home / 'redis.log'}",
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            "maxmemory-policy noeviction",
            "user default off",
            f"user {USER} on #{digest} ~* &* +@all",
            "",
        ]
    )


def _start_redis(layout: SecureLayout, password: str) -> int:
    if port_open(HOST, layout.redis_port):
        raise ServiceError(
            f"{HOST}:{layout.redis_port} is already taken by another program; stop it or set "
            "another port with `lb up --secure-redis-port`"
        )
    server = require_binary("redis-server", "redis-server")
    conf = layout.redis_home / "redis.conf"
    _private_file(conf, _redis_conf(layout, password))
    pid = spawn([server, str(conf)], layout.redis_home / "stdout.log", cwd=layout.redis_home)
    return started(
        pid,
        lambda: wait_until(
            lambda: redis_answers(layout, password),
            30,
            "secured Redis",
            pid,
            layout.redis_home / "redis.log",
        ),
    )


def up(layout: SecureLayout, cache_dir: Path, pids: dict[str, Any]) -> dict[str, Any]:
    """Start whichever of the pair is not running; ``pids`` (``kafka``, ``redis``) is updated.

    Certificates and passwords are made on the first start; ``lb.env`` is
    (re)written each time.
    """
    make_certificates(layout)
    pw = passwords(layout)
    env = "".join(f"{key}={value}\n" for key, value in client_settings(layout, pw).items())
    _private_file(layout.env_file, env)
    if not pid_alive(pids.get("redis")):
        pids["redis"] = _start_redis(layout, pw["redis"])
    if not pid_alive(pids.get("kafka")):
        pids["kafka"] = _start_kafka(layout, cache_dir, pw["kafka"])
    return pids


def status(layout: SecureLayout, pids: Mapping[str, Any]) -> dict[str, Any]:
    """Where the pair listens, whether each answers, and the settings (passwords masked)."""
    pw = passwords(layout) if layout.credentials.exists() else {"kafka": "", "redis": ""}
    return {
        "kafka": layout.bootstrap,
        "kafka_up": pid_alive(pids.get("kafka")) and kafka_answers(layout, pw["kafka"], 1.0),
        "redis": layout.redis_url("***"),
        "redis_up": pid_alive(pids.get("redis")) and redis_answers(layout, pw["redis"]),
        "env_file": str(layout.env_file),
        "settings": shown_settings(layout),
    }


def down(pids: Mapping[str, Any]) -> list[str]:
    """Stop the pair (Kafka first); the names of what was running."""
    stopped = []
    for name in ("kafka", "redis"):
        if pid_alive(pids.get(name)):
            stop_pid(pids[name], timeout_s=60)
            stopped.append(f"secure-{name}")
    return stopped
