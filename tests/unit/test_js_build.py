"""What the TypeScript client's build rests on: the OpenAPI document, and the page's script.

The client's types are generated from clients/js/openapi.json, so it must be
what the app serves at ``/openapi.json`` now (``clients/js/scripts/openapi.py``
rewrites it). The live page's script is built at install; a server without it
says so at ``/`` instead of serving a page that does nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import api.app
from api.app import create_app
from config.settings import Secret, Settings
from domain.games import GameCatalog

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "clients" / "js" / "scripts" / "openapi.py"


def test_the_committed_openapi_document_is_what_the_app_serves() -> None:
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


async def _page() -> httpx.Response:
    settings = Settings(kafka_bootstrap="127.0.0.1:9092", redis_url=Secret("redis://127.0.0.1"))
    app = create_app(settings, catalog=GameCatalog.builtin())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lb") as client:
        return await client.get("/")


def test_without_its_built_script_the_page_names_the_command_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>Live leaderboard</title>")
    monkeypatch.setattr(api.app, "STATIC", tmp_path)
    missing = asyncio.run(_page())
    assert missing.status_code == 503
    assert missing.json()["error"] == {
        "code": "UNAVAILABLE",
        "message": "the live page's script is not built: run scripts/build_js.sh",
    }
    (tmp_path / "live.js").write_text("// built\n")
    built = asyncio.run(_page())
    assert built.status_code == 200 and "Live leaderboard" in built.text
