"""``lb serve``: the HTTP API (reads, live pushes, the live page, score intake) on loopback.

Binds ``127.0.0.1`` unless ``--host`` says otherwise: exposing it beyond this
machine is a deliberate choice, with TLS (``--certfile``/``--keyfile``, or a
proxy in front) and callers configured (docs/SECURITY.md). ``--new-api-key
NAME --key-file FILE`` makes a server API key, appends its SHA-256 line to FILE
(the ``LB_API_KEYS`` file) and prints the key, and exits. Ctrl-C or SIGTERM
stops it; records already handed to Kafka are flushed first.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from pathlib import Path
from types import FrameType

from api.app import MAX_BODY_BYTES, create_app
from api.auth.keyfile import key_line, new_key, parse_key_file
from api.pages import DEFAULT_TTL_MS
from api.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    bind,
    make_server,
    parse_page_cache_ms,
    parse_port,
    parse_tls,
    parse_workers,
    serve_workers,
    url_of,
)
from config.heap import settle_heap
from config.settings import MAX_BODY_ENV, PAGE_CACHE_ENV, Settings, hand_to_spawned_children
from domain.errors import ConfigError
from telemetry import server as server_registry


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _new_api_key(name: str, key_file: str | None) -> int:
    """Append a fresh key's hashed line to ``key_file`` and print the key (stdout)."""
    if key_file is None:
        raise ConfigError("--new-api-key needs --key-file (the LB_API_KEYS file to add it to)")
    key = new_key()
    path = Path(key_file)
    try:
        known = parse_key_file(path.read_text(), str(path)) if path.exists() else {}
        if name in known.values():
            raise ConfigError(f"{path} already has a key named {name!r}; pick another name")
        with path.open("a") as out:
            out.write(key_line(name, key) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
    print(key)
    print(f"lb serve: added {name!r} to {path} (its SHA-256 only)", file=sys.stderr)
    return 0


def _exposure_warnings(host: str, tls: bool, settings: Settings) -> list[str]:
    """What ``lb serve`` says when it listens beyond loopback without some protection."""
    if _is_loopback(host):
        return []
    missing = []
    if not tls:
        missing.append("TLS (--certfile/--keyfile, or a proxy in front)")
    if not settings.writes_authenticated:
        missing.append("authenticated writes (LB_API_KEYS, LB_JWT_*)")
    if not (settings.rate_reads and settings.rate_writes):
        missing.append("rate limits (LB_RATE_READS, LB_RATE_WRITES)")
    if not missing:
        return []
    return [f"lb serve: listening on {host}, beyond loopback, without " + "; ".join(missing)]


def _serve(args: argparse.Namespace) -> int:
    if args.new_api_key is not None:
        return _new_api_key(args.new_api_key, args.key_file)
    port = parse_port(args.port)
    workers = parse_workers(args.workers)
    tls = parse_tls(args.certfile, args.keyfile)
    settings = Settings.from_env()
    page_cache_ms = parse_page_cache_ms(args.page_cache_ms)
    app = (
        create_app(settings, max_body=args.max_body, page_cache_ms=page_cache_ms)
        if workers == 1
        else None
    )
    sock = bind(args.host, port)
    for warning in _exposure_warnings(args.host, tls is not None, settings):
        print(warning, file=sys.stderr)
    url = url_of(sock, tls=tls is not None)
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
        hand_to_spawned_children(
            {MAX_BODY_ENV: str(args.max_body), PAGE_CACHE_ENV: str(page_cache_ms)}
        )
        try:
            serve_workers("api.app:app_from_environment", sock, workers, quiet=args.quiet, tls=tls)
        finally:
            sock.close()
        return 0
    server = make_server(app, quiet=args.quiet, tls=tls)
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
    serve.add_argument("--certfile", help="serve HTTPS: the certificate chain (PEM)")
    serve.add_argument(
        "--keyfile", help="the certificate's private key (PEM; omit when in --certfile)"
    )
    serve.add_argument(
        "--new-api-key",
        metavar="NAME",
        help="make a server API key: its SHA-256 line is appended to --key-file, "
        "the key printed on stdout; then exit",
    )
    serve.add_argument("--key-file", help="the API key file --new-api-key adds to")
    serve.add_argument("--quiet", action="store_true", help="no access log on stderr")
    serve.set_defaults(handler=_serve)
