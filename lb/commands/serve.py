"""``lb serve``: the HTTP API (reads, live pushes, the live page, score intake) on loopback.

Binds ``127.0.0.1`` unless ``--host`` says otherwise: the server has no TLS
and no reader authentication of its own, so exposing it beyond this machine
is a deliberate choice, normally behind a reverse proxy. Ctrl-C or SIGTERM
stops it; records already handed to Kafka are flushed first.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from types import FrameType

from api.app import MAX_BODY_BYTES, MAX_BODY_ENV, PAGE_CACHE_ENV, create_app
from api.pages import DEFAULT_TTL_MS
from api.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    bind,
    make_server,
    parse_page_cache_ms,
    parse_port,
    parse_workers,
    serve_workers,
    url_of,
)
from config.heap import settle_heap
from config.settings import Settings
from telemetry import server as server_registry


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    port = parse_port(args.port)
    workers = parse_workers(args.workers)
    settings = Settings.from_env()
    page_cache_ms = parse_page_cache_ms(args.page_cache_ms)
    app = (
        create_app(settings, max_body=args.max_body, page_cache_ms=page_cache_ms)
        if workers == 1
        else None
    )
    sock = bind(args.host, port)
    if not _is_loopback(args.host):
        print(
            f"lb serve: listening on {args.host}, beyond loopback: put TLS and "
            "authentication in front of it",
            file=sys.stderr,
        )
    url = url_of(sock)
    host, bound = sock.getsockname()[:2]
    server_registry.register(
        settings.state_dir,
        "api",
        host,
        bound,
        {"topic": settings.topic, "namespace": settings.namespace},
    )
    print(
        f"lb serve: {url} (live page at {url}/, docs at {url}/docs, OpenAPI at {url}/openapi.json)",
        file=sys.stderr,
    )
    if app is None:
        os.environ[MAX_BODY_ENV] = str(args.max_body)
        os.environ[PAGE_CACHE_ENV] = str(page_cache_ms)
        try:
            serve_workers("api.app:app_from_environment", sock, workers, quiet=args.quiet)
        finally:
            sock.close()
        return 0
    server = make_server(app, quiet=args.quiet)
    settle_heap()
    # uvicorn stops gracefully on SIGINT/SIGTERM, then re-raises the signal with the
    # handlers it found: make that re-raise a clean exit 0, like ``lb run``'s.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stopped)
    try:
        server.run(sockets=[sock])
    except _Stop:
        pass
    finally:
        sock.close()
    return 0


class _Stop(Exception):
    """Raised by the re-raised stop signal once uvicorn has shut down."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``serve``."""
    serve = subparsers.add_parser(
        "serve",
        help="the HTTP API (loopback only by default)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind ({DEFAULT_HOST})")
    serve.add_argument(
        "--port", default=str(DEFAULT_PORT), help="port (0 = any free port; default 8080)"
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"largest request body in bytes (default {MAX_BODY_BYTES})",
    )
    serve.add_argument(
        "--workers",
        default="1",
        help="processes serving the port (default 1; about one per core helps reads)",
    )
    serve.add_argument(
        "--page-cache-ms",
        default=str(DEFAULT_TTL_MS),
        help="oldest cached top page served, in ms, when the change stream did not "
        f"drop it earlier (0: no cache; default {DEFAULT_TTL_MS})",
    )
    serve.add_argument("--quiet", action="store_true", help="no access log on stderr")
    serve.set_defaults(handler=_serve)
