"""The live page in a real browser: Debian's chromium, headless, driven by selenium.

A new best score produced to Kafka goes through the real job, the change
stream and the WebSocket into the page's table; the test waits for the table
to change (at most 2 s) and saves a screenshot as an artifact
(``.lb/artifacts/live-page.png``, git-ignored) for a person to look at.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from adapters.redis import RedisClient
from config.settings import Secret
from domain.keys import GroupKeys
from domain.signing import parse_keyring, signed_event
from schemas.codec import ScoreEventCodec
from tests.integration.api_server import api_settings, running_api
from tests.integration.live_events import GAME, best, now_ms
from tests.integration.streams import GAMES_TOML, KEYS, REPO, Planned, job_env, produce
from tests.integration.tcp_proxy import TcpProxy
from tests.jwt_keys import AUDIENCE, ISSUER, SECRET, hs256

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
    redis_client: RedisClient,
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


# -- a tournament's and a season's board ---------------------------------------------------

CUP = "gcup"


def _cup_games(tmp_path: Path) -> Path:
    """A game keeping only an all-time board, with a season and a tournament running now."""
    today = dt.datetime.now(dt.UTC).date()
    start, end = today - dt.timedelta(days=1), today + dt.timedelta(days=2)
    games = tmp_path / "cup.toml"
    games.write_text(
        f'[games."{CUP}"]\nwindows = ["alltime"]\n'
        f'[games."{CUP}".seasons]\nnow = {{ start = {start}, end = {end} }}\n'
        f'[games."{CUP}".tournaments]\nnow-cup = {{ start = {start}, end = {end} }}\n'
    )
    return games


def _cup_event(player: str, score: int) -> Planned:
    at = now_ms()
    event = signed_event(
        parse_keyring(KEYS),
        "k1",
        event_id=uuid.uuid4().hex,
        game_id=CUP,
        player_id=player,
        score=score,
        ts_ms=at,
    )
    return Planned(player.encode(), ScoreEventCodec.from_registry().encode(event), at, "ok", event)


@pytest.fixture
def cup(
    kafka_bootstrap: str, redis_url: str, topic: str, namespace: str, tmp_path: Path
) -> Iterator[str]:
    """The job and the API of the cup game; yields the API's base URL."""
    games = _cup_games(tmp_path)
    log = (tmp_path / "cup-job.log").open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "lb.cli", "run"],
        env=job_env(topic, namespace, tmp_path / "state", games),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    settings = api_settings(kafka_bootstrap, redis_url, topic, namespace, KEYS, games_file=games)
    try:
        with running_api(settings) as url:
            yield url
    finally:
        job.terminate()
        job.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("window", ["tournament:now-cup", "season:now"])
def test_the_page_watches_a_tournament_and_a_season(
    cup: str,
    browser: Any,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
    window: str,
) -> None:
    produce(kafka_bootstrap, topic, [_cup_event("ada", 2500), _cup_event("bob", 1200)])
    board = GroupKeys(namespace, CUP).board(window)
    deadline = time.monotonic() + 30
    while redis_client.zcard(board) < 2:
        assert time.monotonic() < deadline, "the job did not apply the cup's events"
        time.sleep(0.05)

    browser.get(f"{cup}/?game={CUP}&window={window}&top=5")
    WebDriverWait(browser, 10).until(lambda b: len(rows(b)) == 2)
    assert rows(browser) == [("1", "ada", "2,500"), ("2", "bob", "1,200")]
    title = browser.find_element(By.ID, "board-title").text
    assert window in title, title
    assert browser.find_element(By.NAME, "window").get_attribute("value") == window
    WebDriverWait(browser, 5).until(
        lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "live"
    )

    # A window this game keeps no board of is refused with a sentence naming what it keeps.
    browser.get(f"{cup}/?game={CUP}&window=daily&top=5")
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "error"
    )
    said = browser.find_element(By.ID, "status").text
    assert "daily" in said and "null" not in said, said
    favicon = [
        entry["name"]
        for entry in browser.execute_script("return performance.getEntriesByType('resource')")
        if "favicon" in entry["name"]
    ]
    assert favicon == [], favicon


# -- a lost connection ---------------------------------------------------------------------


def _state(browser: Any, element: str) -> str:
    return str(browser.find_element(By.ID, element).get_attribute("data-state"))


def _applied(redis_client: RedisClient, board: str, player: str) -> None:
    deadline = time.monotonic() + 30
    while redis_client.zscore(board, player) is None:
        assert time.monotonic() < deadline, f"the job did not apply {player}'s score"
        time.sleep(0.05)


