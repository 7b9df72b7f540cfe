"""The HTTP layer in-process: the real app over an ASGI transport, a small fake of its store.

What runs for real: the app as ``lb serve`` builds it (middleware, the hot
routes, FastAPI's routes, their query models and response models, the error
handlers) and the readers' game and window resolution. What is fake: the
board contents, given as plain data by :class:`FakeBoards` in place of the
asyncio reader's Redis reads (which tests/integration/test_http_api.py and
test_hot_routes.py prove against real Redis). That is honest for what these
tests check, which never depends on Redis: parameter validation, error codes,
the answers' contract being enforced before anything is sent, and the hot
routes answering byte for byte as the routes do.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from config.settings import Secret, Settings
from domain.games import GameCatalog
from readers import RedisClient
from readers.answers import AroundAnswer, RankAnswer, TopPage
from readers.boards import BoardReader

GAMES = '[games."g"]\nmax_score = 1000\n[games."asc"]\nmax_score = 1000\norder = "asc"\n'
NOW_MS = 1_778_068_800_000  # 2026-05-06T12:00:00Z
#: (player, score), best first, of each game's all-time board.
BOARD = {"g": [("ada", 300), ("bob", 200), ("cy", 200), ("dee", 50)], "asc": [("fast", 9)]}


class FakeBoards:
    """The asyncio board reader's answers, from plain data instead of Redis.

    Games and windows resolve through the real :class:`BoardReader` (so an
    unknown game or a bad window fails as it does in production); pages,
    ranks and neighbours are read off :data:`BOARD`. ``broken`` makes every
    answer break its contract, as a bug in a reader would.
    """

    def __init__(self, catalog: GameCatalog, broken: bool = False) -> None:
        self.sync = BoardReader(cast(RedisClient, None), catalog, "t")
        self.broken = broken

    def _rows(self, game_id: str, window_spec: str, now_ms: int) -> tuple[str, list[Any]]:
        window = self.sync.board(game_id, window_spec, now_ms).window.id
        rows = BOARD[game_id] if window == "alltime" else []
        return window, [
            {"rank": i + 1, "playerId": p, "score": str(s) if self.broken else s}
            for i, (p, s) in enumerate(rows)
        ]

    async def top(
        self,
        game_id: str,
        window_spec: str,
        limit: int = 10,
        offset: int = 0,
        cursor: str | None = None,
        *,
        now_ms: int,
        ranks: str = "unique",
        profiles: bool = False,
    ) -> TopPage:
        window, rows = self._rows(game_id, window_spec, now_ms)
        more = offset + limit < len(rows)
        page = {"window": window, "entries": rows[offset : offset + limit]}
        return cast(TopPage, _profiled({**page, "nextCursor": "next" if more else None}, profiles))

    async def rank(
        self, game_id: str, player_id: str, window_spec: str, *, now_ms: int, ranks: str = "unique"
    ) -> RankAnswer:
        window, rows = self._rows(game_id, window_spec, now_ms)
        mine = next((row for row in rows if row["playerId"] == player_id), None)
        return {
            "window": window,
            "playerId": player_id,
            "rank": mine["rank"] if mine else None,
            "score": mine["score"] if mine else None,
            "percentile": 50.0 if mine else None,
        }

    async def around(
        self,
        game_id: str,
        player_id: str,
        window_spec: str,
        k: int = 5,
        *,
        now_ms: int,
        ranks: str = "unique",
        profiles: bool = False,
    ) -> AroundAnswer:
        window, rows = self._rows(game_id, window_spec, now_ms)
        at = next((i for i, row in enumerate(rows) if row["playerId"] == player_id), None)
        if at is None:
            return {"window": window, "above": [], "player": None, "below": []}
        above, below = rows[max(0, at - k) : at], rows[at + 1 : at + 1 + k]
        answer: AroundAnswer = {
            "window": window,
            "above": above,
            "player": rows[at],
            "below": below,
        }
        return cast(AroundAnswer, _profiled(answer, profiles))


#: The profiles :class:`FakeProfiles` holds: ada has one, nobody else.
PROFILES: dict[str, Any] = {
    "ada": {"displayName": "Ada", "avatarUrl": None, "country": "FR", "updatedAt": 1}
}


class FakeProfiles:
    """The asyncio profile reader's hydration, from :data:`PROFILES` instead of Redis."""

    async def hydrate(self, answer: Any) -> Any:
        return _profiled(answer, True)


def _profiled(answer: Any, profiles: bool) -> Any:
    """The readers' ``profiles=True``: every line given its profile from :data:`PROFILES`."""
    if profiles:
        from readers.profiles import lines_of

        for line in lines_of(answer):
            line["profile"] = PROFILES.get(line["playerId"])
    return answer


