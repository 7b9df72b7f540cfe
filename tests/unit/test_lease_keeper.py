"""The lease keeper's wiring (``flows.lease``) over a scripted stand-in for the Redis adapter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from domain.errors import Deposed, StopRequested
from domain.lease import Answer, Deployment, Role, Timings
from flows.lease import LeaseKeeper

pytestmark = pytest.mark.unit

OTHER = Deployment("host:other:/s", "other (state dir /s)")


class Scripted:
    """Answers in order (an exception is raised); records epochs asked and releases."""

    def __init__(self, answers: list[Answer | Exception]) -> None:
        self._answers: Iterator[Answer | Exception] = iter(answers)
        self.asked: list[int] = []
        self.released = 0

    def attempt(self, epoch: int, ttl_s: float) -> Answer:
        self.asked.append(epoch)
        got = next(self._answers)
        if isinstance(got, Exception):
            raise got
        return got

    def release(self) -> bool:
        self.released += 1
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keeper(
    answers: list[Answer | Exception], refuse: bool = False
) -> tuple[LeaseKeeper, Scripted, Clock, list[str]]:
    lease, clock = Scripted(answers), Clock()
    deposed: list[str] = []
    kept = LeaseKeeper(
        lease,
        Timings(15),
        refuse=refuse,
        topic="t",
        namespace="lb",
        on_deposed=deposed.append,
        clock=clock,
    )
    return kept, lease, clock, deposed


def test_active_writes_with_its_epoch_renews_with_it_and_releases_on_close() -> None:
    kept, lease, clock, _ = keeper([Answer(True, 7), Answer(True, 7)])
    assert kept.call() == pytest.approx(100.0 + 2.5)
    assert kept.wait_active(lambda: False) is Role.ACTIVE
    assert kept.epoch() == 7
    clock.now += 2.5
    kept.call()
    assert lease.asked == [0, 7]  # a renewal names the epoch it holds
    kept.close()
    kept.close()
    assert lease.released == 1


def test_an_overdue_renewal_holds_writes_until_asked_to_stop() -> None:
    kept, _, clock, _ = keeper([Answer(True, 7), redis.ConnectionError("down")])
    kept.call()
    clock.now += 20.0  # far past the lease: another deployment may hold it now
    kept.call()  # Redis did not answer
    with pytest.raises(StopRequested):
        kept.epoch(stopping=lambda: True)


def test_losing_the_lease_deposes_once_and_refuses_every_later_write() -> None:
    kept, lease, clock, deposed = keeper([Answer(True, 7), Answer(False, 8, holder=OTHER)])
    kept.call()
    clock.now += 12.0
    kept.call()
    assert kept.state.role is Role.DEPOSED
    assert len(deposed) == 1 and "other (state dir /s) took over" in deposed[0]
    with pytest.raises(Deposed, match="deposed"):
        kept.epoch()
    kept.close()
    assert lease.released == 0  # not ours to release


def test_refuse_policy_ends_the_wait_as_refused() -> None:
    kept, _, _, _ = keeper([Answer(False, 3, holder=OTHER)], refuse=True)
    kept.call()
    assert kept.wait_active(lambda: False) is Role.REFUSED
    assert "LB_STANDBY=refuse" in kept.describe()


def test_a_standby_asked_to_stop_stops_waiting() -> None:
    kept, _, _, _ = keeper([Answer(False, 3, holder=OTHER)])
    kept.call()
    assert kept.state.role is Role.STANDBY
    assert kept.wait_active(lambda: True) is Role.STANDBY
