"""Player profiles: the record, its signature, its checks and where Redis keeps it.

A profile is what a page shows next to a player id: a display name, an avatar
URL and a country. Profiles arrive on a compacted Kafka topic keyed by
playerId (``schemas/player_profile.v1.avsc``); a tombstone (null value) erases
one. Kafka compaction keeps only each key's newest record, so the projection of
a player is decided by that newest record alone, never by an earlier one:

* a valid, signed record sets the profile;
* a tombstone erases it;
* a record the job refuses (undecodable, unsigned, out of bounds) is
  dead-lettered *and* erases it, because once compaction has dropped the
  older records a replay could not bring the older profile back either.

The signature covers every field a reader sees (``canonical``): a reader can
trust a name because only a holder of one of ``LB_HMAC_KEYS`` could have
written it. Tombstones carry no value, hence no signature: anyone allowed to
produce to the topic can erase a profile (as a refused record does), so write
access to the topic is granted by Kafka ACLs to the profile producers only.

Redis layout (``ProfileKeys``): profiles are spread over ``BUCKETS`` hashes by
the SHA-1 of the playerId (a hash a read-only Redis script computes in one call,
``redis.sha1hex``, so a page's script finds its players' buckets cheaply), each
bucket with its own hash tag, so one bucket's profiles and its offset watermarks
change in one atomic call, and a page's lookups group into at most ``BUCKETS``
commands, one round trip per node.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import NamedTuple

from typing_extensions import TypedDict

from domain.errors import ConfigError
from domain.signing import Keyring, Verdict

#: Hashes profiles are spread over; fixed, since a player's bucket is part of the layout.
BUCKETS = 16
#: Prefix of the signed string; bumping it would invalidate every signature.
CANONICAL_PREFIX = "profile-v1"
MAX_NAME = 64
MAX_AVATAR_URL = 512
_COUNTRY = re.compile(r"[A-Z]{2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Profile(TypedDict):
    """A player's profile as every answer carries it (``entries[].profile``)."""

    displayName: str
    avatarUrl: str | None
    """an http(s) URL, or null"""
    country: str | None
    """ISO 3166-1 alpha-2, upper case, or null"""
    updatedAt: int
    """when the producer changed it (epoch ms)"""


class ProfileRecord(NamedTuple):
    """One signed profile record, as decoded from the topic."""

    player_id: str
    display_name: str
    avatar_url: str | None
    country: str | None
    updated_at_ms: int
    key_id: str
    sig: bytes


def _part(value: str | None) -> str:
    if value is None:
        return "-"
    return f"{len(value.encode())}:{value}"


def canonical(
    player_id: str,
    display_name: str,
    avatar_url: str | None,
    country: str | None,
    updated_at_ms: int,
) -> bytes:
    """The exact bytes that are signed.

    ``profile-v1|<playerId>|<displayName>|<avatarUrl>|<country>|<updatedAt>``
    where each text is ``<UTF-8 byte length>:<text>`` and a null is ``-``:
    the lengths make the split unambiguous even when a name contains ``|``.
    """
    parts = [CANONICAL_PREFIX, *map(_part, (player_id, display_name, avatar_url, country))]
    return "|".join([*parts, str(updated_at_ms)]).encode()


def sign_profile(
    keyring: Keyring,
    key_id: str,
    *,
    player_id: str,
    display_name: str,
    avatar_url: str | None = None,
    country: str | None = None,
    updated_at_ms: int,
) -> ProfileRecord:
    """A profile record carrying a valid signature (``lb profiles set``, the API, tests)."""
    message = canonical(player_id, display_name, avatar_url, country, updated_at_ms)
    sig = keyring.digest(key_id, message)
    if sig is None:
        raise ConfigError(f"cannot sign with key id {key_id!r}: not in the keyring")
    return ProfileRecord(player_id, display_name, avatar_url, country, updated_at_ms, key_id, sig)


