from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.settings import DEV_KEYRING, Settings
from domain.errors import ConfigError


def test_defaults_point_at_what_lb_up_recorded(tmp_path: Path) -> None:
    (tmp_path / "services.json").write_text(json.dumps({"kafka_port": 41000, "redis_port": 41001}))
    s = Settings.from_env({"LB_STATE_DIR": str(tmp_path)})
    assert s.kafka_bootstrap == "127.0.0.1:41000"
    assert s.redis_url.reveal() == "redis://127.0.0.1:41001/0"
    assert (s.topic, s.dlq_topic) == ("score-events", "score-events.dlq")
    assert s.uses_dev_keys and s.hmac_keys.reveal() == DEV_KEYRING


def test_dlq_follows_topic_and_recovery_is_per_topic_and_flow(tmp_path: Path) -> None:
    s = Settings.from_env({"LB_STATE_DIR": str(tmp_path), "LB_TOPIC": "scores-eu"})
    assert s.dlq_topic == "scores-eu.dlq"
    other = Settings.from_env({"LB_STATE_DIR": str(tmp_path), "LB_TOPIC": "scores-us"})
    assert s.recovery_dir("boards") != other.recovery_dir("boards")
    assert s.recovery_dir("boards") != s.recovery_dir("rebuild")


def test_secrets_never_print(tmp_path: Path) -> None:
    s = Settings.from_env(
        {
            "LB_STATE_DIR": str(tmp_path),
            "LB_HMAC_KEYS": "k1:deadbeefcafe",
            "LB_REDIS_URL": "redis://app:hunter2@127.0.0.1:6379/0",
            "LB_REDIS_PASSWORD": "s3cret-pw",
            "LB_KAFKA_X_SASL_USERNAME": "svc",
        }
    )
    text = repr(s) + str(s)
    assert "deadbeefcafe" not in text and "hunter2" not in text and "s3cret-pw" not in text
    assert s.redis_display_url() == "redis://app:***@127.0.0.1:6379/0"
    assert s.kafka_config()["sasl.username"] == "svc"
    assert s.hmac_keys.reveal() == "k1:deadbeefcafe"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LB_REDIS_URL": "http://x"}, "LB_REDIS_URL"),
        ({"LB_TOPIC": "a", "LB_DLQ_TOPIC": "a"}, "LB_DLQ_TOPIC"),
        ({"LB_BATCH_MS": "abc"}, "LB_BATCH_MS"),
        ({"LB_BATCH_MS": "0"}, "LB_BATCH_MS"),
        ({"LB_GAMES": "/nonexistent/games.toml"}, "LB_GAMES"),
        ({"LB_REDIS_RETRY_S": "-1"}, "LB_REDIS_RETRY_S"),
        ({"LB_KAFKA_RETRY_S": "-5"}, "LB_KAFKA_RETRY_S"),
        ({"LB_REDIS_TIMEOUT_S": "0"}, "LB_REDIS_TIMEOUT_S"),
        ({"LB_CACHE_PLAYERS": "0"}, "LB_CACHE_PLAYERS"),
        ({"LB_WRITE_MAX_UPDATES": "-1"}, "LB_WRITE_MAX_UPDATES"),
        ({"LB_WRITES_IN_FLIGHT": "-1"}, "LB_WRITES_IN_FLIGHT"),
        ({"LB_WRITES_IN_FLIGHT": "one"}, "LB_WRITES_IN_FLIGHT"),
        ({"LB_DECODER": "rust"}, "LB_DECODER"),
        ({"LB_SERVE_MAX_BODY": "512k"}, "LB_SERVE_MAX_BODY"),
        ({"LB_SERVE_PAGE_CACHE_MS": "soon"}, "LB_SERVE_PAGE_CACHE_MS"),
        ({"LB_SERVE_PAGE_CACHE_MS": "60001"}, "LB_SERVE_PAGE_CACHE_MS"),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"LB_STATE_DIR": str(tmp_path), **env})


def test_bench_doc_must_not_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LB_BENCH_DOC"):
        Settings.from_env({"LB_STATE_DIR": str(tmp_path), "LB_BENCH_DOC": str(tmp_path)})


def test_serve_worker_and_bench_settings_default_to_unset_and_can_be_set(tmp_path: Path) -> None:
    unset = Settings.from_env({"LB_STATE_DIR": str(tmp_path)})
    assert (unset.serve_max_body, unset.serve_page_cache_ms, unset.bench_doc) == (None, None, None)
    doc = tmp_path / "BENCHMARKS.md"
    s = Settings.from_env(
        {
            "LB_STATE_DIR": str(tmp_path),
            "LB_SERVE_MAX_BODY": "1024",
            "LB_SERVE_PAGE_CACHE_MS": "0",
            "LB_BENCH_DOC": str(doc),
        }
    )
    assert (s.serve_max_body, s.serve_page_cache_ms, s.bench_doc) == (1024, 0, doc)


