"""The peer watchdog's pure parts: its command line, its clock, its probe."""

from __future__ import annotations

import socket

import pytest

from telemetry import watchdog

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-m", "bytewax.run", "f:build()"], (None, [])),
        (["x", "-i", "1", "-a", "h0:1;h1:2"], (1, ["h0:1", "h1:2"])),
        (["x", "--process-id=2", "--addresses=a:1; b:2 ;c:3;"], (2, ["a:1", "b:2", "c:3"])),
        (["x", "-a", "h0:1", "-i"], (None, ["h0:1"])),
    ],
)
def test_cluster_args(argv: list[str], expected: tuple[int | None, list[str]]) -> None:
    assert watchdog.cluster_args(argv) == expected


def test_a_peer_is_lost_only_after_a_silence_as_long_as_the_bound() -> None:
    watch = watchdog.PeerWatch({1: "h1:1", 2: "h2:2"}, lost_after_s=10.0)
    watch.observe(2, False, now=100.0)
    watch.observe(1, True, now=100.0)
    assert watch.lost(109.9) is None
    watch.observe(2, True, now=105.0)  # it answered again: the silence starts over
    watch.observe(2, False, now=106.0)
    assert watch.lost(115.0) is None
    assert watch.lost(116.0) == (2, 10.0)


def test_no_watch_without_peers() -> None:
    assert watchdog.start("f", argv=["x"]) is None
    assert watchdog.start("f", argv=["x", "-i", "0", "-a", "h0:1"]) is None


def test_a_refused_connect_is_an_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connects are refused
        assert watchdog.answers(f"127.0.0.1:{port}")
        s.listen()
        assert watchdog.answers(f"127.0.0.1:{port}")
