"""``lb teams``: team membership records, the membership job, team board reads and their audit.

``lb teams join PLAYER TEAM`` / ``lb teams leave PLAYER`` produce signed
membership records; ``lb teams run`` applies the membership topic to every
game with team boards (``--until-end`` stops at the end offsets seen at
start); ``top``/``rank``/``around``/``members``/``of`` read; ``verify``
recomputes every team board from the member boards and the membership.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from confluent_kafka import Producer

from config.clients import quiet_kafka_config
from config.settings import Settings
from domain.errors import QueryError
from domain.signing import parse_keyring
from domain.teams import valid_team_id
from jobs.team_verify import verify_teams
from jobs.teams import MembershipApplier, ensure_membership_topic, run_membership
from lb.commands.read import add_game, add_rank_mode, add_window, emit, now_ms
from readers import game_catalog, redis_client
from readers.teams import TeamReader
from schemas.membership import MembershipCodec, sign_membership
from sinks.teams.store import resync_teams


def _reader() -> TeamReader:
    settings = Settings.from_env()
    return TeamReader(redis_client(settings), game_catalog(settings), settings.namespace)


def _produce(args: argparse.Namespace, team: str | None) -> int:
    settings = Settings.from_env()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = args.key_id or sorted(keyring)[0]
    record = sign_membership(keyring, key_id, args.player, team, now_ms())
    ensure_membership_topic(settings)
    producer = Producer({**quiet_kafka_config(settings), "enable.idempotence": True})
    producer.produce(
        settings.teams_topic, key=args.player.encode(), value=MembershipCodec().encode(record)
    )
    if producer.flush(30) > 0:
        print(f"lb teams: error: {settings.teams_topic!r} did not acknowledge", file=sys.stderr)
        return 2
    doc = {"playerId": args.player, "teamId": team, "topic": settings.teams_topic}
    if args.json:
        emit(doc)
    else:
        print(f"{args.player}: {'joins ' + team if team else 'leaves its team'}")
    return 0


def _join(args: argparse.Namespace) -> int:
    if not valid_team_id(args.team):
        raise QueryError(f"invalid team id {args.team!r}: allowed A-Z a-z 0-9 . _ - (1 to 64)")
    return _produce(args, args.team)


def _leave(args: argparse.Namespace) -> int:
    return _produce(args, None)


def _run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    stop: list[bool] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.append(True)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    ensure_membership_topic(settings)
    applier = MembershipApplier(
        redis_client(settings),
        settings.namespace,
        game_catalog(settings).games(),
        settings.teams_topic,
    )
    totals = run_membership(
        quiet_kafka_config(settings),
        applier,
        MembershipCodec(),
        parse_keyring(settings.hmac_keys.reveal()),
        settings.teams_topic,
        until_end=args.until_end,
        stopping=lambda: bool(stop),
    )
    dead = ", ".join(f"{code} {n}" for code, n in sorted(totals.dead.items())) or "none"
    print(
        f"lb teams run: {totals.records} membership records, {totals.moved} team changes, "
        f"dead letters: {dead}"
    )
    return 0


def _top(args: argparse.Namespace) -> int:
    page = _reader().top(
        args.game, args.window, now_ms(), args.limit, args.offset, ranks=args.rank_mode
    )
    if args.json:
        emit(page)
        return 0
    print(f"{args.game} teams {page['window']} ({page['aggregate']})")
    if not page["entries"]:
        print("  (no teams)")
    for entry in page["entries"]:
        print(f"  {entry['rank']:>4}  {entry['teamId']:<20} {entry['score']}")
    return 0


def _rank(args: argparse.Namespace) -> int:
    answer = _reader().rank(args.game, args.team, args.window, now_ms(), ranks=args.rank_mode)
    if args.json:
        emit(answer)
    else:
        print(
            f"{args.team}: rank {answer['rank']}, score {answer['score']}, "
            f"{answer['members']} member(s) scored"
        )
    return 0 if answer["rank"] is not None else 1


def _around(args: argparse.Namespace) -> int:
    answer = _reader().around(
        args.game, args.team, args.window, now_ms(), args.k, ranks=args.rank_mode
    )
    if args.json:
        emit(answer)
    else:
        for entry in [
            *answer["above"],
            *([answer["team"]] if answer["team"] else []),
            *answer["below"],
        ]:
            flag = ">" if entry["teamId"] == args.team else " "
            print(f"{flag} {entry['rank']:>4}  {entry['teamId']:<20} {entry['score']}")
    return 0 if answer["team"] is not None else 1


def _members(args: argparse.Namespace) -> int:
    page = _reader().members(args.game, args.team, args.window, now_ms(), args.limit, args.offset)
    if args.json:
        emit(page)
    else:
        print(f"{args.game} team {args.team} {page['window']}")
        for entry in page["entries"]:
            print(f"  {entry['rank']:>4}  {entry['playerId']:<20} {entry['score']}")
    return 0


def _of(args: argparse.Namespace) -> int:
    answer = _reader().team_of(args.game, args.player)
    if args.json:
        emit(answer)
    else:
        print(f"{args.player}: {answer['teamId'] or 'no team'}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    report = verify_teams(
        redis_client(settings), game_catalog(settings), settings.namespace, args.game
    )
    if args.json:
        emit(report)
    else:
        for game, differences in report["games"].items():
            print(f"{game}: {'equal' if not differences else f'{len(differences)} difference(s)'}")
            for line in differences[: args.examples]:
                print(f"  {line}")
    return 0 if report["equal"] else 1


def _resync(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    games = game_catalog(settings).team_games()
    if args.game is not None:
        if args.game not in games:
            raise QueryError(f"game {args.game!r} keeps no team boards")
        games = {args.game: games[args.game]}
    windows = resync_teams(redis_client(settings), settings.namespace, games)
    print(f"lb teams resync: {len(games)} game(s), {windows} window(s) recomputed")
    return 0


def _reads(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    top = sub.add_parser("top", help="one page of a team board, best first")
    add_game(top)
    add_window(top)
    top.add_argument("--limit", type=int, default=10, help="entries per page (1..1000)")
    top.add_argument("--offset", type=int, default=0, help="entries to skip")
    add_rank_mode(top)
    top.set_defaults(handler=_top)
    for name, handler, text in (
        ("rank", _rank, "a team's rank and score (exit 1: not on the board)"),
        ("around", _around, "a team and its neighbours (exit 1: not on the board)"),
        ("members", _members, "a team's members ranked within it"),
    ):
        parser = sub.add_parser(name, help=text)
        add_game(parser)
        parser.add_argument("team", help="team id, e.g. red")
        add_window(parser)
        if name == "around":
            parser.add_argument("--k", type=int, default=5, help="teams above and below")
        if name != "members":
            add_rank_mode(parser)
        if name == "members":
            parser.add_argument("--limit", type=int, default=10, help="entries (1..1000)")
            parser.add_argument("--offset", type=int, default=0, help="entries to skip")
        parser.set_defaults(handler=handler)
    of = sub.add_parser("of", help="a player's team in a game")
    add_game(of, player=True)
    of.add_argument("--json", action="store_true", help="print the JSON answer")
    of.set_defaults(handler=_of)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``teams`` and its subcommands."""
    teams = subparsers.add_parser(
        "teams",
        help="team boards: membership, the membership job, reads, audit",
        description="Team boards: a board of teams per window of every game with "
        "teams = sum|best|avg, fed by the compacted membership topic (LB_TEAMS_TOPIC).",
    )
    sub = teams.add_subparsers(dest="teams_command", required=True, metavar="SUBCOMMAND")
    join = sub.add_parser("join", help="produce a signed record: PLAYER is in TEAM")
    join.add_argument("player", help="player id")
    join.add_argument("team", help="team id (A-Z a-z 0-9 . _ -, 1 to 64)")
    leave = sub.add_parser("leave", help="produce a signed record: PLAYER is in no team")
    leave.add_argument("player", help="player id")
    for parser, handler in ((join, _join), (leave, _leave)):
        parser.add_argument("--key-id", default=None, help="HMAC key id (default: the first)")
        parser.add_argument("--json", action="store_true", help="print the JSON answer")
        parser.set_defaults(handler=handler)
    run = sub.add_parser("run", help="apply the membership topic to the team boards")
    run.add_argument(
        "--until-end", action="store_true", help="stop at the end offsets seen at start"
    )
    run.set_defaults(handler=_run)
    _reads(sub)
    verify = sub.add_parser(
        "verify", help="recompute every team board from the boards and the membership"
    )
    verify.add_argument("--game", default=None, help="only this game")
    verify.add_argument("--examples", type=int, default=10, help="differences shown per game")
    verify.add_argument("--json", action="store_true", help="print the JSON report")
    verify.set_defaults(handler=_verify)
    resync = sub.add_parser(
        "resync",
        help="recompute the team boards from the boards and the membership (atomic per game)",
    )
    resync.add_argument("--game", default=None, help="only this game")
    resync.set_defaults(handler=_resync)
