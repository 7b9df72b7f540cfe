"""The phases of a backfill's or rebuild's report (``jobs.backfill.phase_seconds``)."""

from __future__ import annotations

import pytest

from domain.backfill_plan import Mode
from jobs.backfill import BackfillReport, phase_seconds


def test_a_replace_run_that_folded_in_memory_has_three_phases_adding_up_to_it() -> None:
    phases = phase_seconds(Mode.REPLACE, 100.0, 240.0, 327.0, 340.5)
    assert phases == {"replay": 140.0, "load": 87.0, "catch_up_and_cut_over": 13.5}
    assert sum(phases.values()) == pytest.approx(240.5)


def test_without_a_load_the_replay_runs_until_the_replay_ended() -> None:
    phases = phase_seconds(Mode.REPLACE, 10.0, None, 14.0, 15.0)
    assert phases == {"replay": 4.0, "catch_up_and_cut_over": 1.0}


def test_a_fill_ends_with_its_boards_moved_in() -> None:
    assert phase_seconds(Mode.FILL, 0.0, 2.0, 3.0, 3.25) == {
        "replay": 2.0,
        "load": 1.0,
        "move_in": 0.25,
    }


def test_the_report_prints_them_rounded_beside_the_seconds() -> None:
    report = BackfillReport(mode="replace", seconds=3.14159, phases={"replay": 1.23456})
    doc = report.as_dict()
    assert doc["seconds"] == 3.14 and doc["phases_s"] == {"replay": 1.23}
