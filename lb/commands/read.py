"""``lb top``, ``lb rank``, ``lb around``, ``lb tournaments``: read a leaderboard from Redis.

The edge of the Python read API (``readers.boards``): settings come from the
environment (``LB_REDIS_URL``, ``LB_NAMESPACE``, ``LB_GAMES``) and the clock is
read here, once, to resolve ``--window daily`` / ``weekly`` to the current UTC
day or ISO week. ``--json`` prints exactly the Python API's answer; without it
a table. A player without a score on the board exits 1 (JSON with nulls).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from config.settings import Settings
from domain.errors import ConfigError
from domain.ranking import RANK_MODES, Entry
from readers import game_catalog, redis_client
from readers.boards import BoardReader
from readers.games import what_exists_instead

WINDOW_HELP = (
    "alltime, hourly, daily, weekly, monthly (the current one, in the game's reset "
    "time zone), an explicit daily:YYYY-MM-DD / weekly:YYYY-Www / monthly:YYYY-MM / "
    "hourly:YYYY-MM-DDTHH+hhmm, season:NAME or tournament:NAME (default: alltime)"
)


def now_ms() -> int:
    """The wall clock in epoch ms: read at this edge only, never in readers."""
    return time.time_ns() // 1_000_000


def board_reader(settings: Settings) -> BoardReader:
    """The reader of the configured Redis, namespace and game catalog."""
    return BoardReader(redis_client(settings), game_catalog(settings), settings.namespace)


def must_have_boards(settings: Settings, game: str) -> None:
    """Refuse a game that has no boards here (a typo, or the wrong LB_NAMESPACE), naming what has.

    Called only once an answer came back empty, so a read of a real board
    costs nothing more.
    """
    where = what_exists_instead(
        redis_client(settings), settings.namespace, game_catalog(settings), game
    )
    if where is not None:
        raise ConfigError(
            f"no boards of game {game!r} in namespace {settings.namespace!r} (LB_NAMESPACE); "
            f"{where}"
        )


def emit(doc: Any) -> None:
    """Print one JSON document on one line (what ``--json`` promises)."""
    print(json.dumps(doc))


def table(rows: Sequence[Entry], marker: str | None = None) -> str:
    """Entries as aligned text; the ``marker`` player's line is flagged with ``>``."""
    if not rows:
        return "  (no entries)"
    ranks = ["-" if row["rank"] is None else str(row["rank"]) for row in rows]
    rank_w = max(4, *(len(r) for r in ranks))
    names = [_name(row) for row in rows]
    name_w = max(6, *(len(name) for name in names))
    scores = [f"{row['score']:,}" for row in rows]
    score_w = max(5, *(len(s) for s in scores))
    lines = [f"  {'rank':>{rank_w}}  {'player':<{name_w}}  {'score':>{score_w}}"]
    for rank, row, name, score in zip(ranks, rows, names, scores, strict=True):
        flag = ">" if row["playerId"] == marker else " "
        lines.append(f"{flag} {rank:>{rank_w}}  {name:<{name_w}}  {score:>{score_w}}")
    return "\n".join(lines)


def _name(row: Entry) -> str:
    """The player column: the id, and the display name when the entry carries a profile."""
    profile = row.get("profile")
    return row["playerId"] if not profile else f"{row['playerId']} ({profile['displayName']})"


def _top(args: argparse.Namespace) -> int:
    if args.watch:
        return _watch(args)
    settings = Settings.from_env()
    reader = board_reader(settings)
    page = reader.top(
        args.game,
        args.window,
        args.limit,
        args.offset,
        args.cursor,
        now_ms=now_ms(),
        ranks=args.rank_mode,
        profiles=args.profiles,
    )
    if not page["entries"] and not args.offset and not args.cursor:
        must_have_boards(settings, args.game)
    if args.json:
        emit(page)
        return 0
    print(f"{args.game} {page['window']}")
    print(table(page["entries"]))
    if page["nextCursor"]:
        print(f"next page: --cursor {page['nextCursor']}")
    return 0


def _watch(args: argparse.Namespace) -> int:
    """``lb top --watch``: the page and the job's rate, lag and dead letters, redrawn live."""
    from lb import live_view

    settings = Settings.from_env()
    reader = board_reader(settings)
    watcher = live_view.JobWatcher(settings.state_dir)
    if not reader.top(args.game, args.window, 1, 0, now_ms=now_ms())["entries"]:
        must_have_boards(settings, args.game)

    def frames() -> Iterator[live_view.Frame]:
        until = time.monotonic() + args.seconds if args.seconds > 0 else None
        while True:
            page = reader.top(
                args.game,
                args.window,
                args.limit,
                args.offset,
                now_ms=now_ms(),
                ranks=args.rank_mode,
            )
            views = watcher.look(settings.topic)
            yield live_view.frame(
                f"{args.game} {page['window']} top {args.limit}", page["entries"], views
            )
            if until is not None and time.monotonic() >= until:
                return
            time.sleep(args.every)

    live_view.show(frames())
    return 0


