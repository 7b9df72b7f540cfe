"""CPU priority of a benchmark's processes, autogroups included.

On a kernel with ``sched_autogroup_enabled`` (this machine's), the scheduler
first shares the CPUs between sessions (one autogroup each), and a process's
nice value only weighs against processes of its own session. A Redis at
nice -10 in a session of its own still gets no more than any other busy
session, and waits for a CPU for tens of milliseconds while the job's
processes (a session of their own) run. What weighs across sessions is the
autogroup's own nice value, ``/proc/<pid>/autogroup``. :func:`raised` sets
both, and puts them back.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

_AUTOGROUP = re.compile(r"nice\s+(-?\d+)")


def autogroup_nice(pid: int) -> int | None:
    """The nice value of ``pid``'s autogroup; None where the kernel has none."""
    try:
        found = _AUTOGROUP.search(Path(f"/proc/{pid}/autogroup").read_text())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def set_priority(pid: int, nice: int) -> None:
    """Give ``pid`` (0: this process) and its autogroup the nice value ``nice``.

    The autogroup's value applies to every process of that session; raising it
    needs root, so a refusal leaves the autogroup as it was.
    """
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid or os.getpid()}/autogroup").write_text(str(nice))


@contextlib.contextmanager
def raised(pid: int, nice: int) -> Iterator[None]:
    """``pid`` (and its autogroup) at ``nice`` for the block, then as before."""
    before = os.getpriority(os.PRIO_PROCESS, pid)
    group_before = autogroup_nice(pid)
    set_priority(pid, nice)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, before)
            if group_before is not None:
                Path(f"/proc/{pid}/autogroup").write_text(str(group_before))
