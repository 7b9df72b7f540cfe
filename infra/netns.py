"""Hosts on one machine: Linux network namespaces on a bridge, cut off as a network would.

:class:`Network` makes a bridge in the root namespace (its own addresses are
where the services listen) and one namespace per host, each joined to the
bridge by a veth pair; a process started with :meth:`Host.argv` runs "on" that
host and reaches the others and the services only across the bridge.
Faults:

- :meth:`Host.cut` takes the host's end of its veth down: every packet to and
  from the namespace is lost, with no reset and no closed socket (the host
  lost its link); :meth:`Host.reconnect` brings it back;
- :meth:`Network.partition` drops the traffic between two addresses with
  iptables rules in a chain of its own (both directions), :meth:`Network.heal`
  removes them.

Used by the fault suite (``tests/faults/fleet.py``) and ``bench.fleet``.
Everything has a fixed name (``lbf`` prefix): both run under the heavy lock,
one at a time. :meth:`Network.close` removes the namespaces, the
bridge and the rules, and :meth:`Network.open` first removes whatever an
earlier run that was killed left behind. Needs root (``ip``, ``iptables``);
:func:`unavailable` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

PREFIX = "lbf"
SUBNET = "10.231.0"
BRIDGE = f"{PREFIX}br0"
#: Bridge addresses .2 .. .(2 + services - 1) are the services'; hosts start at .20.
FIRST_HOST = 20
CHAIN = "LBFAULTS"
_HOOKS = ("INPUT", "OUTPUT", "FORWARD")
_BRIDGED = ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")


def unavailable() -> str | None:
    """Why this machine cannot run hosts in namespaces (``None``: it can)."""
    if os.geteuid() != 0:
        return "network namespaces, veth pairs and iptables rules need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (scripts/bootstrap.sh installs it as root)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Host:
    """One namespace on the bridge: its name, its address, its veth's bridge end."""

    index: int

    @property
    def name(self) -> str:
        return f"{PREFIX}h{self.index}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{FIRST_HOST + self.index}"

    @property
    def link(self) -> str:
        """The veth end on the bridge side (root namespace)."""
        return f"{PREFIX}v{self.index}"

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """The host loses its link: packets vanish both ways, no socket is told."""
        _run("ip", "link", "set", self.link, "down")

    def reconnect(self) -> None:
        _run("ip", "link", "set", self.link, "up")

    def _create(self) -> None:
        inside = f"{PREFIX}i{self.index}"
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self.link, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", self.name)
        _run("ip", "link", "set", self.link, "master", BRIDGE, "up")
        ns = ["ip", "-n", self.name]
        _run(*ns, "addr", "add", f"{self.address}/24", "dev", inside)
        _run(*ns, "link", "set", inside, "up")
        _run(*ns, "link", "set", "lo", "up")  # a new namespace's loopback starts down


class Network:
    """A bridge with ``services`` addresses of its own and ``hosts`` namespaces on it."""

    def __init__(self, hosts: int, services: int) -> None:
        self.hosts = [Host(i) for i in range(hosts)]
        self.service_addresses = [f"{SUBNET}.{2 + i}" for i in range(services)]
        self._rules: list[list[str]] = []

    def open(self) -> Network:
        self.close()  # whatever a killed run left behind
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        for address in self.service_addresses:
            _run("ip", "addr", "add", f"{address}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for host in self.hosts:
            host._create()
        # Bridged frames pass the FORWARD chain when br_netfilter is loaded:
        # accept the bridge's own traffic whatever the default policy is, after
        # the partitions' chain (hooked everywhere a packet between two of our
        # addresses passes: host to host, host to service, service to service).
        _run("iptables", "-I", "FORWARD", *_BRIDGED)
        _run("iptables", "-N", CHAIN)
        for hook in _HOOKS:
            _run("iptables", "-I", hook, "-j", CHAIN)
        return self

    def partition(self, a: str, b: str) -> None:
        """Drop every packet between addresses ``a`` and ``b`` (both directions)."""
        for src, dst in ((a, b), (b, a)):
            rule = ["-s", src, "-d", dst, "-j", "DROP"]
            _run("iptables", "-I", CHAIN, *rule)
            self._rules.append(rule)

    def heal(self) -> None:
        """Remove every partition."""
        while self._rules:
            _run("iptables", "-D", CHAIN, *self._rules.pop(), check=False)

    def close(self) -> None:
        """Remove the namespaces, the bridge (and its addresses) and the rules."""
        self._rules.clear()
        for hook in _HOOKS:
            while _run("iptables", "-D", hook, "-j", CHAIN, check=False).returncode == 0:
                pass
        while _run("iptables", "-D", "FORWARD", *_BRIDGED, check=False).returncode == 0:
            pass
        _run("iptables", "-F", CHAIN, check=False)
        _run("iptables", "-X", CHAIN, check=False)
        listed = _run("ip", "netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith(f"{PREFIX}h"):
                _run("ip", "netns", "del", name, check=False)
        links = _run("ip", "-o", "link", "show", check=False).stdout.splitlines()
        for line in links:
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            if name.startswith(f"{PREFIX}v") or name == BRIDGE:
                _run("ip", "link", "del", name, check=False)


@contextlib.contextmanager
def network(hosts: int, services: int) -> Iterator[Network]:
    """A :class:`Network`, removed on the way out whatever happened."""
    net = Network(hosts, services)
    try:
        yield net.open()
    finally:
        net.close()
