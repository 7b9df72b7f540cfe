"""Serving the app with uvicorn on a socket this module binds itself.

Binding first, here, is what turns a busy port or an impossible address into
one clear :class:`~domain.errors.ServiceError` line (``lb serve`` exits 2)
instead of uvicorn's log and exit 1. The server binds ``127.0.0.1`` by default:
exposing it is a deliberate act (``lb serve --host``), normally behind a
reverse proxy that adds TLS, authentication of readers and rate limits.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from api.ws_frames import SharedFrameProtocol
from domain.errors import ConfigError, ServiceError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def _option_number(option: str, text: str | int, low: int, high: int) -> int:
    """A whole number in ``low..high`` given to ``option``; ConfigError naming it otherwise."""
    raw = str(text).strip()
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigError(f"{option} must be a number in {low}..{high}, got {str(text)[:20]!r}")
    return int(raw)


def parse_port(text: str | int) -> int:
    """A TCP port number (0 = any free one) from ``--port``; ConfigError otherwise."""
    return _option_number("--port", text, 0, 65535)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; ServiceError naming the address if it cannot be."""
    parse_port(port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} is not an address of this machine: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServiceError(f"cannot listen on {host}:{port}: the port is in use") from exc
        raise ServiceError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def url_of(sock: socket.socket) -> str:
    """The base URL of a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def make_config(app: Any, *, quiet: bool = False, workers: int = 1) -> uvicorn.Config:
    """The uvicorn settings for ``app`` (an ASGI app, or a factory's import string).

    HTTP/1.1 keep-alive via httptools on uvloop, WebSockets via uvicorn's
    Sans-I/O ``websockets`` protocol (whose sends wait for the socket to
    drain, so a slow subscriber's send times out instead of buffering without
    bound) with :mod:`api.ws_frames`' shared frames on top, and without
    permessage-deflate: a push is one small JSON page sent to many
    subscribers, and compressing it once per subscriber cost more CPU than
    anything else in a fan-out (docs/BENCHMARKS.md, HTTP section).
    """
    return uvicorn.Config(
        app,
        factory=isinstance(app, str),
        workers=workers,
        http="httptools",
        ws=SharedFrameProtocol,
        ws_per_message_deflate=False,
        loop="uvloop",
        lifespan="on",
        access_log=not quiet,
        log_level="warning" if quiet else "info",
        timeout_keep_alive=30,
        server_header=False,
    )


def make_server(app: Any, *, quiet: bool = False) -> uvicorn.Server:
    """A uvicorn server for ``app`` (run it with ``server.run(sockets=[bind(...)])``)."""
    return uvicorn.Server(make_config(app, quiet=quiet))


def serve_workers(factory: str, sock: socket.socket, workers: int, *, quiet: bool = False) -> None:
    """Serve ``sock`` from ``workers`` processes, each building its app from ``factory``.

    uvicorn's own supervisor: the processes share the one listening socket (the
    kernel spreads connections over them), a worker that dies is replaced, and
    SIGINT/SIGTERM stop them all. One Python process serves about one core;
    this is how the API uses the others.
    """
    config = make_config(factory, quiet=quiet, workers=workers)
    Multiprocess(config, sockets=[sock]).run()


def parse_page_cache_ms(text: str | int) -> int:
    """``--page-cache-ms``: 0..60000; ConfigError otherwise."""
    return _option_number("--page-cache-ms", text, 0, 60_000)


def parse_workers(text: str | int) -> int:
    """``--workers``: 1..64 processes; ConfigError otherwise."""
    return _option_number("--workers", text, 1, 64)
