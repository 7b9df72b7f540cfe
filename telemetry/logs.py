"""``LB_LOG_FORMAT=json``: one JSON object per line, for log shippers; text stays the default.

Every object has ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``, and
``step`` (the dataflow step the logger belongs to); ``partition`` and
``counters`` when the line is about one (a record passes them as ``extra``).
The job's progress lines and summary become objects with ``step: "progress"``
and the counters, instead of prose.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

#: Logger name prefix -> the dataflow step it speaks for.
STEPS = {
    "sources.kafka_source": "score_events",
    "domain.validation": "validate",
    "sinks.dead_letters": "dead_letters",
    "sinks.boards": "boards",
    "sinks.retry": "boards",
    "flows.progress": "progress",
    "flows": "flow",
    "telemetry": "telemetry",
}


def step_of(logger: str) -> str:
    """The step a logger speaks for (its own name when it is none of the job's)."""
    for prefix, step in STEPS.items():
        if logger == prefix or logger.startswith(prefix + "."):
            return step
    return logger


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "step": getattr(record, "step", None) or step_of(record.name),
            "msg": record.getMessage(),
        }
        for extra in ("partition", "topic", "counters"):
            value = getattr(record, extra, None)
            if value is not None:
                doc[extra] = value
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


_configured: list[str] = []


def configure(log_format: str) -> None:
    """JSON lines on stderr for ``json``; leave Python's defaults alone for ``text``."""
    if log_format != "json" or _configured:
        return
    _configured.append(log_format)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def is_json() -> bool:
    """True once :func:`configure` switched this process to JSON lines."""
    return bool(_configured)


def emit_progress(msg: str, counters: Mapping[str, Any], level: int = logging.INFO) -> None:
    """A progress line or the summary as a JSON object (``step: progress``, the counters)."""
    logging.getLogger("flows.progress").log(
        level, msg, extra={"counters": dict(counters), "step": "progress"}
    )


def emit_partition(topic: str, partition: int, counters: Mapping[str, Any]) -> None:
    """One partition's progress (its lag) as a JSON object."""
    logging.getLogger("sources.kafka_source").info(
        "partition progress",
        extra={"topic": topic, "partition": partition, "counters": dict(counters)},
    )
