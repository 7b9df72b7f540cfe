"""The API's own request metrics (``/metrics``) and the health routes shared with the job.

Requests are counted by route *template* (``/v1/leaderboards/{game}``), never
by raw path, so a scan of made-up URLs cannot grow the label set; anything no
route matched is ``route="unmatched"``. The exposition is ``prometheus_client``'s
text exposition of this process's default registry.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUESTS = Counter(
    "lb_http_requests",
    "HTTP requests answered, by method, route and status",
    ["method", "route", "status"],
)
LATENCY = Histogram(
    "lb_http_request_seconds",
    "Time to answer an HTTP request (until the response starts), by route",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

REFUSALS = Counter(
    "lb_http_refusals",
    "Requests refused before any route ran, by route class (reads, pushes, writes) and reason "
    "(unauthenticated, forbidden, rate_limited)",
    ["route_class", "reason"],
)
RATE_LIMIT_ERRORS = Counter(
    "lb_http_rate_limit_errors",
    "Requests let through uncounted because Redis did not answer the rate limiter",
)


class RequestMetrics:
    """ASGI middleware: one counter increment and one histogram observation per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                LATENCY.labels(_route(scope)).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            REQUESTS.labels(scope["method"], _route(scope), str(status[0])).inc()


def _route(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


def exposition() -> tuple[bytes, str]:
    """The default registry in the text format, and its content type (the library's own)."""
    return generate_latest(), CONTENT_TYPE_LATEST
