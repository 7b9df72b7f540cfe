"""The command line's shared surface: help without markup, one-line errors, outcome lines."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from domain.errors import ConfigError, ServiceError
from lb.cli import build_parser, main
from lb.errors import explain
from lb.help import plain
from sinks import outcomes


def _parsers(
    parser: argparse.ArgumentParser, path: str = "lb"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_help_is_plain_text_and_every_argument_is_described() -> None:
    seen = 0
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        for markup in ("``", ":class:", ":mod:", ":func:", ":meth:"):
            assert markup not in text, f"{path} --help shows {markup}"
        for action in parser._actions:
            if action.dest == "help" or isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{path}: {action.option_strings or action.dest} has no help"
            seen += 1
    assert seen > 80


def test_options_show_their_defaults() -> None:
    top = dict(_parsers(build_parser()))["lb top"].format_help()
    assert "(default: 10)" in top  # --limit
    run = dict(_parsers(build_parser()))["lb run"].format_help()
    assert "(default: 1)" in run  # --processes


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("lb ")


def test_a_usage_error_is_one_line_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["top", "g1", "--limit", "many"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "lb top: error: argument --limit" in err and "see lb top --help" in err


def test_plain_drops_roles_and_literals() -> None:
    assert plain("``lb run`` uses :class:`~domain.x.Y` and :mod:`sinks.retry`::\n") == (
        "lb run uses domain.x.Y and sinks.retry:\n"
    )


def _chained(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exc", "needle"),
    [
        (ConfigError("LB_GAMES: broken"), "LB_GAMES: broken"),
        (
            _chained(
                ServiceError("Redis read failed: 13519 127.0.0.1:17103"),
                redis.exceptions.MovedError("13519 127.0.0.1:17103"),
            ),
            "set LB_REDIS_CLUSTER=1",
        ),
        (
            redis.exceptions.RedisClusterException(
                "Redis Cluster cannot be connected: Cluster mode is not enabled on this node"
            ),
            "unset LB_REDIS_CLUSTER",
        ),
        (redis.ConnectionError("Error 111 connecting"), "cannot reach Redis"),
        (
            _chained(ServiceError("Redis read failed: Error 111"), redis.ConnectionError("111")),
            "LB_REDIS_URL=",
        ),
    ],
)
def test_mistakes_become_one_line_naming_the_setting(exc: Exception, needle: str) -> None:
    line = explain(exc)
    assert line is not None and needle in line and "\n" not in line


def test_a_bug_keeps_its_traceback() -> None:
    assert explain(KeyError("x")) is None


def test_outcome_line_names_every_outcome_and_code() -> None:
    line = outcomes.describe(
        {"applied": 1000, "noop": 150, "duplicate": 10, "saturated": 0},
        {"BOUNDS": 30, "DECODE": 10},
    )
    assert line == (
        "1,200 records: 1,000 applied, 150 noop, 10 duplicate, 40 dead letters "
        "(BOUNDS 30, DECODE 10)"
    )


def test_outcome_line_names_tournament_refusals_after_the_records() -> None:
    line = outcomes.describe(
        {"applied": 10, "noop": 5, "duplicate": 0, "tournament_full": 3, "attempts_used_up": 0},
        {},
    )
    assert line == (
        "15 records: 10 applied, 5 noop, 0 duplicate, 0 dead letters; "
        "kept off tournament boards: 3 tournament_full"
    )
    outcomes.reset()
    outcomes.add_board_outcomes([{"applied": 2, "tournament_full": 1, "attempts_used_up": 0}])
    assert outcomes.snapshot() == ({"applied": 2, "tournament_full": 1}, {})
    outcomes.reset()


def test_outcomes_add_up_across_calls() -> None:
    outcomes.reset()
    outcomes.add_board_outcomes([{"applied": 2, "noop": 1, "saturated": 4}, {"applied": 1}])
    outcomes.add_dead_letters(["LATE", "LATE", "BOUNDS"])
    assert outcomes.snapshot() == ({"applied": 3, "noop": 1}, {"LATE": 2, "BOUNDS": 1})
    outcomes.reset()


def test_job_config_names_the_setting_before_any_io(tmp_path: Path) -> None:
    from config.settings import Settings
    from flows.preflight import describe_games, job_config

    broken = tmp_path / "games.toml"
    broken.write_text("[games\n")
    base = {"LB_KAFKA_BOOTSTRAP": "127.0.0.1:9", "LB_REDIS_URL": "redis://127.0.0.1:9/0"}
    with pytest.raises(ConfigError, match=r"^LB_GAMES: .*not valid TOML"):
        job_config(Settings.from_env({**base, "LB_GAMES": str(broken)}))
    with pytest.raises(ConfigError, match=r"^LB_HMAC_KEYS: "):
        job_config(Settings.from_env({**base, "LB_HMAC_KEYS": "k1"}))
    served = tmp_path / "served.toml"
    served.write_text('[default]\n[games."g1"]\n')
    settings = Settings.from_env({**base, "LB_GAMES": str(served)})
    assert describe_games(job_config(settings).catalog, settings.games_file).startswith(
        "g1 and any other game by [default]"
    )
