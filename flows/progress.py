"""Signs of life of a running job: a progress line now and then, a summary at the end.

The counts come from :mod:`sinks.outcomes`, which the two sinks feed. A daemon
thread prints a line every ``every_s`` seconds when something changed; the
summary is printed when the process exits (normally, or after a stop signal).
Both go to stderr, next to the job's log, so stdout stays free for a caller.
With ``LB_LOG_FORMAT=json`` each is one JSON object (``step: "progress"``,
the counters, and one object per partition with its lag) instead of prose.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time

from sinks import outcomes
from telemetry import hooks, logs

_started: list[float] = []


def _line(prefix: str, started: float) -> str:
    boards, letters = outcomes.snapshot()
    elapsed = time.monotonic() - started
    return f"scoreboard job: {prefix} {elapsed:.1f} s: {outcomes.describe(boards, letters)}"


def _say(prefix: str, started: float) -> None:
    if not logs.is_json():
        print(_line(prefix, started), file=sys.stderr, flush=True)
        return
    boards, letters = outcomes.snapshot()
    counters = {**boards, "dead_letter": sum(letters.values()), "dead_letters": letters}
    counters["seconds"] = round(time.monotonic() - started, 1)
    logs.emit_progress(f"scoreboard job: {prefix}", counters)
    if hooks.enabled():
        for part in hooks.read_state().partitions:
            logs.emit_partition(part.topic, part.partition, {"lag_records": part.lag_records})


def _report(every_s: float, started: float) -> None:
    last: tuple[dict[str, int], dict[str, int]] = ({}, {})
    while True:
        time.sleep(every_s)
        now = outcomes.snapshot()
        if now != last:
            last = now
            _say("after", started)


def _summary() -> None:
    _say("stopped after", _started[0])


def start(every_s: float) -> None:
    """Report progress every ``every_s`` seconds (0: only the summary); once per process."""
    if _started:
        return
    _started.append(time.monotonic())
    atexit.register(_summary)
    if every_s > 0:
        threading.Thread(
            target=_report, args=(every_s, _started[0]), name="lb-progress", daemon=True
        ).start()
