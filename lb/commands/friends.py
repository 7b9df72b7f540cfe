"""``lb friends``, ``lb friends-add``, ``lb friends-remove``, ``lb friends-list``.

Friend lists are one-way ("following") and per game; the friends board ranks a
player among the players they follow (``readers.friends``). Like the other
read commands, this is an edge: settings from the environment, clock read here.
"""

from __future__ import annotations

import argparse

from config.settings import Settings
from lb.commands.read import (
    add_game,
    add_profiles,
    add_rank_mode,
    add_window,
    emit,
    now_ms,
    table,
)
from readers import game_catalog, redis_client
from readers.friends import FriendsReader
from readers.profiles import ProfileReader


def _reader() -> FriendsReader:
    settings = Settings.from_env()
    return FriendsReader(redis_client(settings), game_catalog(settings), settings.namespace)


def _board(args: argparse.Namespace) -> int:
    reader = _reader()
    board = reader.board(args.game, args.player, args.window, now_ms=now_ms(), ranks=args.rank_mode)
    if args.profiles:
        ProfileReader(reader.client, reader.namespace).hydrate(board)
    if args.json:
        emit(board)
        return 0
    source = f"cached, {board['ttl']} s left" if board["cached"] else "fresh"
    print(f"{args.game} {board['window']}: {args.player} and friends ({source})")
    print(table(board["entries"], args.player))
    return 0


def _add(args: argparse.Namespace) -> int:
    added = _reader().add(args.game, args.player, args.friends)
    if args.json:
        emit({"playerId": args.player, "added": added})
    else:
        print(f"{args.player}: {added} new friend(s)")
    return 0


def _remove(args: argparse.Namespace) -> int:
    removed = _reader().remove(args.game, args.player, args.friends)
    if args.json:
        emit({"playerId": args.player, "removed": removed})
    else:
        print(f"{args.player}: {removed} friend(s) removed")
    return 0


def _list(args: argparse.Namespace) -> int:
    friends = _reader().list_friends(args.game, args.player)
    if args.json:
        emit({"playerId": args.player, "friends": friends})
    else:
        print("\n".join(friends) if friends else f"{args.player} follows nobody")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``friends``, ``friends-add``, ``friends-remove`` and ``friends-list``."""
    board = subparsers.add_parser(
        "friends",
        help="a player ranked among their friends",
        description="A player and the players they follow, ranked among themselves on one "
        "board (cached in Redis for about 5 s).",
    )
    add_game(board, player=True)
    add_window(board)
    add_profiles(board)
    add_rank_mode(board)
    board.set_defaults(handler=_board)

    for name, handler, verb in (
        ("friends-add", _add, "follow"),
        ("friends-remove", _remove, "unfollow"),
    ):
        sub = subparsers.add_parser(name, help=f"{verb} players (one-way, per game)")
        add_game(sub, player=True)
        sub.add_argument("friends", nargs="+", metavar="FRIEND", help=f"players to {verb}")
        sub.add_argument("--json", action="store_true", help="print the JSON answer")
        sub.set_defaults(handler=handler)

    listing = subparsers.add_parser("friends-list", help="the players a player follows")
    add_game(listing, player=True)
    listing.add_argument("--json", action="store_true", help="print the JSON answer")
    listing.set_defaults(handler=_list)
