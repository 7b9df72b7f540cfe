"""``lb verify``: audit the live boards against a replay of the log.

Replays ``LB_TOPIC`` (or only ``--game G``) into a scratch namespace with the
streaming job's own code path, compares every board, member, value and
counter with the live keys, prints a summary and up to ``--examples``
differences, and deletes the scratch keys (also when interrupted). It never
writes a live key. With the live job running, each group is compared at the
offsets both sides have applied (see ``jobs/verifier.py``), so a busy board
does not report false differences.

Board values are shown as the score and the time it was reached. A --game
found on neither side (no boards, no records) is an error naming the games
that have boards, not an empty pass. After a fix and ``lb dlq redrive`` the
replay, judging by today's settings, accepts each original the live job
refused and counts its re-driven copy as a duplicate: when that explains a
game's counters (boards equal), it is listed as expected, not as a difference.

Exit status: 0 equal, 1 different, 2 error. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from adapters.kafka import LogReader
from config.clients import game_catalog, quiet_kafka_config, redis_client
from config.settings import Settings
from domain.errors import ConfigError, LeaderboardError, ServiceError
from domain.games import GameCatalog
from domain.signing import parse_keyring
from domain.validation import Validator
from jobs.dead_letter_reader import Letter, read_letters
from jobs.profile_replay import ProfileAudit, audit_profiles, topic_exists, validator_of
from jobs.team_verify import verify_teams
from jobs.verifier import Verifier
from jobs.verify_report import Difference, VerifyReport
from readers.games import what_exists_instead
from schemas.decode_verify import decode_verifier


def _progress(started: float) -> object:
    def report(done: int, total: int) -> None:
        elapsed = max(time.monotonic() - started, 1e-6)
        rate = done / elapsed
        left = max(total - done, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        print(
            f"lb verify: replayed {done:,}/{total:,} records ({rate:,.0f}/s, ETA {eta})",
            file=sys.stderr,
            flush=True,
        )

    return report


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _shown(catalog: GameCatalog, diff: Difference, value: int | str | None) -> str:
    """A board value as a person reads it: the score (and when it was reached), or absent."""
    if value is None:
        return "absent"
    if isinstance(value, str):  # an entry's metadata
        return json.dumps(value, ensure_ascii=False)
    if diff.kind == "counter" or diff.board.startswith("meta:"):
        return f"{value:,}"
    try:
        config = catalog.lookup(diff.tag.split("/", 1)[0])
        if config is None:
            return f"{value:,} (raw board value)"
        codec = config.codec(config.window(diff.board))
        score, slot = codec.split(value)
    except LeaderboardError:
        return f"{value:,} (raw board value)"
    unit = codec.resolution.unit_ms
    if unit is None:
        return f"score {score:,}"
    reached = datetime.fromtimestamp((codec.origin_ms + slot * unit) / 1000, UTC)
    return f"score {score:,} reached {reached.isoformat(timespec='milliseconds')[:-6]}Z"


def _print_text(report: VerifyReport, examples: int, catalog: GameCatalog) -> None:
    verdict = "equal" if report.equal else "DIFFERENT"
    print(
        f"{verdict}: {report.groups} groups, {report.boards} boards, "
        f"{report.members:,} live members compared, {report.records:,} records replayed "
        f"in {report.seconds:.1f}s"
    )
    for kind, count in sorted(report.by_kind().items()):
        print(f"  {kind}: {count:,}")
    for why in report.explained:
        print(f"  expected: {why}")
    for diff in report.differences[:examples]:
        print(
            f"  {diff.kind}: group {diff.tag} board {diff.board} {diff.player}: "
            f"live {_shown(catalog, diff, diff.live)}, log {_shown(catalog, diff, diff.log)}"
        )


def _check_games(catalog: GameCatalog, games: list[str]) -> None:
    """Refuse a game LB_GAMES does not serve, before replaying anything."""
    for game in games:
        if catalog.lookup(game) is None:
            raise ConfigError(
                f"unknown game {game!r}: it is not in LB_GAMES and there is no [default] table"
            )


def _none_compared(
    settings: Settings, catalog: GameCatalog, report: VerifyReport, games: list[str]
) -> None:
    """An audit of a game found on neither side is a typo, not a pass: say what exists."""
    absent = [game for game in games if game not in report.games]
    if not absent:
        return
    where = what_exists_instead(redis_client(settings), settings.namespace, catalog, "")
    raise ConfigError(
        f"nothing to compare for game {', '.join(map(repr, absent))}: no boards in namespace "
        f"{settings.namespace!r} (LB_NAMESPACE) and no records in {settings.topic!r} "
        f"(LB_TOPIC); {where}"
    )


def _letters(settings: Settings) -> list[Letter]:
    """The dead letters (none when the dead-letter topic does not exist)."""
    try:
        return read_letters(quiet_kafka_config(settings), settings.dlq_topic)[0]
    except ServiceError:
        return []


def _verify(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    catalog = game_catalog(settings)
    _check_games(catalog, args.game or [])
    validator = Validator(
        catalog,
        decode_verifier(parse_keyring(settings.hmac_keys.reveal()), engine=settings.decoder),
    )
    verifier = Verifier(
        redis_client(settings),
        LogReader(settings.kafka_config(), settings.topic),
        validator,
        settings.namespace,
        topic=settings.topic,
        dedupe_horizon_ms=settings.dedupe_horizon_s * 1000,
        cache_players=settings.cache_players,
        games=args.game or (),
        progress=None if args.quiet else _progress(time.monotonic()),  # type: ignore[arg-type]
        letters=lambda: _letters(settings),
    )
    signal.signal(signal.SIGTERM, _interrupt)  # cleans up the scratch keys like Ctrl-C
    report = verifier.run()
    _none_compared(settings, catalog, report, args.game or [])
    profiles = None if args.game else _audit_profiles(settings)
    teams = _team_report(settings, catalog, args.game or [])
    if args.json:
        doc = report.as_dict(args.examples)
        if profiles is not None:
            doc["profiles"] = profiles.as_dict(args.examples)
        if teams:
            doc["teams"] = teams
        print(json.dumps(doc))
    else:
        _print_text(report, args.examples, catalog)
        if profiles is not None:
            _print_profiles(profiles, args.examples)
        _print_teams(teams, args.examples)
    profiles_equal = profiles is None or profiles.equal
    return 0 if report.equal and profiles_equal and (not teams or teams["equal"]) else 1


def _audit_profiles(settings: Settings) -> ProfileAudit | None:
    """The profile buckets against the profiles topic (None: no such topic)."""
    config = settings.kafka_config()
    if not topic_exists(config, settings.profiles_topic):
        return None
    return audit_profiles(
        redis_client(settings),
        config,
        settings.profiles_topic,
        settings.namespace,
        validator_of(parse_keyring(settings.hmac_keys.reveal())),
    )


def _print_profiles(audit: ProfileAudit, examples: int) -> None:
    verdict = "equal" if audit.equal else "DIFFERENT"
    print(
        f"profiles {verdict}: {audit.players:,} live profiles compared, "
        f"{audit.records:,} records replayed"
    )
    for player, live, log in audit.differences[:examples]:
        print(f"  profile {player}: live {live}, log {log}")


def _print_teams(teams: dict[str, Any], examples: int) -> None:
    for game, differences in teams.get("games", {}).items():
        print(
            f"team boards of {game}: "
            + (f"{len(differences)} difference(s)" if differences else "equal")
        )
        for line in differences[:examples]:
            print(f"  {line}")


def _team_report(settings: Settings, catalog: GameCatalog, games: list[str]) -> dict[str, Any]:
    """The team boards recomputed from the boards and the membership (jobs.team_verify)."""
    named = [g for g in catalog.team_games() if not games or g in games]
    reports = [
        verify_teams(redis_client(settings), catalog, settings.namespace, game) for game in named
    ]
    if not reports:
        return {}
    merged = {game: lines for one in reports for game, lines in one["games"].items()}
    return {"equal": all(one["equal"] for one in reports), "games": merged}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb verify``."""
    verify = subparsers.add_parser(
        "verify",
        help="audit the live boards against a replay of the log (exit 0 equal, 1 not, 2 error)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument(
        "--game",
        action="append",
        metavar="G",
        help="only this game (repeatable; default: every game)",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.add_argument(
        "--examples",
        type=int,
        default=20,
        metavar="N",
        help="differences to show (default 20)",
    )
    verify.add_argument("--quiet", action="store_true", help="no progress on stderr")
    verify.set_defaults(handler=_verify)
