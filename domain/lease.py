"""One deployment per projection: the lease's decisions, every time passed in.

A projection (one topic written into one key namespace) is written by one
deployment at a time: one Bytewax cluster, on one host or several. Each
deployment's processes try to hold a lease in Redis; the holder is *active*,
any other deployment waits as a *standby* (or, configured so, refuses to
start). The lease lasts ``ttl_s`` and the active deployment renews it every
``renew_every_s``; a standby asks every ``poll_s``, so it takes over within
``ttl_s + poll_s`` (under ``LB_TAKEOVER_S``) of the active one dying, and at
its next poll when the active one stops and releases it.

Every acquisition takes a new *epoch* (a counter in Redis). The group-write
script refuses a write whose epoch is below the one the group last saw, so a
deployment that lost its turn (paused, cut off) cannot write a group its
successor has written. Locally, a holder stops writing at ``valid_until``
(when it asked plus ``ttl_s``, less a margin) unless a renewal came back: the
successor can only hold the lease after that instant.

This module only decides; ``sinks.redis_lease`` talks to Redis and
``flows.lease`` runs the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

#: Share of the lease a holder trusts locally (clock rates differ a little).
TRUST = 0.9

LOOPBACK_PREFIXES = ("127.", "localhost", "[::1]")


@dataclass(frozen=True)
class Deployment:
    """Who holds a lease: ``id`` is the same on every process of one deployment."""

    id: str
    #: Its hosts, for people (start lines, ``/readyz``, logs).
    where: str


def host_of(address: str) -> str:
    """The host part of a ``host:port`` address."""
    return address.rpartition(":")[0]


def is_loopback(host: str) -> bool:
    """True for an address only this host can reach."""
    return host.startswith(LOOPBACK_PREFIXES)


def deployment_of(
    addresses: Sequence[str], hostname: str, state_dir: str, *, explicit: bool = False
) -> Deployment:
    """The deployment a process belongs to.

    Processes of a cluster named by hand (``--addresses``/``LB_ADDRESSES``:
    ``explicit``, or any address off loopback) share their address list, which
    no other deployment can have (its ports are theirs). A deployment that
    ``--processes N`` started on one host (loopback ports picked at start) is
    that host and its state directory: a restart there after a crash is the
    same deployment and takes its lease back at once instead of waiting for it
    to expire.
    """
    hosts = list(dict.fromkeys(host_of(a) for a in addresses))
    if hosts and (explicit or not all(is_loopback(h) for h in hosts)):
        return Deployment("cluster:" + ";".join(addresses), ", ".join(hosts))
    return Deployment(f"host:{hostname}:{state_dir}", f"{hostname} (state dir {state_dir})")


@dataclass(frozen=True)
class Timings:
    """The lease's clock, all derived from ``LB_TAKEOVER_S``."""

    takeover_s: float

    @property
    def ttl_s(self) -> float:
        """How long a lease lasts without renewal."""
        return self.takeover_s * 2 / 3

    @property
    def renew_every_s(self) -> float:
        """How often the holder renews (four tries before it would expire)."""
        return self.ttl_s / 4

    @property
    def poll_s(self) -> float:
        """How often a standby asks."""
        return min(1.0, self.takeover_s / 10)


class Role(StrEnum):
    """Where a deployment stands."""

    STARTING = "starting"
    ACTIVE = "active"
    STANDBY = "standby"
    #: Lost its turn while active: stops, never writes again.
    DEPOSED = "deposed"
    #: Found another deployment active and was configured to refuse (``LB_STANDBY=refuse``).
    REFUSED = "refused"


@dataclass(frozen=True)
class Answer:
    """What Redis answered one acquire-or-renew call."""

    held: bool
    epoch: int = 0
    #: The deployment holding the lease, when it is not us.
    holder: Deployment | None = None
    #: The lease was free but another deployment held it after our epoch: our turn ended.
    lost: bool = False


