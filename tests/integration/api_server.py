"""Run the real HTTP app under uvicorn on a free loopback port, in a thread, for one test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from api.app import create_app
from api.server import bind, make_server, url_of
from config.settings import Secret, Settings
from tests.poll import poll


def api_settings(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, keys: str, **over: Any
) -> Settings:
    """Settings of one test's API: its own topic and namespace, test keys."""
    return Settings(
        kafka_bootstrap=kafka_bootstrap,
        redis_url=Secret(redis_url),
        topic=topic,
        dlq_topic=f"{topic}.dlq",
        hmac_keys=Secret(keys),
        namespace=namespace,
        **over,
    )


def job_api_settings(env: dict[str, str], namespace: str, keys: str, **over: Any) -> Settings:
    """Settings of an API over what a job run with ``env`` (``streams.job_env``) writes."""
    return api_settings(
        env["LB_KAFKA_BOOTSTRAP"],
        env["LB_REDIS_URL"],
        env["LB_TOPIC"],
        namespace,
        keys,
        games_file=Path(env["LB_GAMES"]),
        **over,
    )


@contextmanager
def running_api(settings: Settings, **app_options: Any) -> Iterator[str]:
    """The app served on ``127.0.0.1:<free port>``; yields its base URL, stops it after."""
    sock = bind("127.0.0.1", 0)
    server = make_server(create_app(settings, **app_options), quiet=True)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    poll("the API starts", lambda: server.started or not thread.is_alive(), 30)
    assert server.started, "the API did not start"
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
