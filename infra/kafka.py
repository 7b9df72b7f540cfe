"""Real Apache Kafka brokers (KRaft: broker + controller in one process) on loopback.

One node alone (``lb up``), or one of a 3-node quorum (``lb up --replicated``,
:mod:`infra.replicated`): each node on an address of its own, the same ports.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.errors import ServiceError
from infra.process import log_tail, port_open, require_binary, spawn, started, wait_until

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).parent / "kafka" / "pom.xml"


@dataclass(frozen=True)
class KafkaLayout:
    """Where one broker listens and keeps its configuration, data and log."""

    home: Path
    port: int
    host: str = "127.0.0.1"
    node_id: int = 1
    #: The controller quorum, ``id@host:port`` each; empty: this node alone.
    voters: tuple[str, ...] = ()
    #: Replicas of every topic, internal ones included (``min.insync.replicas`` is 2 from 3).
    replication: int = 1
    heap: str = "1g"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def quorum(self) -> str:
        return ",".join(self.voters) or f"{self.node_id}@{self.host}:{self.controller_port}"

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


def _replication_lines(replication: int) -> list[str]:
    """Replication of every topic the broker creates, its internal ones too."""
    isr = min(2, replication)
    return [
        f"default.replication.factor={replication}",
        f"min.insync.replicas={isr}",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=4",
        f"transaction.state.log.replication.factor={replication}",
        f"transaction.state.log.min.isr={isr}",
        "transaction.state.log.num.partitions=4",
        f"share.coordinator.state.topic.replication.factor={replication}",
        f"share.coordinator.state.topic.min.isr={isr}",
    ]


def _write_config(layout: KafkaLayout) -> None:
    layout.home.mkdir(parents=True, exist_ok=True)
    host, port, ctl = layout.host, layout.port, layout.controller_port
    layout.properties.write_text(
        "\n".join(
            [
                "# Written by infra/kafka.py: KRaft (broker + controller) on loopback only.",
                "process.roles=broker,controller",
                f"node.id={layout.node_id}",
                f"controller.quorum.voters={layout.quorum}",
                f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{ctl}",
                f"advertised.listeners=PLAINTEXT://{host}:{port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={layout.data_dir}",
                "num.partitions=8",
                "auto.create.topics.enable=false",
                # Kafka is the source of truth: keep every record locally.
                "log.retention.ms=-1",
                *_replication_lines(layout.replication),
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


def format_storage(
    layout: KafkaLayout,
    libs: Path,
    cluster_id: str | None = None,
    extra_args: Sequence[str] = (),
) -> None:
    """Format the KRaft log directory once; an already formatted one is kept.

    The nodes of one quorum share ``cluster_id``; a lone node draws its own.
    ``extra_args`` go to the storage tool as they are (``--add-scram ...``);
    they may hold a secret, so its failure message shows the tool's output only.
    """
    if (layout.data_dir / "meta.properties").exists():
        return
    cluster_id = cluster_id or new_cluster_id()
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
        *extra_args,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServiceError(f"Kafka storage format failed:\n{(done.stdout + done.stderr)[-3000:]}")


def spawn_broker(layout: KafkaLayout, cache_dir: Path, cluster_id: str | None = None) -> int:
    """Configure, format (once) and start one node without waiting for it; its pid."""
    if port_open(layout.host, layout.port) or port_open(layout.host, layout.controller_port):
        raise ServiceError(
            f"{layout.host} port {layout.port} or {layout.controller_port} is already taken by "
            "another program; stop it or set another port with `lb up --kafka-port`"
        )
    libs = fetch_jars(cache_dir)
    _write_config(layout)
    format_storage(layout, libs, cluster_id)
    return spawn(broker_argv(layout, libs), layout.stdout_log, cwd=layout.home)


def broker_argv(layout: KafkaLayout, libs: Path) -> list[str]:
    """The command line of one node, configured by ``layout.properties``."""
    java = require_binary("java", "openjdk-17-jre-headless")
    return [
        java,
        f"-Xms{min(256, _megabytes(layout.heap))}m",
        f"-Xmx{layout.heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j}",
        "-cp",
        _classpath(libs),
        "kafka.Kafka",
        str(layout.properties),
    ]


def _megabytes(heap: str) -> int:
    number, unit = heap[:-1], heap[-1].lower()
    return int(number) * 1024 if unit == "g" else int(number)


def wait_broker(layout: KafkaLayout, pid: int, timeout_s: float = 90.0) -> None:
    """Wait until the node answers metadata; a node that dies meanwhile fails at once."""
    wait_until(
        lambda: answers_metadata(layout.bootstrap), timeout_s, "Kafka", pid, layout.server_log
    )


def start(layout: KafkaLayout, cache_dir: Path, timeout_s: float = 90.0) -> int:
    """Start a lone broker and wait until it answers metadata; returns its pid."""
    pid = spawn_broker(layout, cache_dir)
    return started(pid, lambda: wait_broker(layout, pid, timeout_s))


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
