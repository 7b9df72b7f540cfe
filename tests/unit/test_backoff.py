"""The retry schedule (domain.backoff) and the loop that follows it (sinks.retry)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from adapters.kafka import is_transient
from domain.backoff import Backoff
from domain.errors import ConfigError, RetryBudgetExceeded, StopRequested
from sinks.retry import STOP_POLL_S, call_with_retry


@pytest.mark.parametrize(
    ("attempt", "elapsed", "draw", "expected"),
    [
        (1, 0.0, 0.0, 0.05),  # half of first_s
        (1, 0.0, 0.999999, 0.1),  # up to first_s
        (2, 0.1, 0.0, 0.1),  # doubles
        (4, 1.0, 0.5, 0.6),  # 0.8 full: 0.4 + 0.2
        (7, 10.0, 0.0, 2.5),  # 6.4 capped at 5.0, half of it
        (50, 20.0, 0.999999, 5.0),  # stays at the cap
        (10_000, 1.0, 0.5, 3.75),  # huge attempt counts do not overflow
        (3, 29.9, 1.0, 0.1),  # never waits past the budget
        (3, 30.0, 0.5, None),  # budget spent: give up
        (1, 31.0, 0.5, None),
    ],
)
def test_schedule(attempt: int, elapsed: float, draw: float, expected: float | None) -> None:
    got = Backoff(budget_s=30).delay(attempt, elapsed, draw)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-5)


def test_a_zero_budget_never_retries() -> None:
    assert Backoff(budget_s=0).delay(1, 0.0, 0.5) is None


@pytest.mark.parametrize(
    "kwargs", [{"budget_s": -1}, {"budget_s": 1, "first_s": 0}, {"budget_s": 1, "first_s": 9}]
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Backoff(**kwargs)


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError):
        Backoff(budget_s=1).delay(0, 0.0, 0.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_retries_transient_errors_until_the_call_succeeds() -> None:
    clock = _Clock()
    failures = iter([ConnectionError("down"), TimeoutError("slow")])
    refreshed: list[int] = []

    def call() -> str:
        for exc in failures:
            clock.now += 1.0  # each failed attempt itself takes a second
            raise exc
        return "ok"

    got = call_with_retry(
        call,
        what="probe",
        policy=Backoff(budget_s=60),
        transient=(ConnectionError, TimeoutError),
        setting="LB_TEST",
        after_failure=lambda: refreshed.append(1),
        clock=clock,
        sleep=clock.sleep,
        draw=lambda: 0.0,
    )
    assert got == "ok"
    assert clock.slept == pytest.approx([0.05, 0.1])
    assert len(refreshed) == 2


@pytest.mark.parametrize("spent_before", [None, 8.0])
def test_gives_up_loudly_when_the_budget_is_spent(spent_before: float | None) -> None:
    """The first failure starts the 10 s budget, or ``failed_since`` when the
    same work already failed before the call (``spent_before`` seconds)."""
    clock = _Clock()
    calls = 0

    def call() -> None:
        nonlocal calls
        calls += 1
        clock.now += 2.0
        raise ConnectionError("refused")

    with pytest.raises(RetryBudgetExceeded, match=r"LB_TEST=10.*refused") as info:
        call_with_retry(
            call,
            what="probe",
            policy=Backoff(budget_s=10, cap_s=1.0),
            transient=(ConnectionError,),
            setting="LB_TEST",
            clock=clock,
            sleep=clock.sleep,
            draw=lambda: 0.5,
            failed_since=None if spent_before is None else clock.now - spent_before,
        )
    assert isinstance(info.value.__cause__, ConnectionError)
    if spent_before is None:  # attempts stop once 10 s have passed since the first failure
        assert 3 <= calls <= 6
        assert clock.now - 100.0 - 2.0 >= 10.0
    else:  # 8 s before the call and 2 s in its first attempt: the budget is spent
        assert calls == 1


@pytest.mark.parametrize("failed_before", [None, 4.0])
def test_a_failure_elsewhere_counts_a_first_success_as_a_recovery(
    failed_before: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    """``failed_since``: the work failed before this call (a write that did not
    leave); succeeding at once is a recovery, logged with the time since then.
    Without it a first success is no news."""
    clock = _Clock()
    with caplog.at_level(logging.WARNING, logger="sinks.retry"):
        got = call_with_retry(
            lambda: "ok",
            what="probe",
            policy=Backoff(budget_s=60),
            transient=(ConnectionError,),
            setting="LB_TEST",
            clock=clock,
            failed_since=None if failed_before is None else clock.now - failed_before,
        )
    assert got == "ok"
    if failed_before is None:
        assert "recovered" not in caplog.text
    else:
        assert "probe recovered after 4.0s and 1 retries" in caplog.text


def test_other_errors_pass_through_at_once() -> None:
    def call() -> None:
        raise KeyError("a bug, not an outage")

    with pytest.raises(KeyError):
        call_with_retry(
            call,
            what="probe",
            policy=Backoff(budget_s=60),
            transient=(ConnectionError,),
            setting="LB_TEST",
            sleep=lambda s: pytest.fail("must not wait"),
        )


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (KafkaError._TRANSPORT, True),
        (KafkaError._ALL_BROKERS_DOWN, True),
        (KafkaError.NOT_LEADER_FOR_PARTITION, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
    ],
)
def test_kafka_errors_the_source_rides_out(code: int, transient: bool) -> None:
    assert is_transient(KafkaError(code)) is transient


def test_fatal_kafka_errors_always_stop_the_source() -> None:
    assert not is_transient(KafkaError(KafkaError._TRANSPORT, fatal=True))


def test_permanent_errors_are_not_retried_even_when_they_subclass_a_transient_one() -> None:
    class WrongPassword(ConnectionError):
        pass

    def call() -> None:
        raise WrongPassword("invalid username-password pair")

    with pytest.raises(WrongPassword):
        call_with_retry(
            call,
            what="probe",
            policy=Backoff(budget_s=60),
            transient=(ConnectionError,),
            permanent=(WrongPassword,),
            setting="LB_TEST",
            sleep=lambda s: pytest.fail("must not wait"),
        )


def test_a_stop_request_abandons_the_wait_within_one_poll() -> None:
    # A 300 s budget with long waits: without the stop signal this would wait for minutes.
    clock = _Clock()
    stop_at = clock.now + 1.0

    def call() -> None:
        raise ConnectionError("refused")

    with pytest.raises(StopRequested, match="probe was failing: refused"):
        call_with_retry(
            call,
            what="probe",
            policy=Backoff(budget_s=300, first_s=5.0, cap_s=5.0),
            transient=(ConnectionError,),
            setting="LB_TEST",
            stopping=lambda: clock.now >= stop_at,
            clock=clock,
            sleep=clock.sleep,
            draw=lambda: 1.0,
        )
    assert clock.now - 100.0 == pytest.approx(1.0, abs=STOP_POLL_S + 1e-9)
    assert max(clock.slept) <= STOP_POLL_S
