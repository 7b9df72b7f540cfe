from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path

import pytest

from domain.errors import ConfigError
from domain.games import GameCatalog, GameConfig, Operator, valid_game_id
from domain.scoring import TieResolution
from domain.windows import Window, WindowKind, window_for

DAY = 86_400_000
JAN_2020 = 1_577_836_800_000
JAN_2040 = 2_208_988_800_000
ALLTIME = window_for(WindowKind.ALLTIME, 0)
DAILY = Window(WindowKind.DAILY, "daily:2026-05-04", 1_777_852_800_000, 1_777_852_800_000 + DAY)
WEEKLY = window_for(WindowKind.WEEKLY, DAILY.start_ms or 0)


def test_defaults() -> None:
    config = GameConfig()
    assert config.operator is Operator.BEST
    assert config.max_score == 10_000_000
    assert config.tie_resolution is TieResolution.S
    assert config.windows == (WindowKind.ALLTIME, WindowKind.WEEKLY, WindowKind.DAILY)
    assert (config.shards, config.exact_tier) == (1, 1_000_000)
    assert (config.lateness_ms, config.future_skew_ms) == (3_600_000, 300_000)
    assert (config.daily_retention_s, config.weekly_retention_s) == (172_800, 1_209_600)
    assert (config.alltime_origin_ms, config.alltime_until_ms) == (JAN_2020, JAN_2040)
    config.validate("any")  # the built-in game must itself be servable


def test_codec_per_window() -> None:
    config = GameConfig()
    daily = config.codec(DAILY)
    assert (daily.origin_ms, daily.span_ms, daily.resolution) == (DAILY.start_ms, DAY, "s")
    weekly = config.codec(WEEKLY)
    assert (weekly.origin_ms, weekly.span_ms) == (WEEKLY.start_ms, 7 * DAY)
    alltime = config.codec(ALLTIME)
    assert (alltime.origin_ms, alltime.span_ms) == (JAN_2020, JAN_2040 - JAN_2020)
    assert alltime.slots == 631_152_000


def test_expire_at_and_lateness() -> None:
    config = GameConfig()
    assert DAILY.end_ms is not None and WEEKLY.end_ms is not None
    assert config.expire_at_ms(DAILY) == DAILY.end_ms + 172_800_000
    assert config.expire_at_ms(WEEKLY) == WEEKLY.end_ms + 1_209_600_000
    assert config.expire_at_ms(ALLTIME) is None
    assert config.is_late(DAILY, DAILY.end_ms + 3_600_000) is False
    assert config.is_late(DAILY, DAILY.end_ms + 3_600_001) is True
    assert config.is_late(DAILY, DAILY.start_ms or 0) is False
    assert config.is_late(ALLTIME, 10**15) is False
    strict = dataclasses.replace(config, lateness_ms=0)
    assert strict.is_late(WEEKLY, WEEKLY.end_ms) is False
    assert strict.is_late(WEEKLY, WEEKLY.end_ms + 1) is True


def test_bound_check_names_the_fitting_max() -> None:
    config = GameConfig(max_score=10**12)
    with pytest.raises(ConfigError) as info:
        config.validate("chess")
    message = str(info.value)
    fits = 2**53 // 631_152_000 - 1  # seconds from 2020 to 2040
    assert "'chess'" in message
    assert "alltime" in message
    assert "1000000000000" in message
    assert str(fits) in message
    assert "'none'" in message  # the only coarser resolution that holds 10**12
    GameConfig(max_score=10**12, tie_resolution=TieResolution.NONE).validate("chess")


def test_bound_check_per_window_kind() -> None:
    weekly_ms_fits = 2**53 // (7 * DAY) - 1
    ok = GameConfig(
        tie_resolution=TieResolution.MS, windows=(WindowKind.WEEKLY,), max_score=weekly_ms_fits
    )
    ok.validate("g")
    too_big = dataclasses.replace(ok, max_score=weekly_ms_fits + 1)
    with pytest.raises(ConfigError, match=rf"weekly board.*fits is {weekly_ms_fits}\b.*'s'"):
        too_big.validate("g")
    # The daily board has 7x fewer slots, so the same score fits there.
    dataclasses.replace(too_big, windows=(WindowKind.DAILY,)).validate("g")


