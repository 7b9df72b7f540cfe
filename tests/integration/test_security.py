"""Credentials reach the clients and never the output: a Redis ACL user runs the
job; a wrong password fails with a clear error that does not echo it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from config.settings import Settings
from domain.errors import ServiceError
from infra import services as svc
from tests.integration.streams import (
    GAMES_TOML,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_boards,
)


def test_job_runs_as_a_redis_acl_user_and_never_prints_the_password(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    user, password = f"u{namespace}"[:40], "pw-" + namespace[::-1]
    redis_client.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", f"~{namespace}:*", "+@all", "-@admin"
    )
    try:
        games = tmp_path / "games.toml"
        games.write_text(GAMES_TOML)
        stream = generate(seed=31, count=1500)
        produce(kafka_bootstrap, topic, stream.records)
        env = job_env(topic, namespace, tmp_path / "state", games)
        env.update(LB_REDIS_USERNAME=user, LB_REDIS_PASSWORD=password)
        done = lb(["run", "--until-end"], env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert read_boards(redis_client, namespace) == oracle(stream.records)[0]
        assert password not in done.stdout + done.stderr

        env.update(LB_REDIS_PASSWORD="wrong-" + password)
        failed = lb(["run", "--until-end"], env, timeout=300)
        assert failed.returncode != 0
        assert "WRONGPASS" in failed.stderr or "invalid username-password" in failed.stderr
        assert password not in failed.stdout + failed.stderr
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)


def test_settings_repr_hides_credentials() -> None:
    s = Settings.from_env(
        {"LB_REDIS_URL": "rediss://svc:topsecret@127.0.0.1:1/0", "LB_REDIS_PASSWORD": "alsosecret"}
    )
    assert "topsecret" not in repr(s) and "alsosecret" not in repr(s)


def test_a_taken_port_is_a_clear_error(tmp_path: Path, services: dict[str, Any]) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    dirs = svc.ServiceDirs(state_dir=tmp_path / "state", cache_dir=Settings.from_env().cache_dir)
    try:
        with pytest.raises(ServiceError, match=f"127.0.0.1:{port} is already taken"):
            svc.up(dirs, redis_port=port, kafka_port=port + 1)
    finally:
        blocker.close()
        svc.down(dirs)
