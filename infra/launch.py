"""Starting a Bytewax job's processes on this host: command lines, recovery store, signals.

What ``lb run`` and ``lb rebuild --offline`` orchestrate once their checks
passed: the dead-letter topic with as many partitions as the input, the
recovery store of (flow, topic), one ``python -m bytewax.run`` command line
per process (``-i``/``-a`` on loopback ports for ``--processes N``, or this
host's process of a cluster named by hand), and the processes themselves:
started together, stopped by one SIGINT/SIGTERM forwarded to each, waited for.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from config.clients import quiet_kafka_config
from config.settings import Settings, child_environment
from domain.errors import ServiceError

RECOVERY_PARTITIONS = 4

#: How often :meth:`JobProcesses.wait` calls its ``watch`` while the processes run.
WATCH_EVERY_S = 0.5


def ensure_dead_letter_topic(settings: Settings, partitions: int, topics: dict[str, int]) -> None:
    """Create ``LB_DLQ_TOPIC`` with the input's partition count when it is missing."""
    if settings.dlq_topic in topics:
        return
    admin = AdminClient(quiet_kafka_config(settings))
    future = admin.create_topics([NewTopic(settings.dlq_topic, num_partitions=partitions)])[
        settings.dlq_topic
    ]
    try:
        future.result(timeout=30)
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise ServiceError(f"cannot create {settings.dlq_topic!r}: {exc}") from exc


def ensure_profile_topics(settings: Settings, partitions: int, topics: dict[str, int]) -> None:
    """Create the profiles topic (compacted) and its dead-letter topic when missing.

    Both get the score topic's partition count; profiles are keyed by playerId,
    like score events, so one player's profile records stay in order.
    """
    wanted = [
        NewTopic(
            settings.profiles_topic,
            num_partitions=partitions,
            config={"cleanup.policy": "compact"},
        ),
        NewTopic(settings.profiles_dlq_topic, num_partitions=partitions),
    ]
    missing = [topic for topic in wanted if topic.topic not in topics]
    if not missing:
        return
    admin = AdminClient(quiet_kafka_config(settings))
    for name, future in admin.create_topics(missing).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise ServiceError(f"cannot create {name!r}: {exc}") from exc


def ensure_recovery_store(settings: Settings, flow: str) -> str:
    """The recovery directory of (flow, topic), initialised on first use."""
    path = settings.recovery_dir(flow)
    if not path.exists() or not any(path.iterdir()):
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "bytewax.recovery", str(path), str(RECOVERY_PARTITIONS)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ServiceError(f"cannot initialise recovery store {path}: {done.stderr[-2000:]}")
    return str(path)


def free_ports(count: int) -> list[int]:
    """``count`` loopback ports free right now (for ``-a``)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def bytewax_argv(
    import_str: str,
    recovery_dir: str | None,
    snapshot_s: int,
    workers: int,
    process_id: int | None = None,
    addresses: list[str] | None = None,
) -> list[str]:
    """The ``python -m bytewax.run`` command line for one process."""
    argv = [sys.executable, "-m", "bytewax.run", import_str]
    if recovery_dir is not None:
        argv += ["-r", recovery_dir, "-s", str(snapshot_s), "-b", "0"]
    else:
        argv += ["-s", str(snapshot_s)]
    if process_id is not None and addresses:
        argv += ["-i", str(process_id), "-a", ";".join(addresses)]
    if workers > 1 or process_id is None:
        argv += ["-w", str(workers)]
    return argv


def job_commands(
    flow_call: str, recovery: str | None, settings: Settings, processes: int, workers: int
) -> list[list[str]]:
    """One ``bytewax.run`` command line per process (only this host's with ``--addresses``)."""
    if settings.process_id is not None:
        return [
            bytewax_argv(
                flow_call,
                recovery,
                settings.snapshot_interval_s,
                workers,
                settings.process_id,
                list(settings.addresses),
            )
        ]
    if processes == 1:
        return [bytewax_argv(flow_call, recovery, settings.snapshot_interval_s, workers)]
    addresses = [f"127.0.0.1:{p}" for p in free_ports(processes)]
    return [
        bytewax_argv(flow_call, recovery, settings.snapshot_interval_s, workers, i, addresses)
        for i in range(processes)
    ]


def child_env(settings: Settings) -> dict[str, str] | None:
    """A cluster named by hand is one deployment on every host (``flows.lease``): say so."""
    if settings.process_id is None:
        return None
    cluster = ";".join(settings.addresses)
    return child_environment({"LB_ADDRESSES": cluster, "LB_PROCESS_ID": str(settings.process_id)})


class JobProcesses:
    """The processes of one job: started together, stopped by one signal, waited for.

    Call :meth:`catch_stop_signals` before the (slow) checks: a stop asked for
    before anything was started ends this process at once (exit 0, the clean
    stop); one arriving while the children are being started waits until they
    are all recorded, then reaches every one of them (none is orphaned).
    """

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        self.stopping = False
        self._spawning = False

    def catch_stop_signals(self) -> None:
        """SIGINT and SIGTERM, from now on, stop the job (see the class)."""
        signal.signal(signal.SIGINT, self._forward)
        signal.signal(signal.SIGTERM, self._forward)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self._spawning:
            return  # reaches every child once they are all started (start)
        if not self.children:
            raise SystemExit(0)
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def start(self, commands: list[list[str]], env: dict[str, str] | None) -> None:
        """Start one process per command line."""
        self._spawning = True
        for argv in commands:
            self.children.append(subprocess.Popen(argv, env=env))
        self._spawning = False
        if self.stopping:
            self._forward(signal.SIGTERM, None)

    def wait(self, watch: Callable[[], None] | None = None) -> int:
        """Wait for every process (calling ``watch`` about twice a second); the first failure."""
        while watch is not None and any(child.poll() is None for child in self.children):
            watch()
            time.sleep(WATCH_EVERY_S)
        codes = [child.wait() for child in self.children]
        if self.stopping:
            # A child still starting up when asked to stop ends by the signal itself.
            codes = [0 if code == -signal.SIGTERM else code for code in codes]
        return next((code for code in codes if code != 0), 0)
