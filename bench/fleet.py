"""The job across hosts: what the network path costs, and how long losing a host takes.

Usage (from the repository root, as root: network namespaces need it)::

    .venv/bin/python -m bench.fleet [--events 200000] [--repeat 2] [--rate 3000] [--feed-seconds 30]

Starts its own services, as the fault suite does: an :mod:`infra.netns`
bridge with three hosts (network namespaces) and :mod:`infra.replicated` on
the bridge's addresses (three KRaft brokers, replication factor 3,
``min.insync.replicas`` 2; a Redis Cluster of three masters with a replica
each), all stopped and removed at the end.

1. *Ingest*: ``--events`` records of the ``zipf`` shape (``bench.workloads``)
   in a 6-partition topic; the job (``bytewax.run flows.scoreboard:
   build(until_end=True)``, the line ``lb run --until-end --processes N``
   runs) with 1, 2 and 3 processes, each process in a namespace of its own
   (cluster traffic and every Kafka and Redis request cross a veth pair and
   the bridge), against the same processes on the root namespace's loopback
   (cluster addresses on 127.0.0.1; the services' addresses are local, so the
   kernel short-cuts them). Each run into a fresh namespace and dead-letter
   topic; steady state from the first visible progress to the moment every
   record was counted; ``--repeat`` rounds (alternating which placement runs
   first), medians reported. A run whose counters or dead letters differ from what
   was produced fails the benchmark (exit 1, the doc left alone).
2. *Host loss*: three processes in namespaces tail a topic (recovery store on,
   snapshots every second) while ``--rate`` events/s arrive for
   ``--feed-seconds``; at ``--cut-at`` s host 2's link is cut. Measured: until
   the two survivors exit (the peer watchdog, ``telemetry/watchdog.py``),
   until the cluster restarted as 2 processes from the recovery store shows
   progress, and until every record is counted exactly once (the cut to
   caught up).

Writes the ``bench.fleet`` section of ``docs/BENCHMARKS.md``; progress on
stderr, the JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from redis.cluster import RedisCluster

from bench.common import (
    ROOT,
    counted,
    emit,
    log,
    machine,
    machine_line,
    run_id,
    table,
    write_section,
)
from bench.workloads import shape
from config.settings import Settings, child_environment
from domain.signing import parse_keyring
from infra import replicated
from infra.launch import bytewax_argv
from infra.netns import Host, Network, network, unavailable
from producer.score_producer import ScoreProducer
from schemas.codec import ScoreEventCodec
from telemetry import watchdog

SECTION = "bench.fleet"
PARTITIONS = 6
CLUSTER_PORT = 7200
PLACEMENTS = ("loopback", "namespaces")
HOSTS = 3


@dataclass
class Fleet:
    """The services on the bridge and what every run shares."""

    net: Network
    layout: replicated.ReplicatedLayout
    settings: Settings
    client: RedisCluster
    scratch: Path

    def topic(self, name: str, partitions: int = PARTITIONS) -> str:
        admin = AdminClient({"bootstrap.servers": self.layout.bootstrap, "log_level": 0})
        for future in admin.create_topics([NewTopic(name, num_partitions=partitions)]).values():
            future.result(timeout=60)
        return name

    def env(self, topic: str, namespace: str) -> dict[str, str]:
        return child_environment(
            {
                "LB_KAFKA_BOOTSTRAP": self.layout.bootstrap,
                "LB_REDIS_URL": self.layout.redis_url,
                "LB_REDIS_CLUSTER": "1",
                "LB_TOPIC": topic,
                "LB_DLQ_TOPIC": self.topic(f"{topic}.{namespace}.dlq"),
                "LB_NAMESPACE": namespace,
                "LB_STATE_DIR": str(self.scratch / namespace),
                "LB_SNAPSHOT_INTERVAL_S": "1",
                "LB_METRICS_PORT": "0",
            }
        )


@contextlib.contextmanager
def fleet() -> Iterator[Fleet]:
    """Bridge, hosts and replicated services; all removed on the way out."""
    brokers, nodes = replicated.BROKERS, replicated.REDIS_NODES
    scratch = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    with network(HOSTS, brokers + nodes) as net:
        addresses = net.service_addresses
        layout = replicated.ReplicatedLayout(
            scratch / "services", tuple(addresses[:brokers]), tuple(addresses[brokers:])
        )
        settings = Settings.from_env(
            child_environment(
                {"LB_KAFKA_BOOTSTRAP": layout.bootstrap, "LB_REDIS_URL": layout.redis_url}
            )
        )
        pids = replicated.Pids.of({})
        try:
            log("starting 3 brokers and 6 Redis nodes on the bridge")
            replicated.up(layout, settings.cache_dir, pids)
            client = RedisCluster.from_url(layout.redis_url)
            yield Fleet(net, layout, settings, client, scratch)
            client.close()
        finally:
            replicated.down(pids)
            subprocess.run(["rm", "-rf", str(scratch)], check=False)


class Processes:
    """The job's Bytewax processes: on hosts (namespaces) or on loopback."""

    def __init__(
        self,
        env: dict[str, str],
        hosts: Sequence[Host] | None,
        count: int,
        flow_call: str,
        recovery: str | None,
        log_dir: Path,
    ) -> None:
        places = [h.address for h in hosts] if hosts else ["127.0.0.1"] * count
        addresses = [f"{a}:{CLUSTER_PORT + (0 if hosts else i)}" for i, a in enumerate(places)]
        self.started = time.monotonic()
        self.procs: list[subprocess.Popen[bytes]] = []
        log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            argv = bytewax_argv(
                f"flows.scoreboard:{flow_call}",
                recovery,
                1,
                1,
                i if count > 1 else None,
                addresses if count > 1 else None,
            )
            with open(log_dir / f"job-{count}-{i}.log", "ab") as out:
                self.procs.append(
                    subprocess.Popen(
                        hosts[i].argv(argv) if hosts else argv,
                        env=env,
                        cwd=ROOT,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def alive(self) -> list[bool]:
        return [p.poll() is None for p in self.procs]

    def wait(self, timeout_s: float) -> list[int]:
        return [p.wait(timeout=timeout_s) for p in self.procs]

    def signal(self, signum: int, which: Sequence[int] | None = None) -> None:
        for i, proc in enumerate(self.procs):
            if (which is None or i in which) and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait()


def produce(f: Fleet, topic: str, events: int, rate: float = 0.0, seed: int = 7) -> Counter[str]:
    """``events`` records of the zipf shape (at ``rate``/s when > 0); expected outcomes."""
    keyring = parse_keyring(f.settings.hmac_keys.reveal())
    start_ms = int(datetime.now(UTC).timestamp() * 1000)
    stream = shape("zipf").records(
        keyring, ScoreEventCodec.from_registry(), start_ms, events, 1_000_000, seed=seed
    )
    expected: Counter[str] = Counter()
    began = time.monotonic()
    with ScoreProducer(f.layout.bootstrap, topic, {}) as producer:
        for index, record in enumerate(stream):
            producer.produce_record(record.key, record.value, record.timestamp_ms)
            expected[record.expected] += 1
            if rate > 0 and index % 100 == 0:
                ahead = index / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        producer.flush(120.0)
        if producer.delivered != events or producer.failed:
            raise SystemExit(f"producing failed: {producer.delivered} of {events} delivered")
    return expected


def _watch_counts(
    f: Fleet,
    namespace: str,
    target: int,
    timeout_s: float,
    still: Callable[[], bool],
    baseline: int = 0,
) -> tuple[float | None, float]:
    """(first count above ``baseline``, all counted) as monotonic times; polls every 50 ms."""
    first: float | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _ = counted(f.client, namespace)
        now = time.monotonic()
        if done > baseline and first is None:
            first = now
        if done >= target:
            return first, now
        if not still():
            raise SystemExit(f"the job stopped with {done:,} of {target:,} records counted")
        time.sleep(0.05)
    raise SystemExit(f"not every record counted within {timeout_s:.0f}s")


def ingest_run(
    f: Fleet, topic: str, expected: Counter[str], count: int, placement: str
) -> dict[str, Any]:
    """One ``--until-end`` run of ``count`` processes; its rates and checks."""
    namespace = f"bf{run_id()}"
    env = f.env(topic, namespace)
    hosts = f.net.hosts[:count] if placement == "namespaces" else None
    target = expected["ok"] + expected["duplicate"]
    procs = Processes(env, hosts, count, "build(until_end=True)", None, f.scratch / namespace)
    try:
        first, last = _watch_counts(f, namespace, target, 600, lambda: any(procs.alive()))
        codes = procs.wait(120)
    finally:
        procs.kill()
    total, _ = counted(f.client, namespace)
    dead = _dead_letters(f, env["LB_DLQ_TOPIC"])
    ok = codes == [0] * count and total == target and dead == sum(expected.values()) - target
    events = sum(expected.values())
    steady = (last - first) if first is not None else None
    result = {
        "placement": placement,
        "processes": count,
        "seconds": round(last - procs.started, 2),
        "events_per_s": round(events / (last - procs.started)),
        "steady_events_per_s": round(events / steady) if steady else None,
        "ok": ok,
        "codes": codes,
        "counted": total,
        "dead": dead,
    }
    log(f"{placement} x{count}: {result}")
    _drop(f, namespace)
    return result


def _dead_letters(f: Fleet, topic: str) -> int:
    from jobs.dead_letter_reader import count_letters

    return count_letters({"bootstrap.servers": f.layout.bootstrap}, topic)


def _drop(f: Fleet, namespace: str) -> None:
    for key in f.client.scan_iter(match=f"{namespace}:*", count=1000):
        f.client.delete(key)


def host_loss(f: Fleet, args: argparse.Namespace) -> dict[str, Any]:
    """Three tailing processes, host 2 cut off mid-stream, restarted as two."""
    topic = f.topic(f"bench-fleet-cut-{run_id()}")
    namespace = f"bf{run_id()}"
    env = f.env(topic, namespace)
    recovery = f.scratch / namespace / "recovery"
    recovery.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "bytewax.recovery", str(recovery), "4"], check=True, cwd=ROOT
    )
    events = int(args.rate * args.feed_seconds)
    produced: list[Counter[str]] = []
    feeder = threading.Thread(
        target=lambda: produced.append(produce(f, topic, events, args.rate, seed=11)), daemon=True
    )
    hosts = f.net.hosts
    three = Processes(env, hosts, 3, "build()", str(recovery), f.scratch / namespace)
    two: Processes | None = None
    try:
        feeder.start()
        time.sleep(args.cut_at)
        before, _ = counted(f.client, namespace)
        cut = time.monotonic()
        hosts[2].cut()
        log(f"cut host 2 after {before:,} records counted")
        _wait_first(three, [0, 1], 120)
        exited = time.monotonic() - cut
        three.signal(signal.SIGKILL, [2])  # the lost host never comes back
        at_restart, _ = counted(f.client, namespace)
        two = Processes(env, hosts[:2], 2, "build()", str(recovery), f.scratch / namespace)
        feeder.join(timeout=args.feed_seconds + 120)
        target = produced[0]["ok"] + produced[0]["duplicate"]
        first, last = _watch_counts(
            f, namespace, target, 600, lambda: all(two.alive()), baseline=at_restart
        )
        total, _ = counted(f.client, namespace)
        dead = _dead_letters(f, env["LB_DLQ_TOPIC"])
    finally:
        three.kill()
        if two is not None:
            two.kill()
        hosts[2].reconnect()
    result = {
        "rate": args.rate,
        "events": events,
        "cut_at_s": args.cut_at,
        "survivors_exited_s": round(exited, 2),
        "survivor_codes": [p.returncode for p in three.procs[:2]],
        "restart_first_progress_s": round((first or last) - cut, 2),
        "cut_to_caught_up_s": round(last - cut, 2),
        "exact": total == target and dead == events - target,
    }
    log(f"host loss: {result}")
    _drop(f, namespace)
    return result


