"""The headline table computes its ratios from the run's own figures."""

from __future__ import annotations

from typing import Any

from bench.common import machine_line
from bench.formatting import processes
from bench.headline import (
    headline_markdown,
    ingest_rows,
    reads_rows,
    rebuild_rows,
    steady_rows,
    workload_rows,
)


def _ingest(ref: int, redis: int, one: int, two: int, ceiling: int) -> dict[str, Any]:
    return {
        "args": {"events": 1000},
        "reference": {"eps": ref},
        "redis_ceiling": {"eps": redis},
        "jobs": {"1": {"steady_eps": one}, "2": {"steady_eps": two}},
        "ceiling": {"eps": ceiling},
    }


def _cells(rows: list[list[str]], measurement_start: str) -> list[str]:
    return next(row for row in rows if row[1].startswith(measurement_start))


def test_ingest_ratios_are_against_the_same_runs_reference() -> None:
    rows = ingest_rows(_ingest(ref=2000, redis=10_000, one=30_000, two=45_000, ceiling=120_000))
    assert _cells(rows, "Redis ceiling")[3] == "5.00x"
    one = _cells(rows, "the job, 1 process")
    assert one[2] == "30,000 events/s"
    assert one[3] == "15.0x; 3.00x the Redis ceiling"
    assert _cells(rows, "the job, 2 processes")[3] == "22.5x; 1.50x 1 process"
    assert _cells(rows, "decode")[3] == "60.0x; the job's 1 process is 0.25x of it"


def test_reads_compare_the_largest_size_only_where_both_stores_answered() -> None:
    small = {"players": 10, "redis": {"rank": {"p50": 1.0, "p99": 2.0}}, "postgres": {}}
    big = {
        "players": 100,
        "redis": {"rank": {"p50": 0.5, "p99": 1.0}, "top-10": {"p50": 0.2, "p99": 0.4}},
        "postgres": {"rank": {"p50": 400.0, "p99": 900.0}},
    }
    rows = reads_rows({"sizes": [small, big]})
    assert len(rows) == 1
    assert rows[0][1] == "rank at 100 players (p50 / p99 ms)"
    assert rows[0][3] == "PostgreSQL p50 = 800x Redis"


def test_rebuild_scaling_rows() -> None:
    summary = {
        "sizes": [
            {"players": 10, "runs": [{"processes": 1, "seconds": 2.0, "players_per_s": 5}]},
        ],
        "scaling": [
            {"from": 10, "to": 100, "processes": 1, "players_ratio": 10, "time_ratio": 9.5}
        ],
    }
    rows = rebuild_rows(summary)
    assert rows[-1][2:] == ["10x the players", "9.50x the time"]


def test_missing_parts_are_left_out_not_guessed() -> None:
    text = headline_markdown(
        {"ingest": [_ingest(1, 2, 3, 4, 5)]}, "cmd", "machine", 1.0, "chart.png"
    )
    assert "| ingest |" in text
    assert "| reads |" not in text and "| rebuild |" not in text


def test_ratios_keep_about_three_significant_figures() -> None:
    rows = reads_rows(
        {
            "sizes": [
                {
                    "players": 9,
                    "redis": {op: {"p50": 1.0, "p99": 1.0} for op in ("a", "b", "c", "d")},
                    "postgres": {
                        "a": {"p50": 0.456, "p99": 1.0},
                        "b": {"p50": 12.34, "p99": 1.0},
                        "c": {"p50": 4248.88, "p99": 1.0},
                        "d": {"p50": 123456.0, "p99": 1.0},
                    },
                }
            ]
        }
    )
    assert [row[3].split(" = ")[1] for row in rows] == [
        "0.46x Redis",
        "12.3x Redis",
        "4,249x Redis",
        "123,456x Redis",
    ]


def test_process_counts_read_as_words() -> None:
    assert (processes(1), processes(2)) == ("1 process", "2 processes")


def test_machine_line_says_uncommitted_only_when_it_was_or_is_unknown() -> None:
    info = {
        "date": "d",
        "nproc": 2,
        "cpu_model": "cpu",
        "loadavg_at_start": [0.1, 0.2, 0.3],
        "python": "3.11",
        "bytewax": "0.21",
        "commit": "abc1234",
    }
    assert machine_line(info).endswith("commit `abc1234` (plus uncommitted work)")
    assert machine_line({**info, "uncommitted": False}).endswith("commit `abc1234`")
    assert machine_line({**info, "uncommitted": True}).endswith("(plus uncommitted work)")


