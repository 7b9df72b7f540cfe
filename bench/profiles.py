"""What profiles cost a page: hydrated reads next to bare ones, same board, same run.

Usage (from the repository root, services up with ``.venv/bin/lb up``)::

    .venv/bin/python -m bench.profiles                       # 1M players, 2,000 calls each
    .venv/bin/python -m bench.profiles --players 100000 --calls 500 --no-doc

One all-time board of game ``g1`` with N players (the log-normal scores of
:mod:`bench.reads`), and a profile for every player (a display name, an avatar
URL, a country: about 110 bytes of JSON each) in the profile buckets, loaded
into a throwaway namespace. Then, call by call and in alternating order, each
read bare and hydrated through the Python readers (:class:`readers.boards.BoardReader`,
the hydrated one with ``profiles=True``, which on a standalone Redis reads the
page and its profiles in one script call, :mod:`readers.page_profiles`):
``top`` 10, ``top`` 100 and ``around`` k=5 of a random player. Then the same
pages through the HTTP API: ``lb serve`` on a free loopback port (page cache
off, so every request reads Redis), one kept-alive connection, ``profile=false``
against ``profile=true``. Reported: p50 and p99 of each and the ratio
hydrated/bare of the p99 (the budget applies to the HTTP pages, what a game
client receives); the run checks that the hydrated answers carry every
entry's profile. Results replace the ``bench.profiles`` section of
docs/BENCHMARKS.md (unless ``--no-doc``); a JSON summary goes to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.redis import RedisClient
from bench.common import GAME, ROOT, log, machine, machine_line, percentile, publish, run_id, table
from bench.http import server
from bench.reads import composites, draw_board, load_redis, player_id
from config.clients import redis_client
from config.settings import Settings, child_environment
from domain.games import GameCatalog, GameConfig
from domain.profiles import ProfileKeys, bucket_of, stored_bytes
from domain.windows import WindowKind, window_for
from readers.boards import BoardReader
from readers.profiles import Page, ProfileReader, lines_of

SECTION = "bench.profiles"
CHUNK = 20_000
#: The budget the profiles' design promises: a hydrated page's p99 within 1.5x the bare one's.
BUDGET = 1.5


def load_profiles(client: RedisClient, namespace: str, players: int) -> float:
    """A profile for every player, ``HSET`` per bucket in chunks; seconds taken."""
    started = time.monotonic()
    for at in range(0, players, CHUNK):
        by_bucket: dict[str, dict[str, bytes]] = {}
        for i in range(at, min(players, at + CHUNK)):
            player = player_id(i)
            doc = stored_bytes(
                {
                    "displayName": f"Player {i:,}",
                    "avatarUrl": f"https://cdn.example/avatars/{i % 5000}.png",
                    "country": "FR",
                    "updatedAt": 1_700_000_000_000 + i,
                }
            )
            by_bucket.setdefault(ProfileKeys(namespace, bucket_of(player)).profiles, {})[player] = (
                doc
            )
        pipe = client.pipeline(transaction=False)
        for key, mapping in by_bucket.items():
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
        pipe.execute()
    return time.monotonic() - started


def timed_pair(
    calls: int, bare: Callable[[int], object], hydrated: Callable[[int], object]
) -> dict[str, Any]:
    """p50/p99 ms of both reads, interleaved call by call (alternating which goes first)."""
    samples: dict[str, list[float]] = {"bare": [], "hydrated": []}
    for i in range(calls):
        order = [("bare", bare), ("hydrated", hydrated)]
        if i % 2:
            order.reverse()
        for name, fn in order:
            started = time.perf_counter()
            fn(i)
            samples[name].append((time.perf_counter() - started) * 1000)
    out: dict[str, Any] = {}
    for name, values in samples.items():
        values.sort()
        out[name] = {"p50": percentile(values, 50), "p99": percentile(values, 99)}
    out["ratio_p99"] = round(out["hydrated"]["p99"] / out["bare"]["p99"], 2)
    return out


def http_getter(base: str) -> Callable[[str], bytes]:
    """GET over one kept-alive HTTP/1.1 connection (a game backend's pooled client)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)

    def get(path: str) -> bytes:
        conn.request("GET", path)
        reply = conn.getresponse()
        body = reply.read()
        if reply.status != 200:
            raise SystemExit(f"GET {path}: HTTP {reply.status} {body[:200]!r}")
        return body

    return get


def http_reads(base: str, calls: int, pick: Sequence[str]) -> dict[str, Any]:
    """Each page through ``lb serve``, bare (``profile=false``) and hydrated, interleaved."""
    get = http_getter(base)
    top = f"/v1/leaderboards/{GAME}/top?window=alltime"
    pages: dict[str, Callable[[int, bool], str]] = {
        "top 10": lambda i, p: f"{top}&limit=10&profile={str(p).lower()}",
        "top 100": lambda i, p: f"{top}&limit=100&profile={str(p).lower()}",
        "around k=5": lambda i, p: (
            f"/v1/leaderboards/{GAME}/players/{pick[i]}/neighbors?window=alltime&k=5"
            f"&profile={str(p).lower()}"
        ),
    }
    out: dict[str, Any] = {}
    for name, path in pages.items():
        if b'"profile"' not in get(path(0, True)) or b'"profile"' in get(path(0, False)):
            raise SystemExit(f"HTTP {name}: profile=true/false does not hydrate/skip")
        log(f"HTTP {name}, bare and hydrated, {calls} calls each")
        out[name] = timed_pair(calls, *http_pair(get, path))
    return out


def http_pair(
    get: Callable[[str], bytes], path: Callable[[int, bool], str]
) -> tuple[Callable[[int], object], Callable[[int], object]]:
    """The bare and the hydrated GET of one page, as :func:`timed_pair` calls them."""

    def bare(i: int) -> object:
        return get(path(i, False))

    def hydrated(i: int) -> object:
        return get(path(i, True))

    return bare, hydrated


def check_hydrated(name: str, answer: Page, looked_up: Page) -> None:
    """The hydrated answer is the bare one looked up, and every entry has a profile here."""
    if not all(line.get("profile") for line in lines_of(answer)):
        raise SystemExit(f"{name}: a hydrated answer lacks a profile")
    if answer != looked_up:
        raise SystemExit(f"{name}: the hydrated answer differs from the bare one looked up")


def measure(players: int, calls: int, settings: Settings) -> dict[str, Any]:
    """Load the board and the profiles, time each read bare and hydrated, clean up."""
    namespace = f"bench-profiles-{run_id()}"
    client = redis_client(settings)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    window = window_for(WindowKind.ALLTIME, now_ms)
    config = dataclasses.replace(GameConfig(), exact_tier=max(players, GameConfig().exact_tier))
    catalog = GameCatalog({}, config)
    key = f"{namespace}:{{{GAME}}}:{window.id}"
    rng = random.Random(players + 2)
    pick = [player_id(rng.randrange(players)) for _ in range(calls)]
    result: dict[str, Any] = {"players": players, "calls": calls}
    try:
        log(f"{players:,} players: loading the board and the profiles ({namespace})")
        board = draw_board(players, now_ms)
        result["load_s"] = {
            "board": round(load_redis(client, key, composites(board, config.codec(window))), 1),
            "profiles": round(load_profiles(client, namespace, players), 1),
        }
        del board
        boards = BoardReader(client, catalog, namespace)
        profiles = ProfileReader(client, namespace)

        def top(n: int, hydrated: bool) -> Callable[[int], Any]:
            return lambda i: boards.top(GAME, "alltime", n, now_ms=now_ms, profiles=hydrated)

        def around(hydrated: bool) -> Callable[[int], Any]:
            return lambda i: boards.around(
                GAME, pick[i], "alltime", 5, now_ms=now_ms, profiles=hydrated
            )

        reads: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
            "top 10": (top(10, False), top(10, True)),
            "top 100": (top(100, False), top(100, True)),
            "around k=5": (around(False), around(True)),
        }
        result["reads"] = {}
        for name, (bare, hydrated) in reads.items():
            check_hydrated(name, hydrated(0), profiles.hydrate(bare(0)))
            log(f"{players:,} players: {name}, bare and hydrated, {calls} calls each")
            result["reads"][name] = timed_pair(calls, bare, hydrated)
        env = child_environment({"LB_NAMESPACE": namespace})
        with server(
            env,
            ROOT,
            Path(tempfile.gettempdir()) / f"{namespace}.serve.log",
            options=["--page-cache-ms", "0"],
        ) as base:
            result["http"] = http_reads(base, calls, pick)
    finally:
        for found in client.scan_iter(match=f"{namespace}:*", count=1000):
            client.unlink(found)
        client.close()
    return result