@dataclass(frozen=True)
class LeaseState:
    """A deployment's view of the lease (one per process)."""

    role: Role = Role.STARTING
    #: Our epoch while active (kept when deposed, for the log line).
    epoch: int = 0
    #: Monotonic seconds until which no other deployment can hold the lease.
    valid_until: float = 0.0
    #: The active deployment (standby, refused) or the one that took over (deposed).
    other: Deployment | None = None
    #: When the role began (monotonic seconds).
    since: float = 0.0


def step(
    state: LeaseState,
    answer: Answer | None,
    *,
    asked_at: float,
    now: float,
    timings: Timings,
    refuse: bool,
) -> LeaseState:
    """The state after one call that left at ``asked_at`` and came back at ``now``.

    ``answer`` is None when Redis did not answer: nothing changes (a holder's
    ``valid_until`` runs out by itself, so it stops writing until a renewal
    comes back). Deposed and refused are final.
    """
    if state.role in (Role.DEPOSED, Role.REFUSED) or answer is None:
        return state
    active = state.role is Role.ACTIVE
    if answer.held and not (active and answer.epoch != state.epoch):
        return LeaseState(
            Role.ACTIVE,
            answer.epoch,
            asked_at + timings.ttl_s * TRUST,
            None,
            state.since if active else now,
        )
    if active:
        return LeaseState(Role.DEPOSED, state.epoch, 0.0, answer.holder, now)
    if answer.lost or answer.held:  # cannot happen to a deployment that never held it
        return state
    if state.role is Role.STARTING and refuse:
        return LeaseState(Role.REFUSED, 0, 0.0, answer.holder, now)
    since = state.since if state.role is Role.STANDBY else now
    return LeaseState(Role.STANDBY, 0, 0.0, answer.holder, since)


def writable(state: LeaseState, now: float) -> bool:
    """True while this deployment may write: active, and the lease surely still ours."""
    return state.role is Role.ACTIVE and now < state.valid_until


def next_call_at(state: LeaseState, asked_at: float, timings: Timings) -> float:
    """When to call again after the call that left at ``asked_at``."""
    if state.role is Role.ACTIVE:
        return asked_at + timings.renew_every_s
    return asked_at + timings.poll_s


def projection(topic: str, namespace: str) -> str:
    """How a projection is named in lines for people."""
    return f"{topic!r} -> namespace {namespace!r}"


def describe(state: LeaseState, topic: str, namespace: str, timings: Timings) -> str:
    """One line saying where this deployment stands."""
    what = projection(topic, namespace)
    other = state.other.where if state.other is not None else "another deployment"
    if state.role is Role.ACTIVE:
        return f"active: this deployment writes {what} (epoch {state.epoch})"
    if state.role is Role.STANDBY:
        return (
            f"standby: the deployment on {other} writes {what}; this one takes over within "
            f"{timings.takeover_s:g} s (LB_TAKEOVER_S) of it stopping or dying"
        )
    if state.role is Role.DEPOSED:
        return (
            f"deposed: the deployment on {other} took over {what} after this one (epoch "
            f"{state.epoch}) missed renewing its lease; its writes are refused, stopping"
        )
    if state.role is Role.REFUSED:
        return (
            f"the deployment on {other} already writes {what}; LB_STANDBY=refuse: not starting "
            "a second one (LB_STANDBY=wait makes this one its standby)"
        )
    return f"starting: asking for the lease of {what}"


def lease_keys(namespace: str, topic: str) -> tuple[str, str]:
    """The lease hash and the epoch counter of one projection (one slot on a cluster)."""
    tag = f"{namespace}:{{@lease/{topic}}}:"
    return tag + "holder", tag + "epoch"


def fence_key(watermark_key: str, topic: str) -> str:
    """The key of a board group holding the last epoch that wrote ``topic`` there.

    Beside the group's watermarks, in its slot: ``<ns>:{<tag>}:meta:fence:<topic>``.
    """
    prefix = watermark_key[: -len("meta:wm")]
    return f"{prefix}meta:fence:{topic}"
