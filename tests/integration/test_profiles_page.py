"""The live page with profiles in headless Chromium: names and avatars, and a renamed player.

Profiles go in the way a studio sends them (a signed ``PUT /v1/profiles/{player}``),
through Kafka and the real job into Redis; the page shows each row's avatar
and display name, and a later profile record renames the row without a score
changing. Avatars are served by a small local HTTP server (the browser has no
Internet). The screenshot is saved as ``.lb/artifacts/live-page-profiles.png``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.live_events import GAME, best
from tests.integration.streams import produce
from tests.integration.test_live_page import ARTIFACTS, browser, rows
from tests.integration.test_profiles import _http, _signed_body
from tests.poll import poll

__all__ = ["browser"]  # the fixture, shared with the live page's own test

_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64">'
    '<circle cx="32" cy="32" r="32" fill="{color}"/></svg>'
)


class _Avatars(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        color = "#2f5bd3" if "ada" in self.path else "#d36b2f"
        body = _SVG.format(color=color).encode()
        self.send_response(200)
        self.send_header("Content-Type", "image/svg+xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def avatars() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Avatars)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _put(api: str, player: str, name: str, avatar: str, updated_at: int) -> None:
    body = _signed_body(player, name, avatar=avatar, updated_at=updated_at)
    status, doc = _http("PUT", f"{api}/v1/profiles/{player}", body)
    assert status == 202, doc


def _avatars_loaded(b: Any) -> int:
    loaded: int = b.execute_script(
        "return [...document.querySelectorAll('#top-table img.avatar')]"
        ".filter(img => img.complete && img.naturalWidth > 0).length"
    )
    return loaded


def test_the_page_shows_names_and_avatars_and_follows_a_rename(
    live_job: Any,
    live_api: str,
    browser: Any,
    avatars: str,
    kafka_bootstrap: str,
    topic: str,
) -> None:
    produce(kafka_bootstrap, topic, [best("ada", 300), best("bob", 200), best("cy", 1)])
    top = f"{live_api}/v1/leaderboards/{GAME}/top?limit=5"
    poll("the job applies the scores", lambda: len(_http("GET", top)[1]["entries"]) == 3, 60)
    _put(live_api, "ada", "Ada Lovelace", f"{avatars}/ada.svg", 1)
    _put(live_api, "bob", "Bob Marley", f"{avatars}/bob.svg", 1)
    poll(
        "both profiles are projected",
        lambda: all(e["profile"] for e in _http("GET", top)[1]["entries"][:2]),
        60,
    )

    browser.get(f"{live_api}/?game={GAME}&top=5")
    WebDriverWait(browser, 10).until(lambda b: len(rows(b)) == 3)
    # Names where a profile exists, the bare id where none does (cy).
    assert rows(browser) == [
        ("1", "Ada Lovelace", "300"),
        ("2", "Bob Marley", "200"),
        ("3", "cy", "1"),
    ]
    WebDriverWait(browser, 10).until(lambda b: _avatars_loaded(b) == 2)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "live-page-profiles.png"
    assert browser.save_screenshot(str(shot)), "no screenshot"
    assert shot.stat().st_size > 5_000

    # A new profile record renames ada: no score changes, the row follows within seconds.
    _put(live_api, "ada", "Countess Ada", f"{avatars}/ada.svg", 2)
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda b: rows(b) and rows(b)[0] == ("1", "Countess Ada", "300")
    )
    assert browser.save_screenshot(str(ARTIFACTS / "live-page-profiles-renamed.png"))
