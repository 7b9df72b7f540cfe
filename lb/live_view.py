"""The live terminal view of ``lb top GAME --watch`` and ``lb demo``: top-N, rate, lag, letters.

What is shown is one :class:`Frame` (plain data, built from a board page and
the registered jobs' scrapes); it is drawn either as a ``rich`` table redrawn
in place (a terminal) or as plain text printed whenever it changes (a pipe, a
log file), so a script reading stdout never receives escape codes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from telemetry import derive, scrape, server


@dataclass(frozen=True)
class Frame:
    """Everything one redraw shows."""

    title: str
    entries: list[dict[str, Any]]
    jobs: int = 0
    records_per_s: float = 0.0
    lag: int = 0
    lag_seconds: float = 0.0
    records: dict[str, int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    note: str = ""

    def plain(self) -> str:
        """The frame as text for a pipe: no colours, no cursor movement."""
        lines = [self.title]
        if not self.entries:
            lines.append("  (no entries)")
        for row in self.entries:
            lines.append(f"  {row['rank']:>4}  {row['playerId']:<16} {row['score']:>14,}")
        lines.append(self.status_line())
        return "\n".join(lines)

    def status_line(self) -> str:
        """The job's line: rate, lag and dead letters by code."""
        if not self.jobs:
            return "job: no running job registered" + (f" ({self.note})" if self.note else "")
        letters = ", ".join(f"{code} {n:,}" for code, n in sorted(self.dead_letters.items()))
        return (
            f"job: {self.jobs} process(es), {self.records_per_s:,.0f} records/s, "
            f"lag {self.lag:,} records ({self.lag_seconds:.1f} s), "
            f"{derive.conservation(self.records):,} records, "
            f"dead letters: {letters or 'none'}"
        )

    def rich(self) -> Group:
        """The frame as a ``rich`` renderable: the board table and the job's line."""
        board = Table(title=self.title, expand=False)
        board.add_column("rank", justify="right")
        board.add_column("player")
        board.add_column("score", justify="right")
        for row in self.entries:
            board.add_row(str(row["rank"]), str(row["playerId"]), f"{row['score']:,}")
        if not self.entries:
            board.add_row("-", "(no entries)", "-")
        job = Table(show_header=True, expand=False, title="job")
        for name in ("processes", "records/s", "lag (records)", "lag (s)", "dead letters"):
            job.add_column(name, justify="right")
        letters = ", ".join(f"{code} {n:,}" for code, n in sorted(self.dead_letters.items()))
        job.add_row(
            str(self.jobs),
            f"{self.records_per_s:,.0f}",
            f"{self.lag:,}",
            f"{self.lag_seconds:.1f}",
            letters or "none",
        )
        return Group(board, job, Text(self.note, style="dim"))


class JobWatcher:
    """Scrapes the registered job processes; rates between one look and the next."""

    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._state_dir = state_dir
        self._clock = clock
        self._last: dict[str, tuple[float, derive.Samples]] = {}

    def look(self, topic: str | None = None) -> list[derive.JobView]:
        """One view per live job process (of ``topic`` when given)."""
        views = []
        seen: dict[str, tuple[float, derive.Samples]] = {}
        for entry in server.registered(self._state_dir, "job"):
            if topic is not None and entry.get("topic") != topic:
                continue
            after = scrape.samples(entry["address"])
            if after is None:
                continue
            now = self._clock()
            when, before = self._last.get(entry["address"], (now, after))
            seen[entry["address"]] = (now, after)
            views.append(derive.job_view(before, after, now - when))
        self._last = seen
        return views


def frame(
    title: str, entries: Sequence[Mapping[str, Any]], views: Sequence[derive.JobView]
) -> Frame:
    """A frame from a board page's entries and the jobs' views (summed over processes)."""
    records: dict[str, int] = {}
    letters: dict[str, int] = {}
    for view in views:
        for name, n in view.records.items():
            records[name] = records.get(name, 0) + n
        for code, n in view.dead_letters.items():
            letters[code] = letters.get(code, 0) + n
    return Frame(
        title=title,
        entries=[dict(row) for row in entries],
        jobs=len(views),
        records_per_s=sum(v.rates.get("records_per_s", 0.0) for v in views),
        lag=sum(sum(v.lag.values()) for v in views),
        lag_seconds=max((v.lag_seconds for v in views), default=0.0),
        records=records,
        dead_letters=letters,
    )


def show(
    frames: Iterator[Frame],
    out: TextIO = sys.stdout,
    terminal: bool | None = None,
    plain_every_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Frame | None:
    """Draw every frame: redrawn in place on a terminal, printed on change otherwise.

    Off a terminal (a pipe, a log file) a changed frame is printed at most every
    ``plain_every_s`` seconds, and the last one always, so a file gets a table
    now and then rather than one a second. Returns the last frame (``None``
    when there was none); Ctrl-C ends the loop.
    """
    last: Frame | None = None
    is_tty = out.isatty() if terminal is None else terminal
    try:
        if is_tty:
            console = Console(file=out)
            with Live(console=console, auto_refresh=False, transient=False) as live:
                for current in frames:
                    live.update(current.rich(), refresh=True)
                    last = current
        else:
            printed: str | None = None
            printed_at = 0.0
            try:
                for current in frames:
                    last = current
                    text = current.plain()
                    if text != printed and (
                        printed is None or clock() - printed_at >= plain_every_s
                    ):
                        print(text + "\n", file=out, flush=True)
                        printed, printed_at = text, clock()
            finally:
                if last is not None and last.plain() != printed:
                    print(last.plain() + "\n", file=out, flush=True)
    except KeyboardInterrupt:
        pass
    return last
