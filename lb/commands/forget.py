"""``lb forget PLAYER``: erase a player from every game, wait until it shows, print a receipt.

The erasure is a signed record on the scores topic (``domain.erasure``) and a
tombstone on the profiles and team-membership topics, so a replay or
``lb rebuild`` erases the player again; ``readers.erasure`` finds the player
before, waits for the jobs, and removes the friend sets, which no log
produces. This is an edge: settings and the clock are read here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from config.clients import probe_kafka, quiet_kafka_extra
from config.settings import Settings
from domain.erasure import Receipt, Tombstone
from domain.errors import ConfigError
from domain.signing import parse_keyring
from jobs.archive_scrub import scrub_archives
from lb.argtypes import positive_float
from readers import erasure as forget
from readers import game_catalog, redis_client
from readers.board_reads import check_player_id


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _progress(quiet: bool) -> Callable[[forget.Progress], None]:
    last: list[forget.Progress] = []

    def show(state: forget.Progress) -> None:
        if quiet or (last and last[-1] == state):
            return
        last.append(state)
        print(f"lb forget: {state.line()} applied the erasure", file=sys.stderr)

    return show


def _print(found: Receipt) -> None:
    answer = found.as_json()
    record = answer["record"]
    assert isinstance(record, dict)
    print(
        f"erased {found.player}: record {record['topic']}[{record['partition']}]@"
        f"{record['offset']} ({record['eventId']})"
    )
    if found.done_ms is None:
        print(
            f"requested {_when(found.requested_ms)}; not waited for: the job removes the "
            "boards below when it reads the record"
        )
    else:
        print(f"requested {_when(found.requested_ms)}, gone everywhere {_when(found.done_ms)}")
    for item in found.removed:
        score = "?" if item.score is None else str(item.score)
        print(f"  {item.game:<20} {item.window:<28} score {score}")
    for game, team in found.teams:
        print(f"  {game:<20} {'team ' + team:<28} membership")
    print(
        f"  {len(found.removed)} board(s) in {len({i.game for i in found.removed})} game(s); "
        f"{found.friend_sets} friend set(s) deleted; removed from {found.followers} "
        "other player(s)' friend sets"
    )
    print(f"  profile: {_tombstone(found.profile_record, 'removed' if found.profile else 'none')}")
    print(f"  teams: {_tombstone(found.teams_record, f'{len(found.teams)} membership(s)')}")


def _tombstone(record: Tombstone | None, what: str) -> str:
    if record is None:
        return f"{what}; no tombstone (no such topic in use)"
    return f"{what}; tombstone {record.topic}[{record.partition}]@{record.offset}"


def _run(args: argparse.Namespace) -> int:
    check_player_id(args.player)
    settings = Settings.from_env()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = args.key_id or keyring.key_ids[0]
    if key_id not in keyring:
        raise ConfigError(f"--key-id {key_id!r} is not in LB_HMAC_KEYS")
    client = redis_client(settings)
    namespace = settings.namespace
    catalog = game_catalog(settings)
    before = forget.find(client, namespace, args.player, catalog)
    if not before and not args.force:
        raise ConfigError(
            f"player {args.player!r} is on no board, in no friend set, has no profile and no "
            f"team in namespace {namespace!r}: nothing to erase (check the id; --force "
            "produces the erasure anyway)"
        )
    probe_kafka(settings)
    where = forget.produce(
        settings.kafka_bootstrap,
        quiet_kafka_extra(settings),
        forget.topics(settings, catalog),
        keyring,
        key_id,
        args.player,
        _now_ms(),
    )
    if not args.no_wait:
        forget.wait_applied(
            client, namespace, args.player, where, before, args.timeout, _progress(args.quiet)
        )
    friends = forget.remove_outside_log(client, namespace, args.player, before, where)
    done_ms = None if args.no_wait else _now_ms()
    done = forget.receipt(args.player, where, before, done_ms, friends)
    scrubbed = [] if args.archives is None else scrub_archives(args.archives, args.player)
    if args.json:
        answer = done.as_json()
        if args.archives is not None:
            answer["archives"] = [{"game": s.game, "board": s.window} for s in scrubbed]
        print(json.dumps(answer))
    else:
        _print(done)
        for item in scrubbed:
            print(f"  archive rewritten: {item.file}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``forget``."""
    parser = subparsers.add_parser(
        "forget",
        help="erase a player from every game and print a receipt",
        description="Produce a signed erasure record for PLAYER (key = the player, so it is "
        "ordered with their events) and a tombstone on the profiles topic and the "
        "team-membership topic, wait until the jobs have removed them from every board of "
        "every game (windows, seasons, tournaments with their attempts, shards, team boards), "
        "their profile and their team memberships, remove their friend sets, and print what "
        "was removed. Replays and lb rebuild erase the player again; events after the erasure "
        "count as a new entry.",
    )
    parser.add_argument("player", help="the playerId to erase")
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=forget.WAIT_S,
        help="seconds to wait for the jobs (default %(default)s)",
    )
    parser.add_argument("--key-id", help="the LB_HMAC_KEYS key to sign with (default: the first)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="produce the erasure even if the player is found nowhere",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="produce the records and print what they will remove, without waiting for the jobs",
    )
    parser.add_argument(
        "--archives",
        type=Path,
        metavar="DIR",
        help="also rewrite the Parquet archives under DIR without the player (lb archive's dir)",
    )
    parser.add_argument("--json", action="store_true", help="print the receipt as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(handler=_run)
