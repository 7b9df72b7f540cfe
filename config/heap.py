"""How a long-running process asks Python's cyclic garbage collector to work less.

The job makes a handful of short-lived objects per event (records, tuples,
commands), a hundred thousand a second, and keeps a large, long-lived planner
cache. With CPython's defaults the youngest generation is collected every 700
allocations and every tenth of those collections walks the middle one too, so
a process spends a fifth to a quarter of its CPU in the collector
(``python -m bench.cpu --collector default`` against ``--collector tuned``;
figures in docs/BENCHMARKS.md). Almost nothing the hot path makes is part of
a reference cycle, so reference counting frees it at once and a rarer young
collection loses nothing.
"""

from __future__ import annotations

import gc

#: Allocations between two collections of the youngest generation (CPython: 700).
STREAM_YOUNG_THRESHOLD = 50_000


def settle_heap() -> None:
    """Move everything made so far out of the cyclic collector's sight (``gc.freeze``).

    A process's modules and start-up objects (Bytewax, FastAPI, pydantic, the
    clients, the catalog) are tens of thousands of long-lived objects that a
    full collection would walk again and again: 50 ms or more on this
    project's machine, in the middle of whatever was in flight. Called once a
    process is built, before it works; objects made later are collected as usual.
    """
    gc.collect()
    gc.freeze()


def tune_for_streaming() -> None:
    """:func:`settle_heap`, and collect the youngest generation less often.

    For the job's and the replay's processes, whose per-event garbage is
    acyclic (see the module docstring); the middle and oldest generations keep
    CPython's ratios, so a cycle still goes within a few young collections.
    """
    settle_heap()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(STREAM_YOUNG_THRESHOLD, middle, oldest)
