"""The projection lease's decisions (``domain.lease``): every time is an argument."""

from __future__ import annotations

import pytest

from domain.lease import (
    Answer,
    Deployment,
    LeaseState,
    Role,
    Timings,
    deployment_of,
    describe,
    fence_key,
    lease_keys,
    next_call_at,
    step,
    writable,
)

pytestmark = pytest.mark.unit

T = Timings(15)
OTHER = Deployment("cluster:10.0.0.1:2101;10.0.0.2:2101", "10.0.0.1, 10.0.0.2")


def go(state: LeaseState, answer: Answer | None, at: float, *, refuse: bool = False) -> LeaseState:
    return step(state, answer, asked_at=at, now=at + 0.01, timings=T, refuse=refuse)


def test_timings_fit_inside_the_takeover_bound() -> None:
    assert T.ttl_s == 10 and T.renew_every_s == 2.5 and T.poll_s == 1.0
    # A standby notices an expired lease within ttl + poll: inside LB_TAKEOVER_S.
    assert T.ttl_s + T.poll_s < T.takeover_s
    assert Timings(3).poll_s == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("addresses", "expected_id", "where"),
    [
        ((), "host:h1:/srv/lb", "h1 (state dir /srv/lb)"),
        (("127.0.0.1:4000", "127.0.0.1:4001"), "host:h1:/srv/lb", "h1 (state dir /srv/lb)"),
        (
            ("10.0.0.1:2101", "10.0.0.2:2101", "10.0.0.1:2102"),
            "cluster:10.0.0.1:2101;10.0.0.2:2101;10.0.0.1:2102",
            "10.0.0.1, 10.0.0.2",
        ),
        (("[fd00::1]:2101", "[fd00::2]:2101"), "cluster:[fd00::1]:2101;[fd00::2]:2101", None),
    ],
)
def test_a_deployment_is_its_address_list_or_its_host_and_state_dir(
    addresses: tuple[str, ...], expected_id: str, where: str | None
) -> None:
    got = deployment_of(addresses, "h1", "/srv/lb")
    assert got.id == expected_id
    if where is not None:
        assert got.where == where
    # Every process of a cluster over hosts computes the same identity, whatever its
    # host; one on a single host is that host and its state directory.
    same = deployment_of(addresses, "h2", "/other").id == got.id
    assert same == expected_id.startswith("cluster:")


def test_a_cluster_named_by_hand_is_one_deployment_even_on_loopback() -> None:
    addresses = ("127.0.0.1:2101", "127.0.0.1:2102")
    one = deployment_of(addresses, "h1", "/srv/a", explicit=True)
    two = deployment_of(addresses, "h1", "/srv/b", explicit=True)
    assert one == two and one.id == "cluster:127.0.0.1:2101;127.0.0.1:2102"


def test_first_holder_becomes_active_and_trusts_the_lease_less_than_its_ttl() -> None:
    state = go(LeaseState(), Answer(held=True, epoch=4), at=100.0)
    assert (state.role, state.epoch) == (Role.ACTIVE, 4)
    assert writable(state, 100.0 + T.ttl_s * 0.85)
    assert not writable(state, 100.0 + T.ttl_s * 0.95)  # a renewal is overdue: stop writing
    assert next_call_at(state, 100.0, T) == 100.0 + T.renew_every_s


def test_a_renewal_moves_the_deadline_from_when_it_was_asked() -> None:
    state = go(LeaseState(), Answer(held=True, epoch=1), at=0.0)
    state = go(state, Answer(held=True, epoch=1), at=2.5)
    assert state.valid_until == pytest.approx(2.5 + T.ttl_s * 0.9)
    assert state.since == pytest.approx(0.01)  # still the same term


def test_no_answer_changes_nothing_and_the_deadline_runs_out() -> None:
    active = go(LeaseState(), Answer(held=True, epoch=1), at=0.0)
    assert go(active, None, at=5.0) == active
    assert not writable(active, 9.5)


def test_second_deployment_waits_as_standby_naming_the_active_one() -> None:
    state = go(LeaseState(), Answer(held=False, epoch=3, holder=OTHER), at=0.0)
    assert (state.role, state.other) == (Role.STANDBY, OTHER)
    assert not writable(state, 0.0)
    assert next_call_at(state, 0.0, T) == T.poll_s
    line = describe(state, "score-events", "lb", T)
    assert "standby" in line and "10.0.0.1, 10.0.0.2" in line and "15 s" in line


def test_standby_takes_over_when_the_lease_is_free() -> None:
    standby = go(LeaseState(), Answer(held=False, epoch=3, holder=OTHER), at=0.0)
    standby = go(standby, Answer(held=False, epoch=3, holder=OTHER), at=1.0)
    assert standby.since == pytest.approx(0.01)
    active = go(standby, Answer(held=True, epoch=4), at=11.0)
    assert (active.role, active.epoch, active.other) == (Role.ACTIVE, 4, None)


def test_refuse_policy_refuses_at_start_only() -> None:
    refused = go(LeaseState(), Answer(held=False, epoch=3, holder=OTHER), at=0.0, refuse=True)
    assert refused.role is Role.REFUSED
    assert "LB_STANDBY=refuse" in describe(refused, "t", "lb", T)
    # Final: a free lease later does not start it.
    assert go(refused, Answer(held=True, epoch=4), at=20.0).role is Role.REFUSED


@pytest.mark.parametrize(
    "answer",
    [
        Answer(held=False, epoch=5, holder=OTHER),  # another deployment holds it now
        Answer(held=False, epoch=5, lost=True),  # free, but someone held it after us
        Answer(held=True, epoch=5),  # ours by name, yet another epoch: not our term
    ],
    ids=["taken", "lost", "other-epoch"],
)
def test_an_active_deployment_that_lost_its_turn_is_deposed_for_good(answer: Answer) -> None:
    active = go(LeaseState(), Answer(held=True, epoch=4), at=0.0)
    deposed = go(active, answer, at=30.0)
    assert (deposed.role, deposed.epoch) == (Role.DEPOSED, 4)
    assert not writable(deposed, 30.0)
    assert "deposed" in describe(deposed, "t", "lb", T)
    assert go(deposed, Answer(held=True, epoch=6), at=31.0) == deposed


def test_lease_and_fence_keys_share_their_group_slots() -> None:
    holder, epoch = lease_keys("lb", "score-events")
    assert holder.split("}")[0] == epoch.split("}")[0] == "lb:{@lease/score-events"
    assert fence_key("lb:{g1/3}:meta:wm", "score-events") == "lb:{g1/3}:meta:fence:score-events"
