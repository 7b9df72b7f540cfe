"""Work beside the streaming job, on the log and the boards it keeps.

* periodic jobs: the global top-K merger, the window archiver, the sketch
  publisher. Each is a class with a one-pass step (``run_once(now_ms)``,
  ``publish(games, now_ms)``) that returns a report; the clock is read, and
  the cadence kept, by the ``lb`` command that drives it (``lb topk run``,
  ``lb archive run``, ``lb sketches publish``);
* replays of the log with the job's own code path (``lb verify``,
  ``lb backfill``, ``lb rebuild``) and the tools they cut over with: the
  group cut-over, the namespace swap, replay processes;
* the dead-letter reader behind ``lb dlq``.
"""
