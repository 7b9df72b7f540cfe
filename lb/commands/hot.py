"""``lb hot GAME --window W``: the most active players (and games) of a board period.

Reads ``LB_TOPIC`` from the beginning, validates every record as the job does
(forged or malformed records never count), and counts the events whose time
lies in the period with DataSketches (``frequent_strings_sketch`` for the
heaviest players and games, with its error bound; ``count_min_sketch`` for any
one player's count, ``--player``). The answer depends on the log only, so it is
the same every time. ``--publish`` stores the counts in Redis
(``<ns>:{<game>}:hot:<window id>``) for the HTTP route
``GET /v1/leaderboards/{gameId}/hot``. How it works and its accuracy: docs/HEAVY_HITTERS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from adapters.kafka import LogReader
from config.clients import game_catalog, redis_client
from config.settings import Settings
from domain.errors import ConfigError, QueryError
from domain.heavy_hitters import count_activity, hot_key
from domain.ranking import MAX_LIMIT
from domain.signing import parse_keyring
from domain.validation import Validator
from lb.commands.read import WINDOW_HELP, now_ms
from readers.hot import answer_of
from schemas.decode_verify import decode_verifier


def _hot(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    catalog = game_catalog(settings)
    config = catalog.lookup(args.game)
    if config is None:
        raise ConfigError(f"game {args.game!r} is not served by the game catalog")
    now = now_ms()
    window = config.parse_window(args.window, now)
    if not 1 <= args.limit <= MAX_LIMIT:
        raise QueryError(f"--limit must be 1..{MAX_LIMIT}, got {args.limit}")
    validator = Validator(
        catalog,
        decode_verifier(parse_keyring(settings.hmac_keys.reveal()), engine=settings.decoder),
    )
    log = LogReader(settings.kafka_config(), settings.topic)
    started = time.monotonic()
    ranges = {p: (0, end - 1) for p, end in log.ends().items()}
    checked = (validator.check_batch(batch) for batch in log.read(ranges))
    players, games = count_activity(checked, args.game, window)
    answer = answer_of(window.id, now, players, games, args.limit, args.player)
    if args.publish:
        redis_client(settings).hset(
            hot_key(settings.namespace, args.game, window.id),
            mapping={"players": players.encode(), "games": games.encode(), "builtAtMs": now},
        )
    if args.json:
        print(json.dumps(answer))
        return 0
    print(
        f"{args.game} {window.id}: {answer['events']:,} events counted in "
        f"{time.monotonic() - started:.1f}s; counts are within +-{answer['errorBound']:,}",
        file=sys.stderr,
    )
    for row in answer["players"]:
        print(f"  {row['playerId']:<24} {row['events']:>10,}")
    print("games:")
    for row in answer["games"]:
        print(f"  {row['gameId']:<24} {row['events']:>10,}")
    if answer["player"] is not None:
        player = answer["player"]
        print(f"{player['playerId']}: about {player['events']:,} events (count-min estimate)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb hot``."""
    hot = subparsers.add_parser(
        "hot",
        help="the most active players and games of a board period (heavy hitters)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hot.add_argument("game", help="game id, e.g. g1")
    hot.add_argument("--window", default="alltime", help=WINDOW_HELP)
    hot.add_argument("--limit", type=int, default=10, help="players and games listed (1..1000)")
    hot.add_argument("--player", default=None, help="also estimate this player's event count")
    hot.add_argument("--publish", action="store_true", help="store the counts for the HTTP route")
    hot.add_argument("--json", action="store_true", help="print the JSON answer")
    hot.set_defaults(handler=_hot)
