"""bench.backfill's reading of a command's report from its log (stdout and stderr together)."""

from __future__ import annotations

import pytest

from bench.backfill import _baseline_cells, last_report, phases_cell

REPORT = '{"namespace": "lb", "mode": "replace", "records_replayed": 10, "seconds": 1.5}'


def test_the_report_is_found_before_the_lines_printed_after_it() -> None:
    log = "\n".join(
        [
            "lb rebuild: 10/10 records (5/s), 0 left, ETA 0s",
            REPORT,
            "lb rebuild: profiles: 0 records of t.profiles replayed and swapped in",
            "%5|1795843332.002|PARTCNT|rdkafka#producer-3| [thrd:main]: {not json",
        ]
    )
    assert last_report(log)["records_replayed"] == 10


def test_a_log_without_a_report_says_how_it_ends() -> None:
    with pytest.raises(SystemExit, match=r"no JSON report (?s:.*)ETA 0s"):
        last_report("lb rebuild: 10/10 records (5/s), 0 left, ETA 0s\n")


def test_the_baseline_row_shows_cores_and_cpu_per_event_or_says_what_was_not_measured() -> None:
    size = {
        "baseline_cpu": {
            "cores": {"job": 0.29, "kafka": None, "redis": 0.12, "machine": 0.8},
            "us_per_event": {"job": 284, "kafka": None, "redis": 118},
        }
    }
    assert _baseline_cells(size) == ["0.29 (284)", "n/a", "0.12 (118)"]
    assert _baseline_cells({}) == ["n/a", "n/a", "n/a"]


def test_the_phases_cell_shows_the_reports_phases_in_order_or_says_there_were_none() -> None:
    report = {"phases_s": {"replay": 139.6, "load": 87.2, "catch_up_and_cut_over": 16.1}}
    assert phases_cell(report) == "140 / 87 / 16"
    assert phases_cell({"phases_s": {"replay": 4.0, "catch_up_and_cut_over": 1.0}}) == "4 / - / 1"
    assert phases_cell({"seconds": 1.5}) == "n/a"
