"""``lb serve``: the HTTP API (reads, friends, signed score intake) on loopback.

Binds ``127.0.0.1`` unless ``--host`` says otherwise: the server has no TLS
and no reader authentication of its own, so exposing it beyond this machine
is a deliberate choice, normally behind a reverse proxy. Ctrl-C or SIGTERM
stops it; a queued score is flushed to Kafka first.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
from types import FrameType

from api.http import DEFAULT_HOST, MAX_BODY_BYTES, build_api, make_server
from config.settings import Settings
from domain.errors import ServiceError


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_number(raw: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    value = int(raw)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be within 0..65535, got {value}")
    return value


def _serve(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    api = build_api(settings)
    try:
        server = make_server(api, args.host, args.port, max_body=args.max_body, quiet=args.quiet)
    except OSError as exc:
        api.close()
        raise ServiceError(
            f"cannot listen on {args.host}:{args.port} (--host/--port): {exc.strerror or exc}"
        ) from exc
    if not _is_loopback(args.host):
        print(
            f"lb serve: listening on {args.host}, beyond loopback: put TLS and "
            "authentication in front of it",
            file=sys.stderr,
        )

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to return: call it from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"lb serve: {server.url} (OpenAPI at {server.url}/openapi.json)", file=sys.stderr)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        api.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``serve``."""
    serve = subparsers.add_parser(
        "serve",
        help="the HTTP API (loopback only by default)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind ({DEFAULT_HOST})")
    serve.add_argument("--port", type=port_number, default=8080, help="port (0 = any free port)")
    serve.add_argument(
        "--max-body", type=int, default=MAX_BODY_BYTES, help="largest request body in bytes"
    )
    serve.add_argument("--quiet", action="store_true", help="no access log on stderr")
    serve.set_defaults(handler=_serve)
