"""A rebuild and a one-game backfill run beside the live job while events keep
arriving; the backfill is killed with SIGKILL once and restarted. At the end
every board, counter and dead letter equals the oracle (nothing lost or
applied twice across the cut-overs), and the backfill never rewrote another
game's keys: their values and expiry times are unchanged and Redis reported
no command on them (keyspace notifications) while the backfill ran."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from adapters.redis import RedisClient
from tests.faults.harness import Job, Scenario, wait_for
from tests.integration.test_backfill import group_snapshot

pytestmark = pytest.mark.timeout(600)

#: The game the backfill replays, and the one it must leave alone (whose
#: events stop early, so nothing else writes it while the backfill runs).
GAME, OTHER = "gbest", "gday"
BACKFILL = ("backfill", "--game", GAME)


def _staged(client: RedisClient, namespace: str) -> list[bytes]:
    return list(client.scan_iter(match=f"{namespace}~backfill-*", count=1000))


def _stat(pid: int) -> list[str]:
    """State, parent pid, ... of a process (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _running(pid: int) -> bool:
    fields = _stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    """Running processes whose parent is ``pid``."""
    pids = (int(path.name) for path in Path("/proc").iterdir() if path.name.isdigit())
    return [p for p in pids if _running(p) and _stat(p)[1:2] == [str(pid)]]


def test_rebuild_and_a_killed_backfill_beside_the_live_job_lose_and_double_nothing(
    make_scenario: Any, private_redis: Any, namespace: str
) -> None:
    scenario: Scenario = make_scenario(seed=1515, count=40_000)
    records = scenario.records
    # OTHER's events end in the first third of the stream (bad records stay).
    cut = len(records) // 3
    scenario.records[:] = [
        rec
        for i, rec in enumerate(records)
        if i < cut or rec.event is None or rec.event.game_id != OTHER
    ]
    scenario.feeder._pause_s = 0.4  # ~40 s of stream: both runs cut over while it flows
    seen: list[Any] = []

    def rebuild_then_backfill(s: Scenario) -> None:
        rebuild = Job(s.env, s.log_dir / "rebuild.log", ("rebuild", "--processes", "2"))
        backfill = Job(s.env, s.log_dir / "backfill.log", (*BACKFILL, "--processes", "2"))
        try:
            # Killed while its replay processes write staged keys (mid-replay), then
            # started again. Only the parent is killed: its replay processes must
            # not outlive it, or they would write into the rerun's staging keys.
            wait_for(lambda: bool(_staged(private_redis, namespace)), 120, "backfill staging")
            workers = _children(backfill.proc.pid)
            backfill.proc.kill()
            backfill.proc.wait(timeout=30)
            assert workers, "the backfill had no replay processes"
            wait_for(lambda: not any(map(_running, workers)), 10, "replay processes gone")
            assert _staged(private_redis, namespace), "the kill came after the backfill"
            assert rebuild.proc.wait(timeout=240) == 0, rebuild.log()[-3000:]
            assert "lb rebuild:" in rebuild.log() and "ETA" in rebuild.log()
            before = group_snapshot(private_redis, namespace, OTHER)
            assert before, f"no {OTHER} keys"
            private_redis.config_set("notify-keyspace-events", "KA")
            pubsub = private_redis.pubsub()
            pubsub.psubscribe(
                f"__keyspace@0__:{namespace}:{{{OTHER}}}:*",
                f"__keyspace@0__:{namespace}~*{{{OTHER}}}*",
            )
            again = Job(s.env, s.log_dir / "backfill2.log", BACKFILL)
            assert again.proc.wait(timeout=240) == 0, again.log()[-3000:]
            assert '"groups": 1' in again.log(), again.log()[-2000:]
            time.sleep(0.5)  # notifications already published are delivered in order
            while (message := pubsub.get_message(timeout=0.2)) is not None:
                if message["type"] == "pmessage":
                    seen.append((message["channel"], message["data"]))
            pubsub.close()
            private_redis.config_set("notify-keyspace-events", "")
            assert group_snapshot(private_redis, namespace, OTHER) == before
            assert not seen, seen[:5]
            assert not _staged(private_redis, namespace)
        finally:
            for job in (rebuild, backfill):
                if job.alive():
                    job.kill()

    scenario.run([rebuild_then_backfill], catch_up_s=240)
    assert "Traceback" not in scenario.job.log()
    for name in ("rebuild", "backfill2"):
        print(name, (scenario.log_dir / f"{name}.log").read_text().splitlines()[-1])