def test_settings_are_frozen(tmp_path: Path) -> None:
    s = Settings.from_env({"LB_STATE_DIR": str(tmp_path)})
    with pytest.raises(AttributeError):
        s.topic = "other"  # type: ignore[misc]


def test_outage_budgets_default_to_five_minutes_and_can_be_set(tmp_path: Path) -> None:
    s = Settings.from_env({"LB_STATE_DIR": str(tmp_path)})
    assert (s.redis_retry_s, s.kafka_retry_s, s.redis_timeout_s) == (300, 300, 10)
    s = Settings.from_env(
        {
            "LB_STATE_DIR": str(tmp_path),
            "LB_REDIS_RETRY_S": "0",
            "LB_KAFKA_RETRY_S": "60",
            "LB_REDIS_TIMEOUT_S": "2",
        }
    )
    assert (s.redis_retry_s, s.kafka_retry_s, s.redis_timeout_s) == (0, 60, 2)


def test_the_planner_cache_size_is_a_setting(tmp_path: Path) -> None:
    assert Settings.from_env({"LB_STATE_DIR": str(tmp_path)}).cache_players == 2_000_000
    s = Settings.from_env({"LB_STATE_DIR": str(tmp_path), "LB_CACHE_PLAYERS": "250000"})
    assert s.cache_players == 250_000


def test_a_cluster_of_hosts_is_an_address_list_and_this_hosts_index(tmp_path: Path) -> None:
    s = Settings.from_env(
        {
            "LB_STATE_DIR": str(tmp_path),
            "LB_ADDRESSES": "10.0.0.1:2101; 10.0.0.2:2101;[fd00::3]:2101",
            "LB_PROCESS_ID": "2",
        }
    )
    assert s.addresses == ("10.0.0.1:2101", "10.0.0.2:2101", "[fd00::3]:2101")
    assert s.process_id == 2
    assert (s.takeover_s, s.standby) == (15, "wait")
    assert Settings.from_env({"LB_STATE_DIR": str(tmp_path)}).addresses == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LB_ADDRESSES": "a:1;b:2", "LB_PROCESS_ID": "2"}, "out of range"),
        ({"LB_ADDRESSES": "a:1;b:2", "LB_PROCESS_ID": "-1"}, "out of range"),
        ({"LB_ADDRESSES": "a:1;b"}, "not host:port"),
        ({"LB_ADDRESSES": "a:1;b:99999", "LB_PROCESS_ID": "0"}, "not host:port"),
        ({"LB_ADDRESSES": "a:1;a:1", "LB_PROCESS_ID": "0"}, "twice"),
        ({"LB_ADDRESSES": "fd00::1:2101", "LB_PROCESS_ID": "0"}, "brackets"),
        ({"LB_ADDRESSES": "a:1;b:2"}, "without LB_PROCESS_ID"),
        ({"LB_PROCESS_ID": "0"}, "without LB_ADDRESSES"),
        ({"LB_PROCESS_ID": "one"}, "integer"),
        ({"LB_TAKEOVER_S": "1"}, "LB_TAKEOVER_S"),
        ({"LB_STANDBY": "maybe"}, "LB_STANDBY"),
    ],
)
def test_cluster_mistakes_name_the_setting(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"LB_STATE_DIR": str(tmp_path), **env})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LB_API_READS": "friends"}, "LB_API_READS must be public or authenticated"),
        ({"LB_API_WRITES": "nobody"}, "LB_API_WRITES must be public or authenticated"),
        ({"LB_API_READS": "authenticated"}, "nobody could authenticate"),
        ({"LB_JWT_SECRET": "s" * 40}, "set LB_JWT_AUDIENCE and LB_JWT_ISSUER"),
        (
            {"LB_JWT_SECRET": "short", "LB_JWT_AUDIENCE": "a", "LB_JWT_ISSUER": "i"},
            "at least 32 bytes",
        ),
        ({"LB_JWT_KEYS": "/nonexistent/jwks.json"}, "LB_JWT_KEYS points at"),
        ({"LB_API_KEYS": "/nonexistent/keys"}, "LB_API_KEYS points at"),
        ({"LB_API_CORS_ORIGINS": "game.example.com"}, "is not an origin"),
        ({"LB_API_CORS_ORIGINS": "https://a.example/page"}, "is not an origin"),
    ],
)
def test_caller_settings_are_checked(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"LB_STATE_DIR": str(tmp_path), **env})


def test_writes_are_authenticated_once_someone_can_authenticate(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("")
    base = {"LB_STATE_DIR": str(tmp_path)}
    assert not Settings.from_env(base).writes_authenticated
    assert Settings.from_env({**base, "LB_API_KEYS": str(keys)}).writes_authenticated
    s = Settings.from_env({**base, "LB_API_KEYS": str(keys), "LB_API_WRITES": "public"})
    assert not s.writes_authenticated
    s = Settings.from_env({**base, "LB_API_CORS_ORIGINS": "https://a.example, http://b:8080/"})
    assert s.cors_origins == ("https://a.example", "http://b:8080")
