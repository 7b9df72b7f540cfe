"""The secured pair's configuration and the probe's refusal lines (pure: no server)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError

from config.clients import _refusal
from config.settings import Settings
from infra import secure


def _layout(tmp_path: Path) -> secure.SecureLayout:
    return secure.SecureLayout(tmp_path / "secure", 21001, 21003)


def test_redis_conf_is_tls_only_with_the_default_user_off_and_no_plain_password(
    tmp_path: Path,
) -> None:
    conf = secure._redis_conf(_layout(tmp_path), "s3cret-pw").splitlines()
    assert "port 0" in conf and "tls-port 21003" in conf
    assert "user default off" in conf
    assert any(line.startswith("user lb on #") for line in conf)
    assert not any("s3cret-pw" in line for line in conf)


def test_broker_listeners_are_sasl_ssl_and_mutual_tls_only(tmp_path: Path) -> None:
    lines = secure._security_lines(_layout(tmp_path), "pw")
    assert "listeners=SASL_SSL://127.0.0.1:21001,CONTROLLER://127.0.0.1:21002" in lines
    assert "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL" in lines
    assert "listener.name.controller.ssl.client.auth=required" in lines
    assert not any("PLAINTEXT" in line for line in lines)


def test_settings_shown_mask_both_passwords_and_load_as_settings(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    real = secure.client_settings(layout, {"kafka": "kpw", "redis": "rpw"})
    shown = secure.shown_settings(layout)
    assert shown.keys() == real.keys()
    assert "kpw" not in str(shown) and "rpw" not in str(shown)
    settings = Settings.from_env({**real, "LB_STATE_DIR": str(tmp_path)})
    assert settings.kafka_config()["security.protocol"] == "SASL_SSL"
    assert settings.kafka_config()["sasl.mechanism"] == "SCRAM-SHA-512"
    assert settings.kafka_config()["ssl.ca.location"] == str(layout.ca_cert)
    assert settings.redis_display_url() == "rediss://lb:***@127.0.0.1:21003/0"


def test_the_probe_names_refused_credentials_and_an_untrusted_certificate(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env(
        {
            "LB_STATE_DIR": str(tmp_path),
            "LB_KAFKA_X_SASL_USERNAME": "lb",
            "LB_KAFKA_X_SSL_CA_LOCATION": "/x/ca.crt",
        }
    )
    auth = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error")
    cert = KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed")
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    assert "refused the credentials of 'lb'" in str(_refusal(settings, [auth, down]))
    assert "not signed by /x/ca.crt" in str(_refusal(settings, [down, cert]))
    assert _refusal(settings, [down]) is None
