"""What a newcomer meets, as pure logic: versions, help, argument errors, verify's and
backfill's answers, the piped live view (the services' side is in
tests/integration/test_cli_mistakes.py)."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping

import pytest

from api.app import API_VERSION
from config.version import VERSION
from domain.backfill_plan import Bound
from domain.errors import ConfigError, QueryError
from domain.games import GameCatalog
from jobs.backfill import make_plan, plan_notes
from jobs.verify_report import Difference, VerifyReport, explain_redrives
from lb import live_view
from lb.cli import main
from lb.commands.services import _monitoring_line
from lb.commands.verify import _shown

pytestmark = pytest.mark.unit


def test_lb_and_the_api_report_one_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"lb {VERSION}"
    assert API_VERSION == VERSION


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["rebuild", "--help"], "print the plan"),
        (["hot", "--help"], "docs/HEAVY_HITTERS.md"),
    ],
)
def test_help_says_what_the_command_does(
    argv: list[str], wanted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    text = " ".join(capsys.readouterr().out.split())
    assert wanted in text
    assert "PERCENTILES" not in text


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["produce", "--zipf", "steep"], "argument --zipf: not a number: 'steep'"),
        (["produce", "--count", "1e3"], "argument --count: not a whole number: '1e3'"),
        (["produce", "--dup-ratio", "2"], "argument --dup-ratio: must be within 0..1"),
        (["topk", "run", "--every", "nan"], "argument --every: not a finite number"),
        (["run", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
    ],
)
def test_argument_errors_are_words_not_function_names(
    argv: list[str], wanted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert wanted in err and "invalid" not in err and "_" not in err.split("error:")[1], err


def test_monitoring_answers_in_words() -> None:
    assert _monitoring_line("down", {"stopped": ["prometheus"]}) == "prometheus: stopped"
    assert _monitoring_line("down", {"stopped": []}) == "prometheus: was not running"
    assert "not running" in _monitoring_line("status", {"prometheus": None})
    up = {"prometheus": "http://127.0.0.1:29090", "prometheus_up": True}
    assert _monitoring_line("status", up) == "prometheus: up at http://127.0.0.1:29090"


def test_an_unknown_window_names_every_form() -> None:
    game = GameCatalog.from_toml("[default]\n", "t").lookup("g1")
    assert game is not None
    with pytest.raises(QueryError) as info:
        game.parse_window("tourney", 0)
    assert "season:NAME" in str(info.value) and "tournament:NAME" in str(info.value)


# -- lb verify ----------------------------------------------------------------------------


def test_verify_shows_scores_and_times_not_raw_values() -> None:
    catalog = GameCatalog.from_toml("[default]\n", "t")
    game = catalog.lookup("g1")
    assert game is not None
    value = game.codec(game.window("alltime")).encode(1234, 1_795_692_915_000)
    diff = Difference("g1", "alltime", "p1", "wrong value", value, None)
    assert _shown(catalog, diff, value) == "score 1,234 reached 2026-11-26T11:35:15.000Z"
    assert _shown(catalog, diff, None) == "absent"
    counter = Difference("g1", "meta:stats", "duplicate", "counter", 0, 15)
    assert _shown(catalog, counter, 15) == "15"


def _counters(tag: str, live: Mapping[str, int], log: Mapping[str, int]) -> list[Difference]:
    return [
        Difference(tag, "meta:stats", name, "counter", live.get(name, 0), log.get(name, 0))
        for name in sorted(set(live) | set(log))
        if live.get(name, 0) != log.get(name, 0)
    ]


def test_verify_explains_the_counters_a_redrive_moves() -> None:
    # The live job refused 15 originals and applied their copies; the replay accepted the
    # originals (some now a noop where the copy was applied) and counted the copies twice.
    report = VerifyReport(
        differences=_counters(
            "g2",
            {"applied": 15, "noop": 0, "duplicate": 0},
            {"applied": 13, "noop": 2, "duplicate": 15},
        )
    )
    explain_redrives(report, {"g2": 15})
    assert report.equal and len(report.explained) == 1
    assert report.explained[0].startswith("game g2: the replay counts 15 more duplicate(s)")


@pytest.mark.parametrize(
    ("accepted_now", "boards_differ", "log_applied"),
    [
        ({}, False, 15),  # no dead letter accepted today: unexplained
        ({"g2": 3}, False, 15),  # more extra duplicates than re-judged letters
        ({"g2": 15}, True, 15),  # a board differs too
        ({"g2": 15}, False, 16),  # applied + noop disagree
    ],
)
def test_verify_keeps_differences_a_redrive_does_not_explain(
    accepted_now: dict[str, int], boards_differ: bool, log_applied: int
) -> None:
    diffs = _counters("g2", {"applied": 15}, {"applied": log_applied, "duplicate": 15})
    if boards_differ:
        diffs.append(Difference("g2", "alltime", "p1", "missing", None, 7))
    report = VerifyReport(differences=list(diffs))
    explain_redrives(report, accepted_now)
    assert report.differences == diffs and not report.explained


# -- lb backfill ----------------------------------------------------------------------------


class Offsets:
    """Two partitions holding offsets 0..9 and 0..4; times map to offset 3, or past the end."""

    def bounds(self) -> tuple[dict[int, int], dict[int, int]]:
        return {0: 0, 1: 0}, {0: 10, 1: 5}

    def at(self, bound: Bound, high: Mapping[int, int]) -> dict[int, int]:
        if bound.at_ms is None:
            return dict(bound.offsets)
        return {p: (3 if bound.at_ms < 4_000_000_000_000 else end) for p, end in high.items()}


@pytest.mark.parametrize(
    ("start", "until", "wanted"),
    [
        (Bound(at_ms=2_000), Bound(at_ms=1_000), "is not before --until"),
        (Bound(offsets={0: 7}), Bound(offsets={0: 7}), "partition 0's range is empty"),
        (Bound(offsets={1: 6}), None, "past the end of partition 1 (its next offset is 5)"),
        (Bound(at_ms=4_100_000_000_000), None, "holds no record of 't'"),
    ],
)
def test_backfill_refuses_ranges_nobody_means(
    start: Bound, until: Bound | None, wanted: str
) -> None:
    with pytest.raises(ConfigError, match="--from") as info:
        make_plan(Offsets(), "t", (), start, until)
    assert wanted in str(info.value)


def test_backfill_says_which_partitions_a_bound_leaves_unnamed() -> None:
    start, until = Bound(offsets={0: 2}), Bound(offsets={0: 8, 1: 50})
    plan = make_plan(Offsets(), "t", (), start, until)
    assert plan.ranges == {0: (2, 8), 1: (0, 5)}
    assert plan_notes(plan, start, until) == [
        "partition(s) 1 not named in --from: replayed from their start",
        "--until past a partition's end, replayed to its end: 1 (ends at 5)",
    ]


# -- the piped live view ----------------------------------------------------------------------


def test_a_piped_view_prints_a_table_now_and_then_and_the_last_one() -> None:
    now = [0.0]

    def frames() -> Iterator[live_view.Frame]:
        for second in range(25):
            now[0] = float(second)
            yield live_view.Frame(f"top after {second} s", [])

    out = io.StringIO()
    live_view.show(frames(), out, terminal=False, plain_every_s=10.0, clock=lambda: now[0])
    titles = [line for line in out.getvalue().splitlines() if line.startswith("top after")]
    assert titles == ["top after 0 s", "top after 10 s", "top after 20 s", "top after 24 s"]
