"""``lb top GAME --watch`` as a person sees it: in a real terminal (tmux), and piped.

The job tails the test's topic; the view must show the board's real top-N,
the job's lag and its dead letters by code, redraw in place as new scores
arrive (one table on screen, not a scrolling log), and print plain text
without escape codes when stdout is not a terminal.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from adapters.redis import RedisClient
from telemetry import server
from tests.integration.streams import (
    GAMES_TOML,
    REPO,
    generate,
    job_env,
    lb,
    oracle,
    produce,
    read_boards,
)
from tests.integration.watching import start_job, until


def _top(env: dict[str, str], game: str, limit: int) -> list[str]:
    done = lb(["top", game, "--limit", str(limit), "--json"], env, timeout=60)
    assert done.returncode == 0, done.stderr
    return [row["playerId"] for row in json.loads(done.stdout)["entries"]]


def test_the_watch_view_redraws_in_a_terminal_and_prints_plain_text_to_a_pipe(
    kafka_bootstrap: str, topic: str, namespace: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/bootstrap.sh installs it)")
    games = tmp_path / "games.toml"
    games.write_text(GAMES_TOML)
    state = tmp_path / "state"
    env = job_env(topic, namespace, state, games)
    stream = generate(seed=5, count=1500)
    produce(kafka_bootstrap, topic, stream.records[:1000])
    sent = Counter(
        r.expected for r in stream.records[:1000] if r.expected not in ("ok", "duplicate")
    )
    log = tmp_path / "job.log"
    job = start_job(["run"], env, log)
    socket_name = f"lbtest-{uuid.uuid4().hex[:8]}"
    try:
        until("the job registered", lambda: server.registered(state, "job"), log, job)
        # A private tmux server started with the job's environment; a 120x60 terminal.
        subprocess.run(
            [
                tmux,
                "-L",
                socket_name,
                "new-session",
                "-d",
                "-s",
                "view",
                "-x",
                "120",
                "-y",
                "60",
                f"{sys.executable} -m lb.cli top gbest --watch --limit 5 --every 0.3 --seconds 300",
            ],
            env=env,
            cwd=REPO,
            check=True,
        )

        def screen() -> str:
            return subprocess.run(
                [tmux, "-L", socket_name, "capture-pane", "-p", "-t", "view"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        def shows(players: list[str], letters: Counter[str]) -> str | None:
            text = screen()
            wanted = [*players, "records/s", "lag (records)", *letters]
            # The job's row: one process, lag 0, every code with its count.
            codes = all(f"{code} {n:,}" in text for code, n in letters.items())
            return text if all(w in text for w in wanted) and codes else None

        first = until(
            "the view shows the top 5 and the dead letters",
            lambda: shows(_top(env, "gbest", 5), sent),
            log,
            job,
        )
        assert first.count("gbest alltime top 5") == 1

        # New scores arrive: the same screen is redrawn with the new board.
        produce(kafka_bootstrap, topic, stream.records[1000:])
        everything = Counter(
            r.expected for r in stream.records if r.expected not in ("ok", "duplicate")
        )
        later = until(
            "the view shows the new board and letters",
            lambda: shows(_top(env, "gbest", 5), everything),
            log,
            job,
        )
        assert later.count("gbest alltime top 5") == 1  # redrawn in place, not scrolled
        assert "\x1b" not in later  # capture-pane without -e: text only

        # The view may show every dead letter before the last group write lands
        # (writes are paced); the piped run below must see the final board.
        expected, _ = oracle(stream.records)
        until(
            "every record is on gbest's all-time board",
            lambda: (
                read_boards(redis_client, namespace).get("gbest:alltime")
                == expected["gbest:alltime"]
            ),
            log,
            job,
        )

        # Not a terminal: plain text, no escape codes, the same content.
        piped = lb(
            ["top", "gbest", "--watch", "--limit", "5", "--every", "0.2", "--seconds", "0.5"],
            env,
            timeout=60,
        )
        assert piped.returncode == 0, piped.stderr
        assert "\x1b" not in piped.stdout
        assert piped.stdout.startswith("gbest alltime top 5\n")
        assert "job: 1 process(es)" in piped.stdout
        for code, n in everything.items():
            assert f"{code} {n:,}" in piped.stdout
        for player in _top(env, "gbest", 5):
            assert player in piped.stdout
    finally:
        subprocess.run([tmux, "-L", socket_name, "kill-server"], check=False, capture_output=True)
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)
    assert job.returncode == 0, log.read_text()[-3000:]