def _rank(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    reader = board_reader(settings)
    answer = reader.rank(args.game, args.player, args.window, now_ms=now_ms(), ranks=args.rank_mode)
    if answer["score"] is None:
        must_have_boards(settings, args.game)
    if args.json:
        emit(answer)
    elif answer["score"] is None:
        print(f"{args.player} has no score on {args.game} {answer['window']}")
    else:
        rank = "beyond the exact tier" if answer["rank"] is None else f"#{answer['rank']}"
        print(
            f"{args.player} on {args.game} {answer['window']}: {rank}, score {answer['score']:,}, "
            f"above {answer['percentile']}% of players"
        )
    return 1 if answer["score"] is None else 0


def _around(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    reader = board_reader(settings)
    answer = reader.around(
        args.game,
        args.player,
        args.window,
        args.k,
        now_ms=now_ms(),
        ranks=args.rank_mode,
        profiles=args.profiles,
    )
    if answer["player"] is None:
        must_have_boards(settings, args.game)
    if args.json:
        emit(answer)
    elif answer["player"] is None:
        print(f"{args.player} has no score on {args.game} {answer['window']}")
    else:
        print(f"{args.game} {answer['window']}")
        print(table([*answer["above"], answer["player"], *answer["below"]], args.player))
    return 1 if answer["player"] is None else 0


def _tournaments(args: argparse.Namespace) -> int:
    reader = board_reader(Settings.from_env())
    answer = reader.player_tournaments(
        args.game, args.player, now_ms=now_ms(), ranks=args.rank_mode
    )
    if args.json:
        emit(answer)
        return 0
    rows = answer["tournaments"]
    if not rows:
        print(f"{args.player} is on no tournament board of {args.game}")
        return 0
    print(f"{args.player} in {args.game} tournaments")
    name_w = max(10, *(len(row["tournament"]) for row in rows))
    print(f"  {'tournament':<{name_w}}  {'status':<8}  {'rank':>6}  {'attempts':>8}  score")
    for row in rows:
        rank = "-" if row["rank"] is None else str(row["rank"])
        cap = "" if row["maxAttempts"] is None else f"/{row['maxAttempts']}"
        attempts = f"{row['attempts']}{cap}"
        print(
            f"  {row['tournament']:<{name_w}}  {row['status']:<8}  {rank:>6}  "
            f"{attempts:>8}  {row['score']}"
        )
    return 0


def add_game(parser: argparse.ArgumentParser, player: bool = False) -> None:
    """The positional GAME (and PLAYER) of the read commands."""
    parser.add_argument("game", help="game id, e.g. g1")
    if player:
        parser.add_argument("player", help="player id, e.g. p0000008")


def add_window(parser: argparse.ArgumentParser) -> None:
    """``--window`` and ``--json``, shared by every read command."""
    parser.add_argument("--window", default="alltime", help=WINDOW_HELP)
    parser.add_argument("--json", action="store_true", help="print the JSON answer")


def add_rank_mode(parser: argparse.ArgumentParser) -> None:
    """``--rank-mode``: unique ranks (default), competition (1, 2, 2, 4) or dense (1, 2, 2, 3)."""
    parser.add_argument(
        "--rank-mode",
        choices=RANK_MODES,
        default="unique",
        help="'competition': equal scores share a rank (1, 2, 2, 4); 'dense': they share "
        "one and the next score takes the next (1, 2, 2, 3; games with dense_ranks)",
    )


def add_profiles(parser: argparse.ArgumentParser) -> None:
    """``--profiles``: each entry also carries its player's profile."""
    parser.add_argument(
        "--profiles",
        action="store_true",
        help="add each entry's profile (display name, avatar, country; null: none)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``top``, ``rank`` and ``around``."""
    top = subparsers.add_parser(
        "top",
        help="one page of a leaderboard, best first",
        description="One page of a board. Page with --offset, or with --cursor (the "
        "nextCursor of the previous page), which never repeats or skips a player when "
        "scores change between pages.",
    )
    add_game(top)
    add_window(top)
    top.add_argument("--limit", type=int, default=10, help="entries per page (1..1000)")
    top.add_argument("--offset", type=int, default=0, help="entries to skip")
    top.add_argument("--cursor", default=None, help="nextCursor of the previous page")
    top.add_argument(
        "--watch",
        action="store_true",
        help="redraw the page live with the running job's rate, lag and dead letters "
        "(plain text, printed on change, when stdout is not a terminal); Ctrl-C stops",
    )
    top.add_argument("--every", type=float, default=1.0, help="seconds between redraws (--watch)")
    top.add_argument(
        "--seconds", type=float, default=0.0, help="stop watching after this long (0: never)"
    )
    add_rank_mode(top)
    add_profiles(top)
    top.set_defaults(handler=_top)

    rank = subparsers.add_parser(
        "rank",
        help="a player's rank, score and percentile",
        description="A player's rank (null beyond the game's exact tier), score and "
        "percentile (share of players with a strictly lower score). Exits 1 when the "
        "player has no score on the board.",
    )
    add_game(rank, player=True)
    add_window(rank)
    add_rank_mode(rank)
    rank.set_defaults(handler=_rank)

    around = subparsers.add_parser(
        "around",
        help="the players right above and below a player",
        description="The K players right above and right below a player (fewer at the "
        "edges of the board). Exits 1 when the player has no score on the board.",
    )
    add_game(around, player=True)
    add_window(around)
    around.add_argument("--k", type=int, default=5, help="neighbours on each side (0..100)")
    add_rank_mode(around)
    add_profiles(around)
    around.set_defaults(handler=_around)

    tournaments = subparsers.add_parser(
        "tournaments",
        help="the tournaments a player is on the board of",
        description="Every tournament of the game (docs/GAMES.md) that has the player on "
        "its board, earliest start first: status (upcoming, running, ended), rank, score, "
        "percentile and the attempts counted against max_attempts. A tournament's own "
        "board is read with lb top GAME --window tournament:NAME.",
    )
    add_game(tournaments, player=True)
    tournaments.add_argument("--json", action="store_true", help="print the JSON answer")
    add_rank_mode(tournaments)
    tournaments.set_defaults(handler=_tournaments)
