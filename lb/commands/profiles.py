"""``lb profiles set|show|delete``: produce and read player profiles.

``set`` signs a profile record with a key of ``LB_HMAC_KEYS`` (the first, or
``--key-id``) and produces it to the profiles topic; ``delete`` produces the
tombstone that erases the profile. The running job projects both into Redis;
``--wait S`` waits up to S seconds until Redis shows the change. ``show`` reads
what Redis holds now.
"""

from __future__ import annotations

import argparse
import time

from config.clients import redis_client
from config.settings import Settings
from domain.errors import ConfigError, ServiceError
from domain.profiles import Profile, profile_problem, sign_profile
from domain.signing import parse_keyring
from lb.commands.read import emit
from producer.profiles import (
    ensure_profiles_topic,
    produce_erasure,
    produce_profile,
    profile_producer,
)
from readers.profiles import ProfileReader
from schemas.profile_codec import ProfileCodec

#: Seconds the producer waits for Kafka's acknowledgement.
FLUSH_S = 30.0


def _reader(settings: Settings) -> ProfileReader:
    return ProfileReader(redis_client(settings), settings.namespace)


def _wait(settings: Settings, player: str, wanted: Profile | None, seconds: float) -> None:
    """Until Redis shows ``wanted`` for ``player`` (ServiceError after ``seconds``)."""
    if seconds <= 0:
        return
    reader = _reader(settings)
    deadline = time.monotonic() + seconds
    while reader.profile(player) != wanted:
        if time.monotonic() >= deadline:
            raise ServiceError(
                f"the profile of {player!r} did not change in Redis within {seconds:g} s "
                "(is `lb run` running?)"
            )
        time.sleep(0.05)


def _set(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    keyring = parse_keyring(settings.hmac_keys.reveal())
    key_id = args.key_id or keyring.key_ids[0]
    if key_id not in keyring:
        raise ConfigError(f"--key-id {key_id!r} is not in LB_HMAC_KEYS")
    updated = args.updated_at if args.updated_at is not None else time.time_ns() // 1_000_000
    record = sign_profile(
        keyring,
        key_id,
        player_id=args.player,
        display_name=args.name,
        avatar_url=args.avatar,
        country=args.country,
        updated_at_ms=updated,
    )
    problem = profile_problem(record)
    if problem is not None:
        raise ConfigError(problem)
    ensure_profiles_topic(settings)
    with profile_producer(settings) as producer:
        produce_profile(producer, ProfileCodec.from_registry(), record)
        producer.flush(FLUSH_S)
    profile: Profile = {
        "displayName": record.display_name,
        "avatarUrl": record.avatar_url,
        "country": record.country,
        "updatedAt": record.updated_at_ms,
    }
    _wait(settings, args.player, profile, args.wait)
    if args.json:
        emit({"playerId": args.player, "profile": profile})
    else:
        print(f"{args.player}: profile produced to {settings.profiles_topic}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    ensure_profiles_topic(settings)
    with profile_producer(settings) as producer:
        produce_erasure(producer, args.player)
        producer.flush(FLUSH_S)
    _wait(settings, args.player, None, args.wait)
    if args.json:
        emit({"playerId": args.player, "profile": None})
    else:
        print(f"{args.player}: erasure produced to {settings.profiles_topic}")
    return 0


def _show(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    profile = _reader(settings).profile(args.player)
    if args.json:
        emit({"playerId": args.player, "profile": profile})
    elif profile is None:
        print(f"{args.player}: no profile")
    else:
        extra = [v for v in (profile["country"], profile["avatarUrl"]) if v]
        print(" ".join([f"{args.player}: {profile['displayName']}", *extra]))
    return 0 if profile is not None else 1


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``lb profiles set|show|delete``."""
    parser = subparsers.add_parser(
        "profiles",
        help="produce and read player profiles (names and avatars on every page)",
        description=__doc__,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    put = actions.add_parser("set", help="sign and produce a player's profile")
    put.add_argument("player", help="player id")
    put.add_argument("--name", required=True, help="display name (1..64 characters)")
    put.add_argument("--avatar", default=None, help="avatar URL (http or https)")
    put.add_argument("--country", default=None, help="ISO 3166-1 alpha-2 code, e.g. FR")
    put.add_argument("--key-id", default=None, help="signing key id (default: the first)")
    put.add_argument(
        "--updated-at", type=int, default=None, help="epoch ms the profile changed (default: now)"
    )
    put.set_defaults(handler=_set)
    show = actions.add_parser("show", help="the profile Redis holds (exit 1: none)")
    show.add_argument("player", help="player id")
    show.set_defaults(handler=_show)
    delete = actions.add_parser("delete", help="produce the tombstone that erases a profile")
    delete.add_argument("player", help="player id")
    delete.set_defaults(handler=_delete)
    for sub in (put, delete):
        sub.add_argument(
            "--wait", type=float, default=0.0, help="seconds to wait until Redis shows it"
        )
    for sub in (put, show, delete):
        sub.add_argument("--json", action="store_true", help="print the JSON answer")
