"""The live page in a real browser: Debian's chromium, headless, driven by selenium.

A new best score produced to Kafka goes through the real job, the change
stream and the WebSocket into the page's table; the test waits for the table
to change (at most 2 s) and saves a screenshot as an artifact
(``.lb/artifacts/live-page.png``, git-ignored) for a person to look at.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from domain.keys import GroupKeys
from tests.integration.live_events import GAME, best
from tests.integration.streams import REPO, produce

ARTIFACTS = REPO / ".lb" / "artifacts"


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are installed by scripts/bootstrap.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1000,700")
    browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    yield browser
    browser.quit()


def rows(browser: Any) -> list[tuple[str, ...]]:
    """The table's cells, read in one script (the page replaces rows as pushes arrive)."""
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#top-table tbody tr')]"
        ".map(row => [...row.cells].map(cell => cell.textContent))"
    )
    return [tuple(row) for row in cells]


def test_the_page_shows_a_new_best_score_within_two_seconds(
    live_job: Any,
    live_api: str,
    browser: Any,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: Any,
) -> None:
    board = GroupKeys(namespace, GAME).board("alltime")
    produce(kafka_bootstrap, topic, [best("ada", 300), best("bob", 200), best("cy", 100)])
    deadline = time.monotonic() + 30
    while redis_client.zcard(board) < 3:
        assert time.monotonic() < deadline, "the job did not apply the first events"
        time.sleep(0.05)

    browser.get(f"{live_api}/?game={GAME}&player=cy&top=5")
    WebDriverWait(browser, 10).until(lambda b: len(rows(b)) == 3)
    assert rows(browser) == [("1", "ada", "300"), ("2", "bob", "200"), ("3", "cy", "100")]
    WebDriverWait(browser, 5).until(
        lambda b: (
            b.find_element(By.ID, "me-rank").text == "3"
            and b.find_element(By.ID, "status").get_attribute("data-state") == "live"
        )
    )

    produce(kafka_bootstrap, topic, [best("cy", 450)])  # a new best: cy goes first
    changed = time.monotonic()
    WebDriverWait(browser, 2.0, poll_frequency=0.05).until(
        lambda b: rows(b) and rows(b)[0] == ("1", "cy", "450")
    )
    took = time.monotonic() - changed
    WebDriverWait(browser, 2.0).until(lambda b: b.find_element(By.ID, "me-rank").text == "1")
    assert rows(browser) == [("1", "cy", "450"), ("2", "ada", "300"), ("3", "bob", "200")]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "live-page.png"
    assert browser.save_screenshot(str(shot)), "no screenshot"
    assert shot.stat().st_size > 5_000
    print(f"table changed {took:.2f} s after the produce; screenshot: {shot}")
