"""Serving the app with uvicorn on a socket this module binds itself.

Binding first, here, is what turns a busy port or an impossible address into
one clear :class:`~domain.errors.ServiceError` line (``lb serve`` exits 2)
instead of uvicorn's log and exit 1. The server binds ``127.0.0.1`` by default:
exposing it is a deliberate act (``lb serve --host``), with TLS (``--certfile``,
``--keyfile``: uvicorn's own) or behind a proxy that terminates it; callers and
rate limits are the app's (docs/SECURITY.md).
"""

from __future__ import annotations

import errno
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
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


def url_of(sock: socket.socket, *, tls: bool = False) -> str:
    """The base URL of a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


@dataclass(frozen=True)
class Tls:
    """The server's certificate chain and private key (PEM files), for uvicorn's TLS."""

    certfile: Path
    keyfile: Path | None = None


def parse_tls(certfile: str | None, keyfile: str | None) -> Tls | None:
    """``--certfile``/``--keyfile`` checked by loading them; ConfigError naming the problem."""
    if certfile is None:
        if keyfile is not None:
            raise ConfigError("--keyfile needs --certfile (the certificate chain)")
        return None
    tls = Tls(Path(certfile), Path(keyfile) if keyfile else None)
    for option, path in (("--certfile", tls.certfile), ("--keyfile", tls.keyfile)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{option} {path} is not a file")
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.certfile, tls.keyfile)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"--certfile/--keyfile do not hold a certificate and its private key: {exc.reason}"
        ) from exc
    return tls


def make_config(
    app: Any, *, quiet: bool = False, workers: int = 1, tls: Tls | None = None
) -> uvicorn.Config:
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
        ssl_certfile=str(tls.certfile) if tls else None,
        ssl_keyfile=str(tls.keyfile) if tls and tls.keyfile else None,
    )


def make_server(app: Any, *, quiet: bool = False, tls: Tls | None = None) -> uvicorn.Server:
    """A uvicorn server for ``app`` (run it with ``server.run(sockets=[bind(...)])``)."""
    return uvicorn.Server(make_config(app, quiet=quiet, tls=tls))


def serve_workers(
    factory: str, sock: socket.socket, workers: int, *, quiet: bool = False, tls: Tls | None = None
) -> None:
    """Serve ``sock`` from ``workers`` processes, each building its app from ``factory``.

    uvicorn's own supervisor: the processes share the one listening socket (the
    kernel spreads connections over them), a worker that dies is replaced, and
    SIGINT/SIGTERM stop them all. One Python process serves about one core;
    this is how the API uses the others.
    """
    config = make_config(factory, quiet=quiet, workers=workers, tls=tls)
    Multiprocess(config, sockets=[sock]).run()


def parse_page_cache_ms(text: str | int) -> int:
    """``--page-cache-ms``: 0..60000; ConfigError otherwise."""
    return _option_number("--page-cache-ms", text, 0, 60_000)


def parse_workers(text: str | int) -> int:
    """``--workers``: 1..64 processes; ConfigError otherwise."""
    return _option_number("--workers", text, 1, 64)