def ratio_rows(reads: dict[str, Any]) -> list[list[str]]:
    """One table row per page: p50/p99 bare and hydrated, and the p99 ratio against the budget."""
    return [
        [
            name,
            f"{read['bare']['p50']:.2f}",
            f"{read['bare']['p99']:.2f}",
            f"{read['hydrated']['p50']:.2f}",
            f"{read['hydrated']['p99']:.2f}",
            f"{read['ratio_p99']:.2f}x" + ("" if read["ratio_p99"] <= BUDGET else " (over)"),
        ]
        for name, read in reads.items()
    ]


def markdown(summary: dict[str, Any]) -> str:
    """The docs/BENCHMARKS.md section."""
    size = summary["size"]
    header = ["read", "bare p50", "bare p99", "hydrated p50", "hydrated p99", "p99 ratio"]
    return "\n".join(
        [
            "## Profiles on a page (`bench.profiles`)",
            "",
            f"`{summary['command']}`: one all-time board of {size['players']:,} players, each with "
            "a profile; every page timed bare and hydrated, interleaved call by call, "
            f"{size['calls']:,} calls each, milliseconds. The budget is a hydrated p99 within "
            f"{BUDGET}x of the bare one.",
            "",
            "Through the HTTP API (`lb serve`, one worker, page cache off, one kept-alive "
            "connection; `profile=false` is the bare page):",
            "",
            table(header, ratio_rows(size["http"])),
            "",
            "Through the Python reader (`BoardReader`, `profiles=True`: on this standalone "
            "Redis the page, its entries' metadata and its players' profiles in one script "
            "call):",
            "",
            table(header, ratio_rows(size["reads"])),
            "",
            f"Machine: {machine_line(summary['machine'])}.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and publish it; exit 1 when a ratio is above the budget."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.profiles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--players", type=int, default=1_000_000, help="board size (1000000)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per read (2000)")
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.players < 200:
        parser.error("need --calls >= 1 and --players >= 200")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    info = machine()
    size = measure(args.players, args.calls, Settings.from_env())
    summary: dict[str, Any] = {
        "benchmark": "profiles",
        "command": (
            ".venv/bin/python -m bench.profiles "
            + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "machine": info,
        "args": vars(args),
        "size": size,
    }
    worst = max(read["ratio_p99"] for read in size["http"].values())
    if worst > BUDGET:
        log(f"a hydrated page's p99 is {worst}x the bare one, above the {BUDGET}x budget")
    # The answers were checked (every entry hydrated): the figures are published either way.
    published = publish(SECTION, summary, markdown, True, not args.no_doc)
    return published or (1 if worst > BUDGET else 0)


if __name__ == "__main__":
    sys.exit(main())