def _shape(name: str, one: int, two: int, cpu: float) -> dict[str, Any]:
    summary = _ingest(ref=1000, redis=2000, one=one, two=two, ceiling=5000)
    summary["args"]["workload"] = name
    summary["jobs"]["2"]["runs"] = [{"job_cpu_us_per_event": cpu}]
    return summary


def test_workload_rows_name_the_worst_and_the_best_shape_by_two_processes() -> None:
    rows = workload_rows(
        [
            _shape("zipf", 40_000, 70_000, 21.5),
            _shape("new-players", 20_000, 30_000, 48.25),
            _shape("history", 25_000, 35_000, 40.0),
        ]
    )
    assert [row[1].split(":")[0] for row in rows] == [
        "workload `zipf` (best)",
        "workload `new-players` (worst)",
        "workload `history`",
    ]
    assert rows[1][2] == "20,000 events/s / 30,000 events/s"
    assert rows[1][3] == "job CPU per event, 2 processes: 48.2 us"


def test_workload_rows_set_redis_per_event_beside_the_shapes_floor() -> None:
    shapes = [_shape("zipf", 40_000, 70_000, 21.5), _shape("history", 25_000, 35_000, 40.0)]
    shapes[0]["jobs"]["2"]["runs"] = [
        {"job_cpu_us_per_event": 21.5, "redis_main_us_per_event": 11.44},
        {"job_cpu_us_per_event": 22.5, "redis_main_us_per_event": 12.0},
    ]
    shapes[0]["redis_floor"] = {"redis_main_us_per_event": 3.25}
    zipf, history = workload_rows(shapes)
    assert zipf[3] == (
        "job CPU per event, 2 processes: 21.5 us, 22.5 us; "
        "Redis 11.4, 12.0 us per event, its floor 3.2 us"
    )
    assert history[3] == "job CPU per event, 2 processes: 40.0 us"  # a run without the floor


def test_one_workload_alone_adds_no_comparison_rows() -> None:
    assert workload_rows([_shape("zipf", 1, 2, 3.0)]) == []


def test_rebuild_rows_name_the_command_each_run_used() -> None:
    runs = [
        {"processes": 2, "seconds": 3.0, "players_per_s": 4, "mode": "replay"},
        {"processes": 2, "seconds": 5.0, "players_per_s": 2, "mode": "offline"},
        {"processes": 1, "seconds": 6.0, "players_per_s": 1},  # a summary from before modes
    ]
    rows = rebuild_rows({"sizes": [{"players": 10, "runs": runs}]})
    assert [row[1].split(" of ")[0] for row in rows] == [
        "`lb rebuild`",
        "`lb rebuild --offline`",
        "`lb rebuild --offline`",
    ]


def _reads(p99: float | None) -> dict[str, Any]:
    return {call: {"p50": 0.5, "p99": p99, "max": 9.0} for call in ("top-10", "rank", "around")}


def test_steady_rows_show_each_full_speed_run_against_the_job_stopped() -> None:
    run = {"rate": "max", "counted_per_s": 14_329, "redis_us_per_record": 25.67}
    summary = {
        "params": {"players": 1_000_000},
        "runs": [
            {**run, "rate": 20_000, "bound": 250, "pace": 1, "reads": _reads(3.0)},
            {**run, "bound": 250, "pace": 1, "reads": _reads(5.4)},
            {**run, "bound": 0, "reads": _reads(12.0)},  # from before the pace: unpaced
        ],
        "idle": _reads(1.0),
    }
    rows = steady_rows(summary)
    assert len(rows) == 2  # the fixed-rate run is not a full-speed one
    assert rows[0][1] == (
        "1,000,000 players loaded, the job at full speed (bound 250, pace 1): "
        "read p99 ms while it writes (job stopped)"
    )
    assert rows[0][2] == "top-10 5.4 (1.0); rank 5.4 (1.0); around 5.4 (1.0)"
    assert rows[0][3] == "14,329 events/s; Redis 25.67 us per record"
    assert "(no bound, unpaced)" in rows[1][1]
    no_idle = steady_rows({**summary, "idle": {}})
    assert [row[2] for row in no_idle] == ["-", "-"]
    assert "steady" in headline_markdown({"steady": [summary]}, "c", "m", 1.0, "x.png")
