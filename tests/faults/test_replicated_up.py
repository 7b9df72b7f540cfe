"""``lb up --replicated``: three brokers and a Redis Cluster with replicas, each on a
loopback address of its own; idempotent; ``lb status`` shows leaders, in-sync
replicas and Redis roles; ``lb down`` stops them.

Private everything: a state directory of its own, the single-node services on
ports of their own and the replicated set from 127.0.0.202 (the fault suite
runs under the heavy lock, one at a time).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from infra.process import pid_alive
from tests.integration.streams import lb

pytestmark = pytest.mark.timeout(420)

FIRST = "127.0.0.202"
UP = ["up", "--replicated", "--replicated-from", FIRST, "--kafka-port", "28492"]


def _status(env: dict[str, str]) -> dict[str, Any]:
    done = lb(["status", "--json", "--interval", "0"], env, timeout=60)
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_up_replicated_status_and_down(tmp_path: Path) -> None:
    from config.settings import Settings

    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    cache = Settings.from_env().cache_dir
    env.update(LB_STATE_DIR=str(tmp_path / "state"), LB_CACHE_DIR=str(cache))
    up = lb([*UP, "--redis-port", "28579", "--json"], env, timeout=300)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        doc = json.loads(up.stdout)["replicated"]
        assert [b["address"] for b in doc["brokers"]] == [
            f"127.0.0.{i}:29192" for i in (202, 203, 204)
        ]
        roles = sorted(n["role"] for n in doc["redis_nodes"])
        assert roles == ["master"] * 3 + ["replica"] * 3, doc["redis_nodes"]
        assert all(n.get("link", "up") == "up" for n in doc["redis_nodes"])
        pids = json.loads((tmp_path / "state" / "services.json").read_text())["replicated"]

        # Every topic gets 3 replicas, the internal ones too; min.insync.replicas is 2.
        bootstrap = doc["bootstrap"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", num_partitions=3)])["t"].result(timeout=60)
        broker = ConfigResource(ConfigResource.Type.BROKER, "1")
        config = admin.describe_configs([broker])[broker].result(timeout=30)
        assert config["min.insync.replicas"].value == "2"
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce("t", b"v", key=b"k")
        assert producer.flush(60) == 0
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["t"])
        assert consumer.consume(1, timeout=60)
        consumer.commit(asynchronous=False)
        consumer.close()

        again = lb([*UP, "--json"], env, timeout=300)  # idempotent: nothing restarted
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads((tmp_path / "state" / "services.json").read_text())["replicated"] == pids

        status = _status(env)["replicated"]
        for topic in ("t", "__consumer_offsets"):
            for part in status["topics"][topic]:
                assert sorted(part["replicas"]) == [1, 2, 3], (topic, part)
                assert sorted(part["isr"]) == [1, 2, 3], (topic, part)
                assert part["leader"] in (1, 2, 3)
        human = lb(["status", "--interval", "0"], env, timeout=60).stdout
        assert "replicated     up" in human and "t: p0 leader" in human, human
        assert "replica of 127.0.0." in human, human
    finally:
        down = lb(["down"], env, timeout=300)
    assert down.returncode == 0, down.stderr[-3000:]
    assert not any(pid_alive(p) for p in pids["kafka_pids"] + pids["redis_pids"])
    assert "replicated" not in _status(env)
