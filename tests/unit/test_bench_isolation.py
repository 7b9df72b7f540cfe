"""The pure parts of bench/isolation.py: CPU lists, the split, who is moved."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.isolation import cpu_list, movable, split


def test_cpu_lists_are_written_in_the_kernels_format() -> None:
    assert cpu_list({1}) == "1"
    assert cpu_list({0, 2, 3}) == "0,2-3"
    assert cpu_list([5, 1, 2, 3, 7, 8]) == "1-3,5,7-8"


@given(st.sets(st.integers(min_value=0, max_value=63), min_size=1))
def test_a_cpu_list_names_exactly_its_cpus(cpus: set[int]) -> None:
    named: set[int] = set()
    for part in cpu_list(cpus).split(","):
        low, _, high = part.partition("-")
        named.update(range(int(low), int(high or low) + 1))
    assert named == cpus


def test_redis_keeps_the_first_cpu_and_the_rest_get_the_others() -> None:
    assert split({3, 1, 2}) == (frozenset({1}), frozenset({2, 3}))
    with pytest.raises(SystemExit, match="at least 2 CPUs"):
        split({0})


def test_init_kernel_threads_and_kept_processes_stay() -> None:
    assert not movable(1, 0, frozenset())
    assert not movable(2, 0, frozenset())
    assert not movable(57, 2, frozenset())  # a kernel thread: kthreadd's child
    assert not movable(900, 1, frozenset({900}))
    assert movable(901, 1, frozenset({900}))
