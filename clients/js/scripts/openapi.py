"""Write clients/js/openapi.json, the HTTP API's OpenAPI document, from the app itself.

The TypeScript client's types are generated from this file (openapi-typescript,
``npm run build``), so they follow the routes' models. ``--check`` writes
nothing and exits 1 when the committed file differs from what the app
generates now (a test runs it), naming the command that brings it up to date.

Usage (from the repository root)::

    .venv/bin/python clients/js/scripts/openapi.py           # rewrite openapi.json
    .venv/bin/python clients/js/scripts/openapi.py --check   # exit 1 if it drifted
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from api.app import create_app
from config.settings import Secret, Settings
from domain.games import GameCatalog

DOCUMENT = Path(__file__).resolve().parents[1] / "openapi.json"


async def _served(path: str) -> bytes:
    """``GET path`` answered by the app in this process (no lifespan: no service is contacted)."""
    settings = Settings(kafka_bootstrap="127.0.0.1:9092", redis_url=Secret("redis://127.0.0.1"))
    app = create_app(settings, catalog=GameCatalog.builtin())
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
    }
    body = bytearray()
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    if status != 200:
        raise RuntimeError(f"GET {path} answered {status}: {bytes(body)[:200]!r}")
    return bytes(body)


def document() -> str:
    """The app's ``/openapi.json`` as the committed file holds it (indented, keys as made)."""
    served = json.loads(asyncio.run(_served("/openapi.json")))
    return json.dumps(served, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the document, or with ``--check`` compare it; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if it differs")
    args = parser.parse_args(argv)
    fresh = document()
    if args.check:
        current = DOCUMENT.read_text() if DOCUMENT.exists() else ""
        if current != fresh:
            print(
                f"{DOCUMENT} differs from the app's OpenAPI document: run "
                ".venv/bin/python clients/js/scripts/openapi.py (then scripts/build_js.sh)",
                file=sys.stderr,
            )
            return 1
        return 0
    DOCUMENT.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
