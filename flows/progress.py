"""Signs of life of a running job: a progress line now and then, a summary at the end.

The counts come from :mod:`sinks.outcomes`, which the two sinks feed. A daemon
thread prints a line every ``every_s`` seconds when something changed; the
summary is printed when the process exits (normally, or after a stop signal).
Both go to stderr, next to the job's log, so stdout stays free for a caller.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time

from sinks import outcomes

_started: list[float] = []


def _line(prefix: str, started: float) -> str:
    boards, letters = outcomes.snapshot()
    elapsed = time.monotonic() - started
    return f"scoreboard job: {prefix} {elapsed:.1f} s: {outcomes.describe(boards, letters)}"


def _report(every_s: float, started: float) -> None:
    last: tuple[dict[str, int], dict[str, int]] = ({}, {})
    while True:
        time.sleep(every_s)
        now = outcomes.snapshot()
        if now != last:
            last = now
            print(_line("after", started), file=sys.stderr, flush=True)


def _summary() -> None:
    print(_line("stopped after", _started[0]), file=sys.stderr, flush=True)


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
