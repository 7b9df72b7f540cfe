"""``lb up`` / ``lb down`` / ``lb status``: the local services as one unit.

What runs is recorded in ``<state dir>/services.json`` (pids and ports), so
``lb up`` twice reuses live servers, ``lb status`` and the settings find the
ports again, and ``lb down`` stops exactly what was started.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.settings import DEFAULT_KAFKA_PORT, DEFAULT_REDIS_PORT
from domain.errors import ServiceError
from infra import kafka, replicated, secure
from infra import redis as redis_infra
from infra.process import pid_alive, port_open, stop_pid, wait_until

#: Cluster bus ports are these + 10000: still below the ephemeral range.
DEFAULT_CLUSTER_BASE_PORT = 17101


@dataclass(frozen=True)
class ServiceDirs:
    """Layout of the git-ignored state directory."""

    state_dir: Path
    cache_dir: Path

    @property
    def record(self) -> Path:
        return self.state_dir / "services.json"

    def kafka(self, port: int) -> kafka.KafkaLayout:
        return kafka.KafkaLayout(home=self.state_dir / "kafka", port=port)

    def redis(self, port: int) -> redis_infra.RedisNode:
        return redis_infra.RedisNode(home=self.state_dir / "redis", port=port)

    def replicated(self, first_address: str) -> replicated.ReplicatedLayout:
        return replicated.ReplicatedLayout.on(self.state_dir / "replicated", first_address)

    def secure(self, kafka_port: int, redis_port: int) -> secure.SecureLayout:
        return secure.SecureLayout(self.state_dir / "secure", kafka_port, redis_port)

    def cluster(self, base_port: int) -> list[redis_infra.RedisNode]:
        return [
            redis_infra.RedisNode(
                home=self.state_dir / "cluster" / str(base_port + i),
                port=base_port + i,
                cluster=True,
            )
            for i in range(redis_infra.CLUSTER_SIZE)
        ]


def read_record(dirs: ServiceDirs) -> dict[str, Any]:
    """The recorded pids and ports (empty when nothing was started)."""
    try:
        data = json.loads(dirs.record.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_record(dirs: ServiceDirs, record: dict[str, Any]) -> None:
    dirs.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = dirs.record.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    tmp.replace(dirs.record)


def up(
    dirs: ServiceDirs,
    *,
    kafka_port: int | None = None,
    redis_port: int | None = None,
    cluster: bool = False,
    cluster_base_port: int | None = None,
    replicated_from: str | None = None,
) -> dict[str, Any]:
    """Start whatever is not already running; returns the status document.

    ``replicated_from``: also the replicated set (:mod:`infra.replicated`) on
    that address and the ones after it.
    """
    record = read_record(dirs)
    k_port = kafka_port or record.get("kafka_port") or DEFAULT_KAFKA_PORT
    r_port = redis_port or record.get("redis_port") or DEFAULT_REDIS_PORT

    if pid_alive(record.get("redis_pid")) and record.get("redis_port") == r_port:
        redis_infra.wait_ready(dirs.redis(r_port), record["redis_pid"])
    else:
        record["redis_pid"] = redis_infra.start_node(dirs.redis(r_port))
        record["redis_port"] = r_port
        _write_record(dirs, record)

    if pid_alive(record.get("kafka_pid")) and record.get("kafka_port") == k_port:
        layout = dirs.kafka(k_port)
        bootstrap = f"127.0.0.1:{k_port}"
        wait_until(
            lambda: kafka.answers_metadata(bootstrap),
            60,
            "Kafka",
            record["kafka_pid"],
            layout.server_log,
        )
    else:
        record["kafka_pid"] = kafka.start(dirs.kafka(k_port), dirs.cache_dir)
        record["kafka_port"] = k_port
        _write_record(dirs, record)

    if cluster:
        base = cluster_base_port or record.get("cluster_base_port") or DEFAULT_CLUSTER_BASE_PORT
        nodes = dirs.cluster(base)
        pids = list(record.get("cluster_pids") or [])
        if record.get("cluster_base_port") != base:
            pids = []
        pids += [None] * (len(nodes) - len(pids))
        for i, node in enumerate(nodes):
            if not pid_alive(pids[i]):
                pids[i] = redis_infra.start_node(node)
                record["cluster_pids"] = pids
                record["cluster_base_port"] = base
                _write_record(dirs, record)
        redis_infra.create_cluster(nodes)
    if replicated_from:
        _up_replicated(dirs, record, replicated_from)
    return status(dirs)


def _up_replicated(dirs: ServiceDirs, record: dict[str, Any], first: str) -> None:
    """Start the replicated set, recording each pid as soon as it exists."""
    previous = record.get("replicated") or {}
    if previous.get("first_address", first) != first and any(replicated.Pids.of(previous).alive()):
        raise ServiceError(
            f"the replicated services already run from {previous['first_address']}; "
            "`lb down` them first"
        )
    pids = replicated.Pids.of(previous if previous.get("first_address") == first else {})
    try:
        replicated.up(dirs.replicated(first), dirs.cache_dir, pids)
    finally:
        record["replicated"] = {
            "first_address": first,
            "kafka_pids": pids.kafka,
            "redis_pids": pids.redis,
        }
        _write_record(dirs, record)


def up_secure(
    dirs: ServiceDirs, *, kafka_port: int | None = None, redis_port: int | None = None
) -> None:
    """Start the secured pair (:mod:`infra.secure`), recording each pid as soon as it exists."""
    record = read_record(dirs)
    previous = record.get("secure") or {}
    k_port = kafka_port or previous.get("kafka_port") or secure.DEFAULT_KAFKA_PORT
    r_port = redis_port or previous.get("redis_port") or secure.DEFAULT_REDIS_PORT
    same = (previous.get("kafka_port"), previous.get("redis_port")) == (k_port, r_port)
    pids = {k: previous.get(k) for k in ("kafka", "redis")} if same else {}
    if not same and any(pid_alive(previous.get(k)) for k in ("kafka", "redis")):
        raise ServiceError("the secured services already run on other ports; `lb down` them first")
    try:
        secure.up(dirs.secure(k_port, r_port), dirs.cache_dir, pids)
    finally:
        record["secure"] = {"kafka_port": k_port, "redis_port": r_port, **pids}
        _write_record(dirs, record)


def down_secure(dirs: ServiceDirs) -> list[str]:
    """Stop only the secured pair (``lb down --secure``); the others keep running."""
    record = read_record(dirs)
    stopped = _down_secure(record)
    if dirs.record.exists():
        _write_record(dirs, record)
    return stopped


def _down_secure(record: dict[str, Any]) -> list[str]:
    secured = record.get("secure") or {}
    stopped = secure.down(secured)
    if secured:  # its ports, keys and data stay; `lb up --secure` starts it again
        record["secure"] = {k: secured[k] for k in ("kafka_port", "redis_port")}
    return stopped


def status(dirs: ServiceDirs) -> dict[str, Any]:
    """Where each service listens and whether it answers (``lb status --json``)."""
    record = read_record(dirs)
    doc: dict[str, Any] = {}
    if record.get("kafka_port"):
        port = record["kafka_port"]
        doc["kafka"] = f"127.0.0.1:{port}"
        doc["kafka_up"] = pid_alive(record.get("kafka_pid")) and kafka.answers_metadata(
            doc["kafka"], 1.0
        )
    if record.get("redis_port"):
        port = record["redis_port"]
        doc["redis"] = f"redis://127.0.0.1:{port}/0"
        doc["redis_up"] = pid_alive(record.get("redis_pid")) and redis_infra.pings(port)
    if record.get("cluster_base_port") and record.get("cluster_pids"):
        base = record["cluster_base_port"]
        ports = [base + i for i in range(redis_infra.CLUSTER_SIZE)]
        doc["redis_cluster"] = [f"redis://127.0.0.1:{p}" for p in ports]
        doc["redis_cluster_up"] = all(
            pid_alive(pid) for pid in record.get("cluster_pids") or []
        ) and redis_infra.cluster_ok(ports[0])
    if (record.get("replicated") or {}).get("first_address"):
        rec = record["replicated"]
        doc["replicated"] = replicated.status(
            dirs.replicated(rec["first_address"]), replicated.Pids.of(rec)
        )
        doc["replicated_up"] = doc["replicated"]["up"]
    if record.get("secure"):
        rec = record["secure"]
        doc["secure"] = secure.status(dirs.secure(rec["kafka_port"], rec["redis_port"]), rec)
        doc["secure_up"] = doc["secure"]["kafka_up"] and doc["secure"]["redis_up"]
    return doc


def down(dirs: ServiceDirs) -> list[str]:
    """Stop everything recorded (Kafka first, so nothing writes to a stopped Redis)."""
    record = read_record(dirs)
    stopped: list[str] = []
    stopped += _down_secure(record)
    if pid_alive(record.get("kafka_pid")):
        stop_pid(record["kafka_pid"], timeout_s=60)
        stopped.append("kafka")
    for pid in record.get("cluster_pids") or []:
        if pid_alive(pid):
            stop_pid(pid)
            stopped.append("redis-cluster-node")
    if pid_alive(record.get("redis_pid")):
        stop_pid(record["redis_pid"])
        stopped.append("redis")
    if record.get("replicated"):
        if replicated.down(replicated.Pids.of(record["replicated"])):
            stopped.append("replicated")
        del record["replicated"]  # its data stay; `lb up --replicated` starts it again
    for key in ("kafka_pid", "redis_pid", "cluster_pids"):
        record.pop(key, None)
    if dirs.record.exists():
        _write_record(dirs, record)
    still = [name for name, pid in _all_pids(read_record(dirs)) if pid_alive(pid)]
    if still:
        raise ServiceError(f"still running after lb down: {still}")
    return stopped


def stop_service(dirs: ServiceDirs, service: str, *, kill: bool = False) -> None:
    """Stop one recorded service, ``"kafka"`` or ``"redis"``; ``up`` starts it again.

    SIGTERM by default (Redis fsyncs its AOF, Kafka closes its logs cleanly);
    ``kill=True`` sends SIGKILL, the crash the fault tests inject. Returns once
    the process is gone, so the next ``up`` finds its port free.
    """
    if service not in ("kafka", "redis"):
        raise ServiceError(f"unknown service {service!r}")
    pid = read_record(dirs).get(f"{service}_pid")
    if kill and pid is not None and pid_alive(pid):
        os.killpg(int(pid), signal.SIGKILL)
    stop_pid(pid, timeout_s=60)


def _all_pids(record: dict[str, Any]) -> list[tuple[str, int | None]]:
    pids: list[tuple[str, int | None]] = [
        ("kafka", record.get("kafka_pid")),
        ("redis", record.get("redis_pid")),
    ]
    pids += [("cluster", pid) for pid in record.get("cluster_pids") or []]
    pids += [
        ("replicated", pid) for pid in replicated.Pids.of(record.get("replicated") or {}).alive()
    ]
    pids += [(f"secure-{k}", (record.get("secure") or {}).get(k)) for k in ("kafka", "redis")]
    return pids


def wait_for_port_release(port: int, timeout_s: float = 10.0) -> None:
    """Block until nothing listens on ``port`` (after a stop)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and port_open("127.0.0.1", port):
        time.sleep(0.1)
