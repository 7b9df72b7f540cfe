"""The projection lease, kept by a thread in every job process (decisions: ``domain.lease``).

:func:`start` begins asking Redis for the lease of (``LB_TOPIC``,
namespace). The flow factory then waits in :meth:`LeaseKeeper.wait_active`:
at once when this deployment holds it, as a hot standby (checked, connected,
serving ``/readyz`` with the active deployment's hosts) while another does,
or exits 2 with one line when ``LB_STANDBY=refuse``. While the job runs, the
board sink takes the epoch of every group write from :meth:`LeaseKeeper.epoch`;
a deposed deployment logs why and stops. A clean stop releases the lease, so
a standby takes over at its next poll instead of after the lease expires.
"""

from __future__ import annotations

import atexit
import logging
import socket
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisClusterException

from adapters.redis import RedisClient
from config.clients import redis_client
from config.settings import Settings
from domain import lease as decide
from domain.errors import Deposed, StopRequested
from domain.lease import Deployment, LeaseState, Role, Timings
from sinks.redis_lease import RedisLease
from telemetry import hooks

#: A lease call Redis did not answer: the keeper asks again (its state decides
#: what that means). A cluster whose every node is unreachable raises
#: ``RedisClusterException``, which is not a ``RedisError``: uncaught, it ended
#: the keeper's thread and left a cut-off deployment believing it was active.
UNANSWERED: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)

log = logging.getLogger("flows.lease")

#: Same-kind lease errors (Redis unreachable) are logged at most this often.
ERROR_LOG_S = 10.0

#: How often a writer waiting for a renewal looks again.
WAIT_STEP_S = 0.05


def client(settings: Settings) -> RedisClient:
    """A Redis client whose calls give up well inside a lease's lifetime."""
    wait_s = min(float(settings.redis_timeout_s), Timings(settings.takeover_s).renew_every_s)
    return redis_client(settings, socket_timeout=wait_s, socket_connect_timeout=wait_s)


def deployment(settings: Settings, addresses: tuple[str, ...]) -> Deployment:
    """The deployment of this process (``addresses``: its ``bytewax.run -a`` list)."""
    return decide.deployment_of(
        addresses,
        socket.gethostname(),
        str(settings.state_dir),
        explicit=bool(settings.addresses),
    )


class LeaseKeeper:
    """Asks for, renews and releases one deployment's lease; thread-safe."""

    def __init__(
        self,
        lease: RedisLease,
        timings: Timings,
        *,
        refuse: bool,
        topic: str,
        namespace: str,
        on_deposed: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lease = lease
        self._timings = timings
        self._refuse = refuse
        self._topic = topic
        self._namespace = namespace
        self._on_deposed = on_deposed
        self._clock = clock
        self._state = LeaseState(since=clock())
        self._changed = threading.Condition()
        self._closed = threading.Event()
        self._last_error = -ERROR_LOG_S

    @property
    def state(self) -> LeaseState:
        with self._changed:
            return self._state

    def describe(self, state: LeaseState | None = None) -> str:
        """The line saying where this deployment stands."""
        return decide.describe(state or self.state, self._topic, self._namespace, self._timings)

    def call(self) -> float:
        """Ask Redis once and take the answer in; when to call next."""
        asked = self._clock()
        try:
            answer = self._lease.attempt(self.state.epoch, self._timings.ttl_s)
        except UNANSWERED as exc:
            answer = None
            if asked - self._last_error >= ERROR_LOG_S:
                self._last_error = asked
                log.warning("deployment lease: Redis did not answer (%s); asking again", exc)
        now = self._clock()
        with self._changed:
            before = self._state
            after = self._state = decide.step(
                before, answer, asked_at=asked, now=now, timings=self._timings, refuse=self._refuse
            )
            self._changed.notify_all()
        if after.role is not before.role:
            self._announce(before, after)
        return decide.next_call_at(after, asked, self._timings)

    def _announce(self, before: LeaseState, state: LeaseState) -> None:
        line = self.describe(state)
        hooks.lease(str(state.role), line if state.role is Role.STANDBY else None)
        if state.role is Role.DEPOSED:
            log.error("%s", line)
            self._on_deposed(line)
        elif state.role is Role.ACTIVE and before.role is Role.STANDBY:
            gone = before.other.where if before.other is not None else "another host"
            log.warning("took over from the deployment on %s; %s", gone, line)
        elif state.role is Role.STANDBY:
            log.warning("%s", line)
        else:
            log.info("%s", line)

    def _run(self) -> None:
        while not self._closed.is_set():
            at = self.call()
            if self.state.role in (Role.DEPOSED, Role.REFUSED):
                return
            self._closed.wait(max(0.0, at - self._clock()))

    def start(self) -> None:
        """Keep the lease from a daemon thread; release it when the process exits."""
        threading.Thread(target=self._run, name="lb-lease", daemon=True).start()
        atexit.register(self.close)

    def wait_active(self, stopping: Callable[[], bool]) -> Role:
        """Block until this deployment is active, refused, or asked to stop."""
        with self._changed:
            while self._state.role in (Role.STARTING, Role.STANDBY) and not stopping():
                self._changed.wait(0.2)
            return self._state.role

    def epoch(self, stopping: Callable[[], bool] = lambda: False) -> int:
        """The epoch to write with; waits while a renewal is overdue.

        Raises :class:`Deposed` once another deployment took over, and
        :class:`StopRequested` when the job is asked to stop meanwhile.
        """
        with self._changed:
            while True:
                state = self._state
                if decide.writable(state, self._clock()):
                    return state.epoch
                if state.role is Role.DEPOSED:
                    raise Deposed(self.describe(state))
                if stopping():
                    raise StopRequested("stopping while the deployment lease is not renewed")
                self._changed.wait(WAIT_STEP_S)

    def close(self) -> None:
        """Stop asking; give the lease up if this deployment holds it (a clean stop)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self.state.role is Role.ACTIVE and self._lease.release():
            log.info("deployment lease released: a standby takes over at its next poll")


def start(
    settings: Settings,
    client: RedisClient,
    namespace: str,
    addresses: tuple[str, ...],
    on_deposed: Callable[[str], None],
) -> LeaseKeeper:
    """Start keeping the lease of (``LB_TOPIC``, ``namespace``) for this process's deployment."""
    me = deployment(settings, addresses)
    keeper = LeaseKeeper(
        RedisLease(client, namespace, settings.topic, me),
        Timings(settings.takeover_s),
        refuse=settings.standby == "refuse",
        topic=settings.topic,
        namespace=namespace,
        on_deposed=on_deposed,
    )
    keeper.start()
    return keeper
