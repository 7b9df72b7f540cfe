"""Progress bars with rate and ETA for long commands (``lb produce``, ``lb rebuild``, benches).

Drawn with ``rich`` on stderr only when stderr is a terminal: a log file or a
pipe gets no escape codes (the commands' JSON summaries stay on stdout).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RateColumn(TextColumn):
    """Items per second over the task's whole run (rich's own speed is per byte)."""

    def __init__(self, unit: str) -> None:
        super().__init__("")
        self._unit = unit

    def render(self, task: Any) -> Any:
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return f"{rate:>10,.0f} {self._unit}/s"


class Bar:
    """One bar: ``advance_to(done)``, ``note(text)``, then ``close()``; a no-op off a terminal."""

    def __init__(
        self,
        what: str,
        total: float | None,
        unit: str = "records",
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        stream = stream or sys.stderr
        self.total = total
        self._progress: Progress | None = None
        if enabled and stream.isatty():
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                RateColumn(unit),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"),
                console=Console(file=stream),
                refresh_per_second=4,
            )
            self._task = self._progress.add_task(what, total=total, note="")
            self._progress.start()

    @property
    def active(self) -> bool:
        """True while a bar is drawn (stderr is a terminal)."""
        return self._progress is not None

    def advance_to(self, done: float, note: str | None = None) -> None:
        """Set how much is done (and the note after the bar); never past the total."""
        if self.total is not None:
            done = min(done, self.total)
        if self._progress is not None:
            if note is None:
                self._progress.update(self._task, completed=done)
            else:
                self._progress.update(self._task, completed=done, note=note)

    def close(self) -> None:
        """Draw the last state and leave the bar on screen."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
