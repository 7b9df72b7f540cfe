"""How the benchmark reports print numbers: one rule for every table and the headline.

Pure and dependency-free, so the headline (also pure) and the benchmarks'
own sections format a ratio the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def fmt_int(value: float | None) -> str:
    """``1,234`` or a dash."""
    return "-" if value is None else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    """A ratio to about three significant figures (0.62x, 10.1x, 4,249x), or a dash."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}x"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def processes(count: int) -> str:
    """``1 process``, ``2 processes``."""
    return f"{count} process" if count == 1 else f"{count} processes"


def writes_name(run: Mapping[str, Any]) -> str:
    """A ``bench.steady`` run's write bound and pace (a run from before the pace: unpaced)."""
    bound = "no bound" if run["bound"] == 0 else f"bound {run['bound']}"
    pace = run.get("pace", 0)
    return f"{bound}, {'unpaced' if pace == 0 else f'pace {pace}'}"
