"""Periodic jobs beside the streaming job: the global top-K merger and the window archiver.

Each job is a class with a ``run_once(now_ms)`` step that does one pass and
returns a report; the clock is read, and the cadence kept, by the ``lb``
command that drives it (``lb topk run``, ``lb archive run``).
"""