def verify_profile(keyring: Keyring, record: ProfileRecord) -> Verdict:
    """Check ``record.sig`` against its key's secret, in constant time."""
    expected = keyring.digest(
        record.key_id,
        canonical(
            record.player_id,
            record.display_name,
            record.avatar_url,
            record.country,
            record.updated_at_ms,
        ),
    )
    if expected is None:
        return Verdict.UNKNOWN_KEY
    return Verdict.OK if hmac.compare_digest(expected, record.sig) else Verdict.SIGNATURE


def profile_problem(record: ProfileRecord) -> str | None:
    """Why a decoded record breaks the field rules (a ``BOUNDS`` dead letter), or None."""
    name = record.display_name
    if not 1 <= len(name) <= MAX_NAME or not name.strip():
        return f"displayName must be 1..{MAX_NAME} characters and not blank, got {len(name)}"
    if _CONTROL.search(name):
        return "displayName contains a control character"
    url = record.avatar_url
    if url is not None:
        if len(url) > MAX_AVATAR_URL:
            return f"avatarUrl is longer than {MAX_AVATAR_URL} characters"
        if not url.startswith(("https://", "http://")) or _CONTROL.search(url) or " " in url:
            return "avatarUrl must be an http(s) URL without spaces"
    if record.country is not None and not _COUNTRY.fullmatch(record.country):
        return (
            f"country must be two upper-case letters (ISO 3166-1 alpha-2), got {record.country!r}"
        )
    if not 0 <= record.updated_at_ms < 2**53:
        return f"updatedAt {record.updated_at_ms} is out of range"
    return None


def profile_of(record: ProfileRecord) -> Profile:
    """The answer shape of a record."""
    return {
        "displayName": record.display_name,
        "avatarUrl": record.avatar_url,
        "country": record.country,
        "updatedAt": record.updated_at_ms,
    }


#: Separates a stored profile's fields: a control character, which no field may contain.
_SEP = "\x1f"


def stored_bytes(profile: Profile) -> bytes:
    """A profile as its bucket hash holds it: ``updatedAt␟displayName␟avatarUrl␟country``.

    Fields are joined by U+001F (the unit separator, a control character that
    no field may contain), a null as an empty field: splitting it back is
    several times cheaper than parsing JSON, on every entry of every page.
    """
    parts = (
        str(profile["updatedAt"]),
        profile["displayName"],
        profile["avatarUrl"] or "",
        profile["country"] or "",
    )
    return _SEP.join(parts).encode()


def stored_profile(raw: bytes | str) -> Profile:
    """The profile a bucket hash holds (the inverse of :func:`stored_bytes`)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    updated, name, avatar, country = text.split(_SEP)
    return {
        "displayName": name,
        "avatarUrl": avatar or None,
        "country": country or None,
        "updatedAt": int(updated),
    }


def bucket_of(player_id: str) -> int:
    """The bucket of a player's profile: the first four hex digits of its SHA-1, mod ``BUCKETS``.

    The same in every process, and in a Redis script (``redis.sha1hex``, see
    :mod:`readers.page_profiles`), which finds a page's buckets without a CRC
    loop in Lua.
    """
    return int.from_bytes(hashlib.sha1(player_id.encode()).digest()[:2], "big") % BUCKETS


@dataclass(frozen=True, slots=True)
class ProfileKeys:
    """The keys of one profile bucket in one namespace.

    ==========================================  =====================================
    ``<ns>:{~profiles/<b>}:profiles``            hash playerId -> profile (:func:`stored_bytes`)
    ``<ns>:{~profiles/<b>}:profiles:offsets``    hash ``<topic>/<partition>`` -> last
                                                 offset applied to this bucket
    ==========================================  =====================================

    The tag starts with ``~``, which no game id contains, so a bucket never
    shares a key (or a rebuild's group discovery) with a board group.
    """

    namespace: str
    bucket: int

    @property
    def tag(self) -> str:
        return f"~profiles/{self.bucket}"

    @property
    def profiles(self) -> str:
        return f"{self.namespace}:{{{self.tag}}}:profiles"

    @property
    def offsets(self) -> str:
        return f"{self.namespace}:{{{self.tag}}}:profiles:offsets"


def all_buckets(namespace: str) -> list[ProfileKeys]:
    """Every bucket's keys, bucket 0 first."""
    return [ProfileKeys(namespace, b) for b in range(BUCKETS)]
