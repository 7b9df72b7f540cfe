"""Redis restarts, stalls, fails for longer than the retry budget, and is flushed.

Each test runs the job against the private Redis while a feeder produces a
stream, injects its fault mid-stream and ends with the exactly-once verdict:
boards equal to the oracle, and applied + noop + duplicate + dead letters equal
to the records produced.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from tests.faults.harness import Scenario, wait_for
from tests.integration.streams import lb

pytestmark = pytest.mark.timeout(420)

COUNT = 20_000


def test_redis_restarts_gracefully_and_by_sigkill_with_appendfsync_always(
    make_scenario: Callable[..., Scenario],
) -> None:
    """SHUTDOWN fsyncs the AOF; with ``appendfsync always`` even SIGKILL loses no
    acknowledged write. Either way the job waits, reconnects and loses nothing."""

    def graceful(s: Scenario) -> None:
        s.private.stop("redis")  # SIGTERM: SHUTDOWN, AOF fsynced
        time.sleep(2.0)
        s.timings["Redis start (after SIGTERM)"] = s.private.up()

    def crash(s: Scenario) -> None:
        s.client.config_set("appendfsync", "always")
        time.sleep(0.5)
        s.private.stop("redis", kill=True)
        time.sleep(2.0)
        s.timings["Redis start (after SIGKILL)"] = s.private.up()

    scenario = make_scenario(71, COUNT)
    scenario.run([graceful, crash])
    assert "retrying" in scenario.job.log()  # the sink did wait, it did not crash


def test_a_stalled_redis_slows_the_job_down_and_loses_nothing(
    make_scenario: Callable[..., Scenario], private_env: dict[str, str]
) -> None:
    """SIGSTOP for longer than the socket timeout: commands time out, the sink
    re-sends them (a script Redis had buffered runs later and finds its
    watermark already written), and after SIGCONT the job catches up."""
    private_env["LB_REDIS_TIMEOUT_S"] = "2"

    def stall(s: Scenario) -> None:
        pid = s.private.pid("redis")
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(6.0)
            assert s.job.alive()
        finally:
            os.kill(pid, signal.SIGCONT)

    scenario = make_scenario(72, COUNT)
    scenario.run([stall])
    log = scenario.job.log()
    assert "Timeout" in log and "recovered after" in log, log[-3000:]


def test_an_outage_beyond_the_retry_budget_fails_loudly_and_a_restart_resumes(
    make_scenario: Callable[..., Scenario], private_env: dict[str, str]
) -> None:
    """With ``LB_REDIS_RETRY_S=3`` a longer outage ends the job with the setting
    named; restarted once Redis is back, it resumes and doubles nothing."""
    private_env["LB_REDIS_RETRY_S"] = "3"

    def long_outage(s: Scenario) -> None:
        s.private.stop("redis")
        took = wait_for(lambda: not s.job.alive(), 60, "the job giving up")
        s.timings["job gave up after"] = took
        assert s.job.proc.returncode == 1
        log = s.job.log()
        assert "scoreboard job: error:" in log and "LB_REDIS_RETRY_S=3" in log, log[-3000:]
        assert "panicked" not in log and "Traceback" not in log, log[-3000:]  # one line
        s.private.up()
        s.job = s.start_job()

    scenario = make_scenario(73, COUNT)
    scenario.run([long_outage])


def test_a_flushed_redis_is_rebuilt_from_kafka_while_events_keep_arriving(
    make_scenario: Callable[..., Scenario],
) -> None:
    """The projection is lost (FLUSHALL). The runbook: stop the job, ``lb rebuild``,
    start the job again; it resumes from its recovery store and skips what the
    rebuild applied, while the feeder never stopped."""

    def flush_and_rebuild(s: Scenario) -> None:
        s.client.flushall()
        assert s.job.stop() == 0
        began = time.monotonic()
        done = lb(["rebuild"], s.env, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        s.timings["lb rebuild"] = time.monotonic() - began
        s.job = s.start_job()

    scenario = make_scenario(74, COUNT)
    scenario.run([flush_and_rebuild])