def _app(*, hot_routes: bool, broken: bool = False) -> Any:
    """The app as served, its state filled as its lifespan would, with the fake store."""
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9",
        redis_url=Secret("redis://127.0.0.1:9/0"),
        topic="unused",
        dlq_topic="unused.dlq",
        hmac_keys=Secret("k1:" + "11" * 32),
        namespace="t",
    )
    catalog = GameCatalog.from_toml(GAMES)
    app = create_app(settings, catalog=catalog, clock=lambda: NOW_MS, hot_routes=hot_routes)
    inner = app
    while not isinstance(inner, FastAPI):  # under the middleware: the FastAPI app
        inner = inner.app
    inner.state.clock = lambda: NOW_MS
    inner.state.async_boards = FakeBoards(catalog, broken)
    inner.state.async_profiles = FakeProfiles()
    inner.state.pages = None
    inner.state.intake = None
    return app


def _get(app: Any, paths: list[str]) -> list[tuple[int, str, bytes]]:
    """(status, content type, body) of each GET, in one client over the ASGI transport."""

    async def run() -> list[tuple[int, str, bytes]]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answers = [await client.get(path) for path in paths]
        return [(a.status_code, a.headers.get("content-type", ""), a.content) for a in answers]

    return asyncio.run(run())


TOPS = [
    "/v1/leaderboards/g/top",
    "/v1/leaderboards/g/top?limit=2",
    "/v1/leaderboards/g/top?limit=2&offset=2",
    "/v1/leaderboards/g/top?window=daily",
    "/v1/leaderboards/asc/top",
    "/v1/leaderboards/g/top?limit=0",
    "/v1/leaderboards/g/top?windw=weekly",
    "/v1/leaderboards/g/top?window=fortnightly",
    "/v1/leaderboards/nope/top",
]


def test_the_hot_route_answers_byte_for_byte_as_the_route() -> None:
    hot = _get(_app(hot_routes=True), TOPS)
    plain = _get(_app(hot_routes=False), TOPS)
    assert hot == plain
    statuses = [status for status, _, _ in hot]
    assert statuses == [200, 200, 200, 200, 200, 400, 400, 400, 404]
    page = json.loads(hot[1][2])
    assert page == {
        "window": "alltime",
        "entries": [
            {"rank": 1, "playerId": "ada", "score": 300, "profile": PROFILES["ada"]},
            {"rank": 2, "playerId": "bob", "score": 200, "profile": None},
        ],
        "nextCursor": "next",
    }
    assert json.loads(hot[6][2])["error"]["code"] == "BAD_REQUEST"
    bare = "/v1/leaderboards/g/top?limit=1&profile=false"
    hot_bare, plain_bare = (_get(_app(hot_routes=h), [bare])[0] for h in (True, False))
    assert hot_bare == plain_bare
    assert json.loads(hot_bare[2])["entries"] == [{"rank": 1, "playerId": "ada", "score": 300}]
    assert json.loads(hot[8][2])["error"]["code"] == "UNKNOWN_GAME"


@pytest.mark.parametrize("hot_routes", [True, False], ids=["hot", "plain"])
def test_an_answer_that_breaks_its_contract_is_never_sent(hot_routes: bool) -> None:
    """A reader bug (a score as text) is caught by the response model: 500, not the page."""
    paths = [
        "/v1/leaderboards/g/top",
        "/v1/leaderboards/g/players/ada",
        "/v1/leaderboards/g/players/ada/neighbors",
    ]
    for status, _, body in _get(_app(hot_routes=hot_routes, broken=True), paths):
        assert status == 500
        assert json.loads(body)["error"]["code"] == "INTERNAL"
        assert b'"300"' not in body


def test_rank_and_neighbours_are_the_readers_answers_or_404() -> None:
    paths = [
        "/v1/leaderboards/g/players/cy",
        "/v1/leaderboards/g/players/cy/neighbors?k=1",
        "/v1/leaderboards/g/players/zed",
        "/v1/leaderboards/g/players/zed/neighbors",
    ]
    rank, around, no_rank, no_around = _get(_app(hot_routes=True), paths)
    assert (rank[0], json.loads(rank[2])) == (
        200,
        {"window": "alltime", "playerId": "cy", "rank": 3, "score": 200, "percentile": 50.0},
    )
    assert [e["playerId"] for e in json.loads(around[2])["above"]] == ["bob"]
    assert json.loads(around[2])["player"]["rank"] == 3
    assert json.loads(around[2])["player"]["profile"] is None
    for status, _, body in (no_rank, no_around):
        assert (status, json.loads(body)["error"]["code"]) == (404, "NOT_FOUND")
