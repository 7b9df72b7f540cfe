"""The broker restarts mid-stream, gracefully and by SIGKILL; the job survives both.

The feeder keeps producing through each outage (its idempotent producer
buffers and retries), the job's consumers reconnect on their own and its
dead-letter producer waits for acknowledgements, so the running job ends with
every board equal to the oracle and every record accounted for exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.harness import Scenario

pytestmark = pytest.mark.timeout(420)

COUNT = 24_000
OUTAGE_S = 3.0


def _restart_broker(kill: bool) -> Any:
    def fault(s: Scenario) -> None:
        s.private.stop("kafka", kill=kill)
        time.sleep(OUTAGE_S)  # the broker is down: the feeder buffers, the job idles
        s.timings[f"broker start ({'SIGKILL' if kill else 'SIGTERM'})"] = s.private.up()

    return fault


def test_the_job_rides_out_broker_restarts(make_scenario: Callable[..., Scenario]) -> None:
    make_scenario(505, COUNT).run([_restart_broker(kill=False), _restart_broker(kill=True)])
