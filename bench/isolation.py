"""A CPU for Redis and the reader alone while a benchmark measures reads.

On a 2-core machine everything else that runs (the job's processes, Kafka,
the benchmark itself, whatever else the machine is doing) competes with Redis
for a CPU, and a read then measures waiting for a CPU rather than waiting
behind one of the job's writes. Pinning Redis to a CPU (``sched_setaffinity``)
does not keep others off that CPU; a cpuset does. :func:`isolated` moves every
process of the machine except Redis into a cpuset of the other CPUs (cgroup v1
``cpuset`` or cgroup v2 with the ``cpuset`` controller), pins Redis' main
thread to the first CPU, moves Redis' fork children (an AOF rewrite: in
production it has a core of its own) to the others as they appear, and puts
everything back on exit. A process that must share Redis' CPU (the reader)
calls :func:`join_kept` at its start. Processes started meanwhile are in the
cpuset too and are moved back with the rest.

Needs root. Where no cpuset can be made, it falls back to affinity alone and
says so (``Isolation.cpuset`` is None). A run killed with SIGKILL leaves the
cpuset behind; the next run releases it first, and so does
``python -m bench.isolation --release``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

NAME = "lb-bench-rest"
V1_ROOT = Path("/sys/fs/cgroup/cpuset")
V2_ROOT = Path("/sys/fs/cgroup")
#: How often Redis' fork children are looked for (seconds).
CHILD_POLL_S = 0.01


@dataclass(frozen=True)
class Isolation:
    """Which CPUs Redis keeps, which the rest got, and the cpuset (None: affinity only)."""

    kept: frozenset[int]
    rest: frozenset[int]
    root: Path | None
    cpuset: Path | None

    def describe(self) -> str:
        """One line for a benchmark's section."""
        kept, rest = cpu_list(self.kept), cpu_list(self.rest)
        if self.cpuset is None:
            return f"Redis' main thread pinned to CPU {kept}, the benchmark and job to {rest}"
        return (
            f"Redis and the reader alone on CPU {kept}: every other process of the machine "
            f"in a cpuset of CPU {rest} for the run (`bench/isolation.py`)"
        )


def cpu_list(cpus: Iterable[int]) -> str:
    """``{0, 2, 3}`` -> ``"0,2-3"`` (the kernel's list format)."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def split(cpus: Iterable[int]) -> tuple[frozenset[int], frozenset[int]]:
    """The first CPU for Redis, the others for the rest; at least two are needed."""
    ordered = sorted(set(cpus))
    if len(ordered) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return frozenset(ordered[:1]), frozenset(ordered[1:])


def movable(pid: int, ppid: int, keep: frozenset[int]) -> bool:
    """Whether a process goes to the cpuset: not init, not a kernel thread, not kept."""
    return pid > 2 and ppid != 2 and pid not in keep


def _procs(group: Path) -> list[int]:
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def _move(pid: int, group: Path) -> bool:
    try:
        (group / "cgroup.procs").write_text(str(pid))
    except OSError:  # a kernel thread, or gone
        return False
    return True


def _root() -> Path | None:
    """The cpuset hierarchy's root, or None where there is none (or no root)."""
    if (V1_ROOT / "cpuset.cpus").exists():
        return V1_ROOT
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpuset" in controllers.read_text().split():
        return V2_ROOT
    return None


def release(root: Path | None = None) -> int:
    """Move every process of a leftover cpuset back to the root and remove it."""
    root = root or _root()
    if root is None or not (root / NAME).exists():
        return 0
    moved = 0
    for _ in range(3):  # processes may fork while they are moved
        for pid in _procs(root / NAME):
            moved += _move(pid, root)
    with contextlib.suppress(OSError):
        (root / NAME).rmdir()
    return moved


def _make(root: Path, rest: frozenset[int]) -> Path | None:
    group = root / NAME
    try:
        if root == V2_ROOT:
            (root / "cgroup.subtree_control").write_text("+cpuset")
        group.mkdir()
        (group / "cpuset.cpus").write_text(cpu_list(rest))
        mems = root / "cpuset.mems"
        if mems.exists():
            (group / "cpuset.mems").write_text(mems.read_text().strip() or "0")
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    return group


def _watch_children(redis_pid: int, group: Path, stop: threading.Event) -> None:
    """Move Redis' fork children (AOF rewrites) into the cpuset as they appear."""
    children = Path(f"/proc/{redis_pid}/task/{redis_pid}/children")
    while not stop.wait(CHILD_POLL_S):
        try:
            pids = [int(p) for p in children.read_text().split()]
        except OSError:
            return
        for pid in pids:
            _move(pid, group)


@contextlib.contextmanager
def isolated(redis_pid: int) -> Iterator[Isolation]:
    """Redis alone on the first CPU for the block (see the module docstring)."""
    kept, rest = split(os.sched_getaffinity(0))
    redis_affinity = os.sched_getaffinity(redis_pid)
    root = _root()
    release(root)
    group = _make(root, rest) if root is not None and os.geteuid() == 0 else None
    stop = threading.Event()
    watcher: threading.Thread | None = None
    try:
        if group is not None:
            assert root is not None
            for pid in _procs(root):
                if movable(pid, _ppid(pid), frozenset({redis_pid})):
                    _move(pid, group)
            watcher = threading.Thread(
                target=_watch_children, args=(redis_pid, group, stop), daemon=True
            )
            watcher.start()
        else:
            os.sched_setaffinity(0, rest)
        os.sched_setaffinity(redis_pid, kept)
        yield Isolation(kept, rest, root if group is not None else None, group)
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(1)
        if group is not None:
            release(root)
        with contextlib.suppress(OSError):
            os.sched_setaffinity(redis_pid, redis_affinity)
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, kept | rest)


def join_kept(isolation: Isolation | None) -> None:
    """Put the calling process on Redis' CPU (out of the cpuset, where there is one)."""
    if isolation is None:
        return
    if isolation.root is not None:
        _move(os.getpid(), isolation.root)
    os.sched_setaffinity(0, isolation.kept)


def main(argv: list[str] | None = None) -> int:
    """``--release``: undo what a killed run left."""
    parser = argparse.ArgumentParser(prog="python -m bench.isolation", description=__doc__)
    parser.add_argument("--release", action="store_true", help="release a leftover cpuset")
    args = parser.parse_args(argv)
    if not args.release:
        parser.error("nothing to do: pass --release")
    moved = release()
    print(f"moved {moved} processes back; no {NAME} cpuset is left")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