def test_the_page_resumes_after_a_lost_connection_and_says_when_it_could_not(
    live_job: Any,
    live_api: str,
    browser: Any,
    kafka_bootstrap: str,
    topic: str,
    namespace: str,
    redis_client: RedisClient,
) -> None:
    keys = GroupKeys(namespace, GAME)
    board = keys.board("alltime")
    produce(kafka_bootstrap, topic, [best("ada", 300), best("bob", 200)])
    deadline = time.monotonic() + 30
    while redis_client.zcard(board) < 2:
        assert time.monotonic() < deadline, "the job did not apply the first events"
        time.sleep(0.05)

    with TcpProxy(live_api) as proxy:
        browser.get(f"{proxy.url}/?game={GAME}&top=5")
        WebDriverWait(browser, 10).until(
            lambda b: len(rows(b)) == 2 and _state(b, "status") == "live"
        )

        # The network drops; a new best score is written while the page cannot hear of it
        # (after more than the server's 1 s stream read, so it no longer follows the game).
        proxy.cut()
        WebDriverWait(browser, 10).until(lambda b: _state(b, "status") == "connecting")
        time.sleep(1.5)
        produce(kafka_bootstrap, topic, [best("cy", 450)])
        _applied(redis_client, board, "cy")
        proxy.restore()
        WebDriverWait(browser, 30).until(lambda b: rows(b) and rows(b)[0] == ("1", "cy", "450"))
        assert rows(browser) == [("1", "cy", "450"), ("2", "ada", "300"), ("3", "bob", "200")]
        assert _state(browser, "notice") == "resumed"
        said = browser.find_element(By.ID, "notice").text
        assert said == "reconnected: resumed, 1 missed change replayed", said
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "live-page-resumed.png"))
        handshakes = [line for line in proxy.first_lines if "/live?" in line]
        assert "lastEventId=" not in handshakes[0] and "lastEventId=" in handshakes[-1]

        # Dropped again, and the stream loses the page's position meanwhile: a gap.
        proxy.cut()
        WebDriverWait(browser, 10).until(lambda b: _state(b, "status") == "connecting")
        redis_client.xtrim(keys.changes, maxlen=0)
        produce(kafka_bootstrap, topic, [best("dee", 500)])
        _applied(redis_client, board, "dee")
        proxy.restore()
        WebDriverWait(browser, 30).until(lambda b: rows(b) and rows(b)[0] == ("1", "dee", "500"))
        assert _state(browser, "notice") == "gap"
        assert _state(browser, "status") == "live"


def test_the_page_passes_the_token_of_its_address_to_the_websocket(
    live_api: str, browser: Any
) -> None:
    with TcpProxy(live_api) as proxy:
        browser.get(f"{proxy.url}/?game={GAME}&top=3&token=t0k%2Fen")
        WebDriverWait(browser, 10).until(
            lambda _: any("/live?" in line for line in proxy.first_lines)
        )
        handshake = next(line for line in proxy.first_lines if "/live?" in line)
        assert "token=t0k%2Fen" in handshake, handshake
        # The form keeps it when it starts watching something else.
        browser.find_element(By.NAME, "top").clear()
        browser.find_element(By.NAME, "top").send_keys("4")
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(browser, 10).until(lambda b: "top=4" in b.current_url)
        assert "token=t0k%2Fen" in browser.current_url


# -- reads that need a token ----------------------------------------------------------------


def test_the_page_passes_its_token_when_reads_need_one(
    live_job: Any,
    browser: Any,
    kafka_bootstrap: str,
    redis_url: str,
    topic: str,
    namespace: str,
    redis_client: Any,
    tmp_path: Path,
) -> None:
    games = tmp_path / "token-games.toml"
    games.write_text(GAMES_TOML)
    settings = api_settings(
        kafka_bootstrap,
        redis_url,
        topic,
        namespace,
        KEYS,
        games_file=games,
        jwt_secret=Secret(SECRET),
        jwt_audience=AUDIENCE,
        jwt_issuer=ISSUER,
        api_reads="authenticated",
    )
    produce(kafka_bootstrap, topic, [best("ada", 300), best("bob", 200)])
    board = GroupKeys(namespace, GAME).board("alltime")
    deadline = time.monotonic() + 30
    while redis_client.zcard(board) < 2:
        assert time.monotonic() < deadline, "the job did not apply the events"
        time.sleep(0.05)
    with running_api(settings) as url:
        browser.get(f"{url}/?game={GAME}&top=5&token={hs256('ada')}")
        WebDriverWait(browser, 10).until(lambda b: len(rows(b)) == 2)
        assert rows(browser) == [("1", "ada", "300"), ("2", "bob", "200")]
        WebDriverWait(browser, 5).until(
            lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "live"
        )
        produce(kafka_bootstrap, topic, [best("cy", 450)])
        WebDriverWait(browser, 10).until(lambda b: rows(b) and rows(b)[0] == ("1", "cy", "450"))

        browser.get(f"{url}/?game={GAME}&top=5")  # no token: the socket is refused
        time.sleep(2)
        assert rows(browser) == []
        state = browser.find_element(By.ID, "status").get_attribute("data-state")
        assert state != "live", state
