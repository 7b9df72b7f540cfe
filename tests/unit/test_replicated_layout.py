"""The replicated services' layout: addresses, the KRaft quorum, the CLI's address check."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import replicated
from lb.cli import main

pytestmark = pytest.mark.unit


def test_each_server_has_an_address_of_its_own(tmp_path: Path) -> None:
    layout = replicated.ReplicatedLayout.on(tmp_path, "127.0.0.2")
    assert layout.kafka_hosts == ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    assert layout.redis_hosts == tuple(f"127.0.0.{i}" for i in range(5, 11))
    assert layout.bootstrap == "127.0.0.2:29192,127.0.0.3:29192,127.0.0.4:29192"
    assert layout.redis_url == "redis://127.0.0.5:17201"
    brokers = layout.brokers()
    assert [b.node_id for b in brokers] == [1, 2, 3]
    assert {b.quorum for b in brokers} == {"1@127.0.0.2:29193,2@127.0.0.3:29193,3@127.0.0.4:29193"}
    assert all(b.replication == 3 for b in brokers)
    assert [n.address for n in layout.redis_nodes()] == [f"127.0.0.{i}:17201" for i in range(5, 11)]


def test_the_cluster_id_is_drawn_once(tmp_path: Path) -> None:
    layout = replicated.ReplicatedLayout.on(tmp_path, "127.0.0.2")
    assert layout.cluster_id() == layout.cluster_id()


@pytest.mark.parametrize("address", ["foo", "10.0.0.1", "127.0.0.1", "127.255.255.250"])
def test_a_bad_first_address_is_one_line_and_exit_2(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["up", "--replicated", "--replicated-from", address])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--replicated-from" in err and len(err.splitlines()) == 1, err