def test_bound_check_at_the_edge() -> None:
    fits = 2**53 // 631_152_000 - 1
    GameConfig(max_score=fits).validate("edge")
    with pytest.raises(ConfigError, match=rf"\b{fits}\b"):
        GameConfig(max_score=fits + 1).validate("edge")


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"max_score": 0}, "max_score"),
        ({"shards": 0}, "shards"),
        ({"exact_tier": -1}, "exact_tier"),
        ({"lateness_ms": -1}, "lateness_ms"),
        ({"windows": ()}, "windows"),
        ({"windows": (WindowKind.DAILY, WindowKind.DAILY)}, "twice"),
        ({"alltime_until_ms": JAN_2020}, "alltime_until"),
        ({"daily_retention_s": 3_599}, "daily retention"),
    ],
)
def test_validate_refuses(changes: dict[str, object], text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        dataclasses.replace(GameConfig(), **changes).validate("g")


def test_builtin_catalog() -> None:
    catalog = GameCatalog.builtin()
    assert catalog.lookup("anything") == GameConfig()
    assert catalog.lookup("game-1.v2_x") == GameConfig()
    assert catalog.lookup("bad}id") is None  # cannot form a key: dead-lettered
    assert catalog.lookup("") is None
    assert dict(catalog.games()) == {}


CATALOG = """
[default]
operator = "incr"
max_score = 5000
lateness_seconds = 60

[games."chess"]
operator = "best"
tie_resolution = "ms"
windows = ["alltime", "daily"]

[games."tetris.v2"]
max_score = 123456789
tie_resolution = "none"
shards = 8
alltime_origin = "2024-01-01"
alltime_until = 2030-01-01
"""


def test_toml_layering() -> None:
    catalog = GameCatalog.from_toml(CATALOG, "games.toml")
    default = GameConfig(operator=Operator.INCR, max_score=5000, lateness_ms=60_000)
    assert catalog.lookup("unlisted") == default
    chess = catalog.lookup("chess")
    assert chess == dataclasses.replace(
        default,
        operator=Operator.BEST,
        tie_resolution=TieResolution.MS,
        windows=(WindowKind.ALLTIME, WindowKind.DAILY),
    )
    tetris = catalog.lookup("tetris.v2")
    assert tetris is not None
    assert tetris.operator is Operator.INCR  # from [default]
    assert (tetris.max_score, tetris.shards) == (123_456_789, 8)
    assert tetris.alltime_origin_ms == 1_704_067_200_000
    assert tetris.alltime_until_ms == 1_893_456_000_000
    assert tetris.exact_tier == 1_000_000  # built-in, under both layers
    assert set(catalog.games()) == {"chess", "tetris.v2"}
    with pytest.raises(TypeError):
        catalog.games()["x"] = default  # type: ignore[index]


def test_toml_without_default_refuses_unknown_games() -> None:
    catalog = GameCatalog.from_toml('[games."a"]\nmax_score = 10\n')
    config = catalog.lookup("a")
    assert config == GameConfig(max_score=10)
    assert catalog.lookup("b") is None
    empty = GameCatalog.from_toml("")
    assert empty.lookup("a") is None
    assert GameCatalog.from_toml('[games."a"]\n').lookup("a") == GameConfig()


def test_toml_maps_every_field() -> None:
    text = """
    [default]
    operator = "set"
    max_score = 77
    tie_resolution = "min"
    windows = ["daily"]
    shards = 2
    exact_tier = 3
    lateness_seconds = 4
    future_skew_seconds = 5
    daily_retention_seconds = 6
    weekly_retention_seconds = 7
    alltime_origin = "2021-01-01"
    alltime_until = "2022-01-01"
    order = "asc"
    reset_timezone = "America/Los_Angeles"
    week_start = "sunday"
    hourly_retention_seconds = 8
    monthly_retention_seconds = 9
    seasons = { s1 = { start = 2021-03-01, end = 2021-06-01 } }
    tournaments.cup.start = 2021-04-01T18:00:00Z
    tournaments.cup.end = 2021-04-02
    tournaments.cup.max_entries = 10
    tournaments.cup.max_attempts = 2
    metadata_max_bytes = 64
    """
    config = GameCatalog.from_toml(text).lookup("x")
    assert config is not None
    base = GameConfig()
    for field in dataclasses.fields(GameConfig):
        if field.name == "dense_ranks":
            continue  # needs shards = 1: mapped in tests/unit/test_dense_ranks.py
        if field.name == "teams":  # per named game, desc and unsharded only: below
            continue
        assert getattr(config, field.name) != getattr(base, field.name), field.name
    teams = GameCatalog.from_toml('[games."t"]\nteams = "avg"\n').lookup("t")
    assert teams is not None and teams.teams == "avg"
    assert (config.lateness_ms, config.future_skew_ms) == (4_000, 5_000)
    assert (config.daily_retention_s, config.weekly_retention_s) == (6, 7)
    (cup,) = config.tournaments
    # The end date is local midnight in the game's zone (PDT, UTC-7), the start an instant.
    assert (cup.start_ms, cup.end_ms) == (1_617_300_000_000, 1_617_346_800_000)
    assert (cup.max_entries, cup.max_attempts) == (10, 2)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[defaults]\nmax_score = 1\n", ["games.toml", "defaults"]),
        ("max_score = 1\n", ["games.toml", "max_score"]),
        ('[games."a"]\nmaxscore = 1\n', ['[games."a"]', "maxscore"]),
        ('[games."a"]\nmax_score = "10"\n', ['[games."a"]', "max_score", "'10'"]),
        ('[games."a"]\nmax_score = 1.5\n', ["max_score", "1.5"]),
        ('[games."a"]\nshards = true\n', ["shards", "True"]),
        ('[games."a"]\nshards = 0\n', ["shards", "positive"]),
        ('[games."a"]\nexact_tier = -5\n', ["exact_tier"]),
        ('[games."a"]\nlateness_seconds = -1\n', ["lateness_seconds"]),
        ('[games."a"]\noperator = "max"\n', ["operator", "'best'", "'max'"]),
        ('[games."a"]\ntie_resolution = "us"\n', ["tie_resolution", "'us'"]),
        ('[games."a"]\nwindows = []\n', ["windows", "non-empty"]),
        ('[games."a"]\nwindows = "daily"\n', ["windows"]),
        ('[games."a"]\nwindows = ["yearly"]\n', ["windows", "'yearly'"]),
        ('[games."a"]\nwindows = ["daily", "daily"]\n', ["windows", "twice"]),
        ('[games."a"]\nalltime_origin = "2020-13-01"\n', ["alltime_origin"]),
        ('[games."a"]\nalltime_origin = 2020-01-01T00:00:00Z\n', ["alltime_origin"]),
        ('[games."a"]\nalltime_until = "2019-01-01"\n', ['[games."a"]', "alltime_until"]),
        ('[games."a b"]\n', ["invalid game id", "'a b'"]),
        ('[games."x}y"]\n', ["invalid game id"]),
        (f'[games."{"g" * 65}"]\n', ["invalid game id"]),
        ('[games."a".extra]\nmax_score = 1\n', ['[games."a"]', "extra"]),
        ("games = 3\n", ["games"]),
        ('[games."a"]\nmax_score = 1000000000000\n', ['[games."a"]', "14271045", "'none'"]),
        ("[default]\nmax_score = 1000000000000\n", ["[default]", "14271045"]),
        ("[default\n", ["games.toml", "TOML"]),
    ],
)
def test_toml_errors_name_file_table_and_key(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        GameCatalog.from_toml(text, "games.toml")
    message = str(info.value)
    assert message.startswith("games.toml:")
    for fragment in fragments:
        assert fragment in message


def test_load_from_path(tmp_path: Path) -> None:
    path = tmp_path / "games.toml"
    path.write_text(CATALOG, encoding="utf-8")
    catalog = GameCatalog.load(path)
    assert catalog.lookup("tetris.v2") is not None
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        GameCatalog.load(tmp_path / "missing.toml")
    path.write_text('[games."a"]\nshards = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        GameCatalog.load(path)


def test_constructor_validates() -> None:
    with pytest.raises(ConfigError, match="invalid game id"):
        GameCatalog({"a:b": GameConfig()}, None)
    with pytest.raises(ConfigError, match="'big'"):
        GameCatalog({"big": GameConfig(max_score=10**12)}, None)
    with pytest.raises(ConfigError, match="default"):
        GameCatalog({}, GameConfig(shards=0))


def test_catalog_and_config_pickle() -> None:
    catalog = GameCatalog.from_toml(CATALOG)
    again = pickle.loads(pickle.dumps(catalog))
    assert again.lookup("chess") == catalog.lookup("chess")
    assert again.lookup("zzz") == catalog.lookup("zzz")


@pytest.mark.parametrize(
    ("game_id", "ok"),
    [
        ("g", True),
        ("Game_1.v-2", True),
        ("g" * 64, True),
        ("g" * 65, False),
        ("", False),
        ("a b", False),
        ("a:b", False),
        ("a{b", False),
        ("a}b", False),
        ("é", False),
        ("a\n", False),
        ("\uff41", False),  # fullwidth a
    ],
)
def test_valid_game_id(game_id: str, ok: bool) -> None:
    assert valid_game_id(game_id) is ok
