"""A real single-node Apache Kafka broker (KRaft: broker + controller) on loopback.

The broker comes from Maven Central: ``mvn dependency:copy-dependencies`` of
``infra/kafka/pom.xml`` (``org.apache.kafka:kafka_2.13`` plus a log4j2 SLF4J
backend) into a cache directory shared by every clone, then runs with
``java -cp <jars> kafka.Kafka``. Storage is formatted once with
``kafka.tools.StorageTool``; the data directory survives restarts.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from domain.errors import ServiceError
from infra.process import log_tail, port_open, require_binary, spawn, started, wait_until

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).parent / "kafka" / "pom.xml"


@dataclass(frozen=True)
class KafkaLayout:
    """Where one broker keeps its configuration, data and log."""

    home: Path
    port: int

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.home / "log4j2.properties"

    @property
    def server_log(self) -> Path:
        return self.home / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.home / "stdout.log"


def fetch_jars(cache_dir: Path) -> Path:
    """The directory of broker jars, resolved with Maven on first use (cached after)."""
    libs = cache_dir / f"kafka-{KAFKA_VERSION}" / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    require_binary("java", "openjdk-17-jre-headless")
    mvn = require_binary("mvn", "maven")
    if libs.exists():
        shutil.rmtree(libs)
    libs.mkdir(parents=True)
    argv = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(POM),
        f"-Dkafka.version={KAFKA_VERSION}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={libs}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    jars = list(libs.glob("*.jar"))
    if done.returncode != 0 or not any(j.name.startswith("kafka_2.13") for j in jars):
        raise ServiceError(
            "could not fetch Apache Kafka from Maven Central "
            f"(`{' '.join(argv)}` exited {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
        )
    marker.write_text(KAFKA_VERSION)
    return libs


def _write_config(layout: KafkaLayout) -> None:
    layout.home.mkdir(parents=True, exist_ok=True)
    port, ctl = layout.port, layout.controller_port
    layout.properties.write_text(
        "\n".join(
            [
                "# Written by infra/kafka.py: single-node KRaft on loopback only.",
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{ctl}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctl}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={layout.data_dir}",
                "num.partitions=8",
                "auto.create.topics.enable=false",
                # Kafka is the source of truth: keep every record locally.
                "log.retention.ms=-1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "",
            ]
        )
    )
    layout.log4j.write_text(
        "\n".join(
            [
                "status = warn",
                "appender.file.type = File",
                "appender.file.name = FILE",
                f"appender.file.fileName = {layout.server_log}",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                "rootLogger.level = INFO",
                "rootLogger.appenderRef.file.ref = FILE",
                "logger.kafka.name = kafka",
                "logger.kafka.level = INFO",
                "logger.state.name = state.change.logger",
                "logger.state.level = WARN",
                "",
            ]
        )
    )


def _classpath(libs: Path) -> str:
    return f"{libs}/*"


def new_cluster_id() -> str:
    """A random KRaft cluster id (16 bytes, URL-safe base64) that parses as an id.

    One in 64 such ids starts with ``-``, which the storage tool's argument
    parser takes for an option ("expected one argument"); draw again then.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def format_storage(layout: KafkaLayout, libs: Path) -> None:
    """Format the KRaft log directory once; an already formatted one is kept."""
    if (layout.data_dir / "meta.properties").exists():
        return
    cluster_id = new_cluster_id()
    java = require_binary("java", "openjdk-17-jre-headless")
    argv = [
        java,
        "-cp",
        _classpath(libs),
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(layout.properties),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServiceError(f"Kafka storage format failed:\n{(done.stdout + done.stderr)[-3000:]}")


def start(layout: KafkaLayout, cache_dir: Path, timeout_s: float = 90.0) -> int:
    """Start the broker and wait until it answers metadata; returns its pid."""
    if port_open("127.0.0.1", layout.port) or port_open("127.0.0.1", layout.controller_port):
        raise ServiceError(
            f"port {layout.port} or {layout.controller_port} is already taken by another program; "
            "stop it or set another port with `lb up --kafka-port`"
        )
    libs = fetch_jars(cache_dir)
    _write_config(layout)
    format_storage(layout, libs)
    java = require_binary("java", "openjdk-17-jre-headless")
    argv = [
        java,
        "-Xms256m",
        "-Xmx1g",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j}",
        "-cp",
        _classpath(libs),
        "kafka.Kafka",
        str(layout.properties),
    ]
    pid = spawn(argv, layout.stdout_log, cwd=layout.home)
    bootstrap = f"127.0.0.1:{layout.port}"
    return started(
        pid,
        lambda: wait_until(
            lambda: answers_metadata(bootstrap), timeout_s, "Kafka", pid, layout.server_log
        ),
    )


def answers_metadata(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when the broker returns cluster metadata (not merely an open port)."""
    host, _, port = bootstrap.rpartition(":")
    if not port_open(host, int(port)):
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(meta.brokers)


def describe_failure(layout: KafkaLayout) -> str:
    """Log tails to show when the broker misbehaves."""
    return f"{log_tail(layout.server_log)}\n{log_tail(layout.stdout_log, 10)}"
