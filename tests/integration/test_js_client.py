"""The TypeScript client (clients/js) against a running ``lb serve``, with Node's test runner.

The fixture starts the streaming job (``lb run``) and the server (``lb serve``)
as a person would, on the test's own topic and namespace, with game rules of
its own (:data:`JS_GAMES`); then ``node --test`` runs ``clients/js/test/``.
The Node tests make their boards the way a game server does: signed scores
posted to ``/v1/scores``, produced to Kafka, applied by the job. They need the
package built (``scripts/build_js.sh``, run by ``scripts/bootstrap.sh``).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.streams import KEYS, REPO, job_env
from tests.poll import poll

JS = REPO / "clients" / "js"
#: Bounds the whole Node run (its own tests wait at most 30 s for any one thing).
NODE_TIMEOUT_S = 150


def js_games() -> str:
    """The games the Node tests use; ``jscup`` runs a tournament now."""
    today = dt.datetime.now(dt.UTC).date()
    start, end = today - dt.timedelta(days=1), today + dt.timedelta(days=2)
    games = "".join(
        f'[games."{game}"]\nmax_score = 1000000\n' for game in ("jsreads", "jslive", "g1")
    )
    return (
        f'{games}[games."jscup"]\nwindows = ["alltime"]\n'
        f'[games."jscup".tournaments]\nnow-cup = {{ start = {start}, end = {end} }}\n'
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _healthy(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"lb serve ended with {proc.returncode}"
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def served(kafka_bootstrap: str, topic: str, namespace: str, tmp_path: Path) -> Iterator[str]:
    """``lb run`` and ``lb serve`` on the test's topic and namespace; yields the API's URL."""
    games = tmp_path / "games.toml"
    games.write_text(js_games())
    log = (tmp_path / "job-and-server.log").open("wb")
    job = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "run"],
        env=job_env(topic, namespace, tmp_path / "state", games),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "serve", "--quiet", "--port", str(port)],
        env=job_env(topic, namespace, tmp_path / "serve-state", games),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        poll("lb serve answers /healthz", lambda: _healthy(url, server), 60)
        yield url
    finally:
        _stop(server)
        _stop(job)
        log.close()


def test_the_node_tests_of_the_typescript_client_pass(served: str) -> None:
    node = shutil.which("node")
    assert node, "Node.js is installed on this kind of machine (scripts/build_js.sh needs it)"
    assert (JS / "dist" / "index.js").exists(), "clients/js is not built: run scripts/build_js.sh"
    files = sorted(str(p.relative_to(JS)) for p in (JS / "test").glob("*.test.mjs"))
    assert len(files) >= 4, files
    env = {**os.environ, "LB_API_URL": served, "LB_TEST_KEY": KEYS.split(",")[0]}
    run = subprocess.run(
        [node, "--experimental-websocket", "--test", "--test-reporter=spec", *files],
        cwd=JS,
        env=env,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
    )
    print(run.stdout[-6000:])
    assert run.returncode == 0, f"node --test failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert " fail 0\n" in run.stdout