def _wait_first(procs: Processes, which: Sequence[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(procs.alive()[i] for i in which):
        if time.monotonic() > deadline:
            raise SystemExit(f"the survivors did not exit within {timeout_s:.0f}s of the cut")
        time.sleep(0.1)


def medians(runs: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(placement, processes) -> the median over rounds of each rate."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for key in {(r["placement"], r["processes"]) for r in runs}:
        same = [r for r in runs if (r["placement"], r["processes"]) == key]
        out[key] = {
            rate: round(statistics.median(r[rate] or 0 for r in same))
            for rate in ("events_per_s", "steady_events_per_s")
        }
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The ``bench.fleet`` section: the ingest table and the host-loss timings."""
    runs = medians(summary["ingest"])
    rows = []
    for n in (1, 2, 3):
        loop, ns = runs[("loopback", n)], runs[("namespaces", n)]
        ratio = (
            f"{ns['steady_events_per_s'] / loop['steady_events_per_s']:.2f}"
            if ns["steady_events_per_s"] and loop["steady_events_per_s"]
            else "-"
        )
        rows.append(
            [
                str(n),
                f"{loop['steady_events_per_s']:,}",
                f"{ns['steady_events_per_s']:,}",
                ratio,
                f"{loop['events_per_s']:,} / {ns['events_per_s']:,}",
            ]
        )
    cut = summary["host_loss"]
    return "\n".join(
        [
            "## The job across hosts (network namespaces)",
            "",
            f"Command: `{summary['command']}` (as root)",
            "",
            machine_line(summary["machine"]),
            "",
            f"Ingest of {summary['events']:,} events (zipf, 6 partitions; median of "
            f"{summary['repeat']} rounds) against 3 KRaft "
            "brokers (RF 3, min.insync.replicas 2) and a Redis Cluster of 3 masters with a "
            "replica each, all on a bridge; events/s, steady state (first progress to every "
            "record counted):",
            "",
            table(
                [
                    "processes",
                    "loopback",
                    "namespaces",
                    "namespaces / loopback",
                    "end to end (loopback / namespaces)",
                ],
                rows,
            ),
            "",
            f"Host loss: 3 processes in namespaces tail {cut['events']:,} events arriving at "
            f"{cut['rate']:,.0f}/s; host 2's link is cut {cut['cut_at_s']:g} s in.",
            "",
            table(
                ["from the cut to", "seconds"],
                [
                    [
                        f"both survivors exited (peer watchdog, {watchdog.PEER_LOST_S:g} s bound)",
                        f"{cut['survivors_exited_s']:.1f}",
                    ],
                    [
                        "the cluster restarted as 2 processes shows progress",
                        f"{cut['restart_first_progress_s']:.1f}",
                    ],
                    ["every record counted (caught up)", f"{cut['cut_to_caught_up_s']:.1f}"],
                ],
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run both measurements; exit 1 when a check fails (the doc left alone), 2 without root."""
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the ingest runs (medians)")
    parser.add_argument("--rate", type=float, default=3000.0, help="events/s of the host-loss run")
    parser.add_argument("--feed-seconds", type=float, default=30.0)
    parser.add_argument("--cut-at", type=float, default=10.0)
    parser.add_argument("--no-doc", action="store_true", help="leave docs/BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    why = unavailable()
    if why:
        print(f"bench.fleet: error: {why}", file=sys.stderr)
        return 2
    given = argv if argv is not None else sys.argv[1:]
    command = "python -m bench.fleet" + "".join(f" {a}" for a in given if a != "--no-doc")
    with fleet() as f:
        topic = f.topic(f"bench-fleet-{run_id()}")
        log(f"producing {args.events:,} events")
        expected = produce(f, topic, args.events)
        # Rounds alternate which placement goes first, so neither always runs warm.
        runs = [
            {**ingest_run(f, topic, expected, n, placement), "round": r}
            for r in range(args.repeat)
            for n in (1, 2, 3)
            for placement in (PLACEMENTS if r % 2 == 0 else PLACEMENTS[::-1])
        ]
        loss = host_loss(f, args)
    summary = {
        "command": command,
        "machine": machine(),
        "events": args.events,
        "repeat": args.repeat,
        "ingest": runs,
        "host_loss": loss,
    }
    emit(summary)
    failed = [r for r in runs if not r["ok"]]
    codes = loss["survivor_codes"]
    if failed or not loss["exact"] or watchdog.EXIT_PEER_LOST not in codes or 0 in codes:
        log(f"checks failed: {failed or loss}")
        return 1
    if not args.no_doc:
        write_section(SECTION, markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
