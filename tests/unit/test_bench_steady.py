"""bench.steady's stream, plan and summaries: what it produces is what the section says."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from bench.common import machine, steal_share
from bench.steady import (
    CALLS,
    DEDUPE_TTL_S,
    MAX,
    NEW_SHARE,
    goals,
    latency,
    markdown,
    memory_run,
    parse_rate,
    plan,
    player_id,
    rebuild_seconds,
    records,
    run_events,
    section_of,
    verdict,
)
from config.settings import DEV_KEYRING
from domain.signing import Verdict, parse_keyring, verify
from schemas.codec import ScoreEventCodec


def test_the_stream_is_signed_keyed_by_player_and_one_fifth_new_players() -> None:
    keyring = parse_keyring(DEV_KEYRING)
    codec = ScoreEventCodec.from_registry()
    players = 1000
    stream = list(records(keyring, 1_800_000_000_000, 5000, players, seed=3))
    events = [codec.decode(value) for _, value, _ in stream]
    assert all(verify(keyring, event) is Verdict.OK for event in events)
    pairs = list(zip(stream, events, strict=True))
    assert all(key == event.player_id.encode() for (key, _, _), event in pairs)
    assert len({event.event_id for event in events}) == len(events)
    new = [event for event in events if int(event.player_id[1:]) >= players]
    # Each new player posts once; the rest come from the loaded players.
    assert len({event.player_id for event in new}) == len(new)
    assert abs(len(new) / len(events) - NEW_SHARE) < 0.03
    assert all(ts == event.ts_ms for (_, _, ts), event in pairs)


def test_a_later_runs_new_players_and_record_times_are_its_own() -> None:
    keyring = parse_keyring(DEV_KEYRING)
    codec = ScoreEventCodec.from_registry()
    stream = list(records(keyring, 1_000, 2000, 1000, seed=4, first_new=50_000, per_second=1000))
    events = [codec.decode(value) for _, value, _ in stream]
    new = [int(event.player_id[1:]) for event in events if int(event.player_id[1:]) >= 1000]
    assert new and min(new) == 50_000
    # 1,000 records a second of record time: the last of 2,000 is 1,999 ms after the first.
    assert stream[0][2] == 1_000 and stream[-1][2] == 1_000 + 1_999


def test_the_rates_and_the_run_plan() -> None:
    assert parse_rate("20000") == 20_000
    assert parse_rate("max") == MAX
    for bad in ("fast", "0", "-5", "2.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_rate(bad)
    # A fixed rate runs once at the first bound and pace; max once per pair, in order.
    assert plan([20_000, 50_000, MAX], [1000]) == [
        (20_000, 1000, 1),
        (50_000, 1000, 1),
        (MAX, 1000, 1),
    ]
    assert plan([MAX, 20_000], [0, 1000], [1, 0]) == [
        (MAX, 0, 1),
        (MAX, 0, 0),
        (MAX, 1000, 1),
        (MAX, 1000, 0),
        (20_000, 0, 1),
    ]
    assert run_events(20_000, 20.0, 600_000) == 400_000
    assert run_events(MAX, 20.0, 600_000) == 600_000
    assert section_of(10_000_000) == "bench.steady"
    assert section_of(1_000_000) == "bench.steady.1000000"


def test_rebuild_figure_is_read_from_the_rebuild_section_only() -> None:
    row = "| 10,000,000 | `lb rebuild` | 2 | 330.23 | 30,282 |"
    doc = f"x\n<!-- BEGIN bench.rebuild -->\n## R\n\n{row}\n<!-- END bench.rebuild -->\n"
    assert rebuild_seconds(doc) == 330.23
    assert rebuild_seconds(f"{row}\n") is None
    assert rebuild_seconds(doc.replace("10,000,000", "1,000,000")) is None


def _run(rate: Any, reads: dict[str, Any], **extra: Any) -> dict[str, Any]:
    run = {
        "rate": rate,
        "bound": 1000,
        "produced_per_s": None if rate == MAX else rate,
        "counted_per_s": 12345,
        "kept_up": None if rate == MAX else True,
        "freshness_ms": None if rate == MAX else {"p50": 40.0, "p99": 180.0},
        "job_us_per_record": 20.5,
        "redis_us_per_record": 11.0,
        "writes": 10,
        "write_mean_ms": 2.5,
        "write_max_ms": 15.0,
        "reads": reads,
        "memory": {
            "board_bytes_per_member": {"alltime": 100.0, "weekly": 101.0, "daily": 102.0},
            "dedupe_bytes_per_event": 12.0,
            "dedupe_ids": 1_000_000,
        },
    }
    return {**run, **extra}


def test_goals_judge_each_figure_against_its_limit() -> None:
    assert verdict(None, 5.0) == "-"
    assert verdict(5.0, 5.0) == "PASS"
    assert verdict(5.01, 5.0) == "over"
    fast = {call: {"p50": 0.5, "p99": 4.0, "max": 19.0, "calls": 9} for call in CALLS}
    slow = {**fast, "rank": {"p50": 0.5, "p99": 6.0, "max": 19.0, "calls": 9}}
    summary = {"runs": [_run(20_000, slow), _run(MAX, slow)], "rebuild_s": 330.23, "total_s": 60}
    rows = {row[0].split(" (")[0].split(":")[0]: row[1:] for row in goals(summary)}
    # Only the max run is judged for reads; the 20K run's slow rank does not count twice.
    assert rows["top-10 at the job's maximum rate"] == ["4.00 / 19 ms", "PASS"]
    assert rows["rank at the job's maximum rate"] == ["6.00 / 19 ms", "over"]
    assert rows["dedupe memory ≤ 16 B per event"] == ["12 B", "PASS"]
    assert rows["rebuild of 10M players ≤ 180 s"] == ["330.23 s", "over"]
    verdicts = [row[-1] for row in goals(summary)]
    assert verdicts.count("over") == 3  # rank, rebuild, job CPU 20.5 µs > 18
    assert verdicts.count("PASS") == 4  # top-10, around, dedupe, Redis CPU 11 µs ≤ 12


def test_memory_comes_from_the_last_run_only_while_no_dedupe_id_can_have_expired() -> None:
    fast = {call: {"p50": 0.5, "p99": 4.0, "max": 19.0, "calls": 9} for call in CALLS}
    first, last = _run(20_000, fast), _run(MAX, fast)
    last["memory"] = {**last["memory"], "dedupe_bytes_per_event": 20.0}
    runs = [first, last]
    assert memory_run({"runs": runs, "total_s": DEDUPE_TTL_S}) == ("last", last["memory"])
    assert memory_run({"runs": runs, "total_s": DEDUPE_TTL_S + 1}) == ("first", first["memory"])
    long_run = {"runs": runs, "rebuild_s": None, "total_s": 900.0}
    assert ["dedupe memory ≤ 16 B per event", "12 B", "PASS"] in goals(long_run)
    assert ["dedupe memory ≤ 16 B per event", "20 B", "over"] in goals({**long_run, "total_s": 60})


def test_latency_summary_and_the_section_tables() -> None:
    assert latency([]) == {"calls": 0, "p50": None, "p99": None, "max": None}
    summary = latency([float(n) for n in range(1, 101)])
    assert summary == {"calls": 100, "p50": 50.0, "p99": 99.0, "max": 100.0}
    reads = {call: summary for call in CALLS}
    result: dict[str, Any] = {
        "command": "python -m bench.steady",
        "machine": machine(),
        "params": {
            "players": 1000,
            "events": 500,
            "seconds": 20.0,
            "read_rate": 200.0,
            "deep_offset": 100_000,
            "askers": 1000,
            "friends": 50,
        },
        "runs": [
            {**_run(20_000, reads), "redis_stalls_ms": {"fork": 13.0, "aof-write": 4.0}},
            _run(MAX, reads, bound=0, pace=1),
        ],
        "idle": reads,
        "idle_steal_pct": 0.4,
        "rebuild_s": 330.23,
        "load_s": 12.0,
        "total_s": 600.0,
    }
    text = markdown(result)
    # a run from before the pace existed reads as unpaced
    row = "| 20,000/s, bound 1000, unpaced | 20,000 | 12,345 | yes | 40 / 180 | 20.5 | 11 |"
    assert row in text
    assert "| max, no bound, pace 1 | - | 12,345 | - | - | 20.5 | 11 |" in text
    header = (
        "| call (p50 / p99 / max ms) | 20,000/s, bound 1000, unpaced | max, no bound, pace 1 "
        "| job stopped |"
    )
    assert header in text
    for call in CALLS:
        assert f"| {call} | 50 / 99 / 100 | 50 / 99 / 100 | 50 / 99 / 100 |" in text
    assert "| CPU stolen by the host (%) | - | - | 0.4 |" in text
    assert "| Redis' longest stall per event (ms) | aof-write 4, fork 13 | - | - |" in text
    assert (
        "| rebuild of 10M players ≤ 180 s (quoted from the rebuild section) | 330.23 s | over |"
        in text
    )
    assert "after the last run" in text
    assert "alltime 100, weekly 101, daily 102; dedupe 12 bytes per event" in text
    assert "whole run 10.0 min" in text
    assert player_id(7) == "p0000007"


def test_the_stolen_share_is_of_every_tick_between_two_readings() -> None:
    assert steal_share((10, 1000), (40, 2000)) == 3.0
    assert steal_share((10, 1000), (10, 1000)) is None
