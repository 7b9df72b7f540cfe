"""The job's own watchdog: a process of a Bytewax cluster that lost a peer ends itself.

A Bytewax cluster whose peer vanished silently (a cut link, a host that lost
power: no closed socket, no reset) never fails by itself: each process keeps
reading and writing its own partitions, but the cluster's epochs stop closing
(no snapshot is ever written again) and the lost peer's partitions are read by
no one, while TCP waits many minutes before it gives up on a silent peer.

So every process of a tailing job started with ``-a`` (two or more
addresses) asks, once a second, whether each peer's host still answers a TCP
connect on the peer's cluster address: a refused connection answers (the host
is there; a process that died is Bytewax's own business: its peers fail at
once), a connect that times out or finds no route does not. A peer silent for
:data:`PEER_LOST_S` makes the process print one line naming it and exit with
:data:`EXIT_PEER_LOST` (no clean stop is possible: the dataflow cannot finish
an epoch), so a supervisor restarts the cluster, or the operator restarts it
without the lost host (a stop-start rescale from the recovery stores; the
Redis watermarks keep every effect exactly once across it).

Probing starts with the first batch or tick the process hands its sinks:
by then the cluster's connections are made and its listeners closed, so a
probe never meets a handshake in progress.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence

from telemetry import hooks

#: How long a peer may stay unreachable before this process gives up on the cluster.
PEER_LOST_S = 10.0
#: Seconds between two rounds of probes (each connect waits at most this long).
PROBE_EVERY_S = 1.0
#: The exit status of a process that gave up on a lost peer.
EXIT_PEER_LOST = 3

#: Connect errors that mean "the host answered" (it refused, or reset).
_ANSWERED = {errno.ECONNREFUSED, errno.ECONNRESET}


def cluster_args(argv: Sequence[str]) -> tuple[int | None, list[str]]:
    """(process id ``-i``, addresses ``-a``) of a ``bytewax.run`` command line."""
    process: int | None = None
    addresses: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        flag, _, inline = arg.partition("=")
        value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
        if flag in ("-i", "--process-id") and value.isdigit():
            process = int(value)
        elif flag in ("-a", "--addresses") and value:
            addresses = [a.strip() for a in value.split(";") if a.strip()]
    return process, addresses


def answers(address: str, timeout_s: float = PROBE_EVERY_S) -> bool:
    """True when the host of ``host:port`` answers a TCP connect (accepted or refused)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError as exc:
        return exc.errno in _ANSWERED


class PeerWatch:
    """Which peers have been silent since when; :meth:`lost` names one silent too long."""

    def __init__(self, peers: dict[int, str], lost_after_s: float) -> None:
        self.peers = peers
        self.lost_after_s = lost_after_s
        self.silent_since: dict[int, float] = {}

    def observe(self, peer: int, answered: bool, now: float) -> None:
        if answered:
            self.silent_since.pop(peer, None)
        else:
            self.silent_since.setdefault(peer, now)

    def lost(self, now: float) -> tuple[int, float] | None:
        """(peer, seconds silent) of a peer silent for ``lost_after_s`` or more."""
        for peer, since in sorted(self.silent_since.items()):
            if now - since >= self.lost_after_s:
                return peer, now - since
        return None


def start(
    flow: str,
    argv: Sequence[str] | None = None,
    lost_after_s: float = PEER_LOST_S,
    probe: Callable[[str], bool] = answers,
) -> threading.Thread | None:
    """Watch this process's peers from a daemon thread; ``None`` when it has none."""
    process, addresses = cluster_args(sys.argv if argv is None else argv)
    if process is None or len(addresses) < 2:
        return None
    peers = {i: a for i, a in enumerate(addresses) if i != process}
    watch = PeerWatch(peers, lost_after_s)
    thread = threading.Thread(
        target=_run,
        args=(flow, process, len(addresses), watch, probe),
        name="lb-peer-watchdog",
        daemon=True,
    )
    thread.start()
    return thread


def _run(
    flow: str, process: int, size: int, watch: PeerWatch, probe: Callable[[str], bool]
) -> None:
    while hooks.last_activity() is None:
        time.sleep(PROBE_EVERY_S)
    while True:
        began = time.monotonic()
        for peer, address in watch.peers.items():
            watch.observe(peer, probe(address), time.monotonic())
        lost = watch.lost(time.monotonic())
        if lost is not None:
            peer, silent = lost
            print(
                f"{flow}: error: peer process {peer} of this {size}-process cluster "
                f"({watch.peers[peer]}) has not answered for {silent:.0f}s; process {process} "
                f"exits {EXIT_PEER_LOST} so the cluster can be restarted (with or without "
                "that host: the recovery stores and the Redis watermarks keep effects exact)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(EXIT_PEER_LOST)
        time.sleep(max(0.0, PROBE_EVERY_S - (time.monotonic() - began)))
