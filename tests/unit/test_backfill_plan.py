"""The pure half of ``lb backfill``: options, ranges, modes, names and the progress line."""

from __future__ import annotations

import pytest

from domain.backfill_plan import (
    BackfillPlan,
    Bound,
    Loading,
    Mode,
    expiry_floor,
    load_line,
    loaded_line,
    mode_of,
    parse_bound,
    progress_line,
    resolve_range,
    split_ranges,
    staging_namespace,
    status_line,
)
from domain.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-04T00:00:00Z", Bound(at_ms=1_777_852_800_000)),
        ("2026-05-04", Bound(at_ms=1_777_852_800_000)),
        ("2026-05-04T02:00:00+02:00", Bound(at_ms=1_777_852_800_000)),
        ("0:1200,1:900", Bound(offsets={0: 1200, 1: 900})),
        (" 3:0 ", Bound(offsets={3: 0})),
    ],
)
def test_bounds_parse(text: str, expected: Bound) -> None:
    assert parse_bound(text, "--from") == expected


@pytest.mark.parametrize("text", ["", "yesterday", "0:12,0:13", "a:1", "1:-2", "0:", "12"])
def test_bad_bounds_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--until"):
        parse_bound(text, "--until")


def test_mode_is_replace_only_for_the_whole_log() -> None:
    assert mode_of(None, None) is Mode.REPLACE
    assert mode_of(Bound(at_ms=1), None) is Mode.FILL
    assert mode_of(None, Bound(offsets={0: 1})) is Mode.FILL


@pytest.mark.parametrize(
    ("start", "until", "expected"),
    [
        (None, None, {0: (5, 100), 1: (0, 10)}),
        ({0: 50}, None, {0: (50, 100), 1: (0, 10)}),
        ({0: 1}, {0: 60, 1: 3}, {0: (5, 60), 1: (0, 3)}),  # clamped to what Kafka still has
        ({0: 500}, None, {0: (100, 100), 1: (0, 10)}),  # past the end: nothing
        ({1: 8}, {1: 4}, {0: (5, 100), 1: (8, 8)}),  # until before from: nothing
    ],
)
def test_ranges(
    start: dict[int, int] | None, until: dict[int, int] | None, expected: dict[int, tuple[int, int]]
) -> None:
    assert resolve_range({0: 5, 1: 0}, {0: 100, 1: 10}, start, until) == expected


def test_an_unknown_partition_is_a_mistake() -> None:
    with pytest.raises(ConfigError, match="partition 7"):
        resolve_range({0: 0}, {0: 10}, {7: 1}, None)


def test_plan_wants_its_games_and_their_shards() -> None:
    plan = BackfillPlan("t", ("g1",), Mode.REPLACE, {0: (0, 10), 1: (4, 6)}, follow=True)
    assert plan.wants("g1") and plan.wants("g1/3") and not plan.wants("g2")
    assert plan.records == 12
    doc = plan.describe()
    assert doc["partitions"] == {
        "0": {"from": 0, "until": 10, "records": 10},
        "1": {"from": 4, "until": 6, "records": 2},
    }
    assert BackfillPlan("t", (), Mode.FILL, {}, follow=False).wants("anything")


def test_staging_names_are_stable_per_command_and_apart_per_command() -> None:
    a = staging_namespace("lb", "backfill", ("t", "g1", "", ""))
    assert a == staging_namespace("lb", "backfill", ("t", "g1", "", ""))
    assert a != staging_namespace("lb", "backfill", ("t", "g2", "", ""))
    assert a.startswith("lb~backfill-") and staging_namespace("lb", "rebuild") == "lb~rebuild"


def test_progress_line_has_rate_left_and_eta() -> None:
    line = progress_line("lb backfill", 1_000, 3_000, 2.0)
    assert line == "lb backfill: 1,000/3,000 records (500/s), 2,000 left, ETA 4s"
    assert progress_line("x", 0, 10, 0.0).endswith("ETA ?")


def test_the_load_line_says_the_records_are_done_and_the_fold_is_going_in() -> None:
    line = load_line("lb rebuild", 10_000_000, 12_000_000, 30_000_000, 30.0)
    assert line == (
        "lb rebuild: 10,000,000 records replayed; loading into Redis: "
        "12,000,000/30,000,000 entries (400,000/s), ETA 45s"
    )
    assert load_line("x", 1, 0, 10, 0.0).endswith("ETA ?")
    assert loaded_line("lb rebuild", 10, 30, 71.6) == (
        "lb rebuild: 10 records replayed; 30 entries (board members and hash fields) "
        "loaded into Redis in 72s"
    )


def test_the_status_line_says_what_the_replay_is_doing_now() -> None:
    what, planned = "lb rebuild", 10_000
    loading = Loading(sent=2_000, total=8_000, elapsed_s=2.0)
    # Still folding the plan (another process may have started its load): records.
    assert status_line(what, 9_000, planned, 3.0, loading) == progress_line(
        what, 9_000, planned, 3.0
    )
    # Every planned record folded, the load going in: the load, even when the
    # processes read on past the plan before they loaded.
    for records in (planned, planned + 2_500):
        assert status_line(what, records, planned, 3.0, loading) == load_line(
            what, records, 2_000, 8_000, 2.0
        )
    # Loaded, the parent reading on to the head: the records written since the plan.
    done = Loading(sent=8_000, total=8_000, elapsed_s=9.0)
    assert status_line(what, planned + 2_500, planned, 3.0, done) == (
        "lb rebuild: 12,500 records replayed, 10,000 planned and 2,500 written since; "
        "catching up with the live head"
    )
    assert status_line(what, planned + 2_500, planned, 3.0, done, 1.4, 5.0) == (
        "lb rebuild: 12,500 records replayed, at the live head: cutting over, waiting for "
        "the live job to pass the new watermarks (1s of up to 5s, then behind it)"
    )


def test_expiry_floor_keeps_later_expiries() -> None:
    assert expiry_floor({"a": 10, "b": 500}, 100) == {"a": 100, "b": 500}


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
@pytest.mark.parametrize(
    "sizes",
    [[100, 100, 100, 100], [1000, 10, 10, 10, 10], [0, 0, 5], [7], [3, 1, 4, 1, 5, 9, 2, 6]],
)
def test_split_ranges_deals_whole_partitions_and_balances_records(
    sizes: list[int], workers: int
) -> None:
    ranges = {p: (50 * p, 50 * p + size) for p, size in enumerate(sizes)}
    parts = split_ranges(ranges, workers)
    dealt = [p for part in parts for p in part]
    assert sorted(dealt) == sorted(ranges)  # every partition exactly once, never split
    assert all(part[p] == ranges[p] for part in parts for p in part)
    assert 1 <= len(parts) <= min(workers, len(sizes))
    loads = [sum(end - first for first, end in part.values()) for part in parts]
    # Greedy largest-first: the busiest part exceeds an even share by at most one partition.
    assert max(loads) <= sum(sizes) / len(parts) + max(sizes)
    if workers >= sum(1 for size in sizes if size):  # a process per partition with records
        assert all(sum(1 for f, e in part.values() if e > f) <= 1 for part in parts)


def test_split_ranges_refuses_no_workers() -> None:
    with pytest.raises(ConfigError, match="workers"):
        split_ranges({0: (0, 1)}, 0)
