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

Within one batch the job holds what it builds (the lookups, the fold's
changes, the commands) until the batch is written, so the youngest
generation fills with objects that are all still alive: a young collection
in the middle of a batch walks tens of thousands of them, frees none, and
moves them to the middle generation to be walked again there. A replayed
history's batch, whose dedupe lookups are thousands of small lists, started
one or more such collections per batch: about a sixth of its CPU per event.
:func:`collector_paused` keeps the collector out of a batch; what the batch
leaves alive is collected after it, as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside the block; the collector resumes after it.

    For one batch's planning and writing (see the module docstring): its
    objects are freed by reference counting when the batch is done, so a
    collection inside it would walk them for nothing. Allocations keep being
    counted, so the first allocation after the block starts a young
    collection if the batch left more than its threshold alive; cyclic
    garbage made inside waits for that collection. A no-op where the
    collector is off already (nested blocks, or a caller that turned it off).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
