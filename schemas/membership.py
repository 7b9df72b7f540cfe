"""Team membership records: Confluent-framed Avro (``team_membership.v1.avsc``) <-> Membership.

The codec only reads and writes bytes; what makes a record acceptable (its key,
its team id, its signature) is :func:`check` here, so the job and the tools
refuse the same records with the same dead-letter codes as score events use:
``DECODE`` (not a record), ``SCHEMA`` (readable but against the contract: a
playerId other than the Kafka key, a team id that cannot name a team),
``UNKNOWN_KEY`` and ``SIGNATURE``.
"""

from __future__ import annotations

import hmac
import io
from pathlib import Path
from typing import Any, cast

import fastavro

from domain.errors import CodecError, ConfigError
from domain.signing import Keyring
from domain.teams import Membership, membership_canonical, valid_team_id
from schemas.codec import HEADER_SIZE, MAGIC_BYTE, load_registry

#: The membership topic's subject (Confluent's ``<topic>-value`` naming).
MEMBERSHIP_SUBJECT = "team-membership-value"


class MembershipCodec:
    """Encodes and decodes membership records with the registry's schema (one version)."""

    __slots__ = ("_header", "_schema", "_schema_id")

    def __init__(self, registry: Path | str | None = None) -> None:
        subjects = load_registry(registry)
        if MEMBERSHIP_SUBJECT not in subjects:
            raise ConfigError(f"schema registry has no subject {MEMBERSHIP_SUBJECT!r}")
        version = subjects[MEMBERSHIP_SUBJECT].versions[-1]
        self._schema_id = version.schema_id
        self._header = bytes([MAGIC_BYTE]) + version.schema_id.to_bytes(4, "big")
        self._schema = cast(dict[str, Any], fastavro.parse_schema(dict(version.schema)))

    def encode(self, record: Membership) -> bytes:
        buffer = io.BytesIO()
        buffer.write(self._header)
        fastavro.schemaless_writer(
            buffer,
            self._schema,
            {
                "playerId": record.player_id,
                "teamId": record.team_id,
                "ts": record.ts_ms,
                "keyId": record.key_id,
                "sig": record.sig,
            },
        )
        return buffer.getvalue()

    def decode(self, data: bytes) -> Membership:
        """The record in ``data``; ``CodecError`` (DECODE or SCHEMA) when it is not one."""
        if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
            raise CodecError("DECODE", "not a Confluent-framed record (0x00 + schema id)")
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id != self._schema_id:
            raise CodecError("SCHEMA", f"unknown membership schema id {schema_id}")
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            raw: Any = fastavro.schemaless_reader(buffer, self._schema, None)
        except UnicodeDecodeError as exc:
            raise CodecError("SCHEMA", "invalid UTF-8 in a string") from exc
        except Exception as exc:  # fastavro raises bare EOFError/ValueError on bad bytes
            raise CodecError("DECODE", f"not a membership record: {exc}") from exc
        if buffer.tell() != len(data):
            raise CodecError("DECODE", f"{len(data) - buffer.tell()} bytes after the record")
        ts = raw["ts"]
        ts_ms = ts if isinstance(ts, int) else int(ts.timestamp() * 1000)
        return Membership(raw["playerId"], raw["teamId"], ts_ms, raw["keyId"], raw["sig"])


def sign_membership(
    keyring: Keyring, key_id: str, player_id: str, team_id: str | None, ts_ms: int
) -> Membership:
    """A signed membership record (``team_id`` None: the player leaves its team)."""
    sig = keyring.digest(key_id, membership_canonical(player_id, team_id, ts_ms))
    if sig is None:
        raise ConfigError(f"cannot sign with key id {key_id!r}: not in the keyring")
    return Membership(player_id, team_id, ts_ms, key_id, sig)


def check(
    codec: MembershipCodec, keyring: Keyring, key: bytes | None, value: bytes | None
) -> tuple[str, str | None]:
    """``(playerId, teamId or None)`` of an acceptable record; ``CodecError`` otherwise.

    A tombstone (no value) is the player leaving its team: compaction's own
    delete, unsigned, so the topic's write ACL is what guards it.
    """
    if key is None:
        raise CodecError("SCHEMA", "a membership record needs the playerId as its key")
    try:
        player = key.decode()
    except UnicodeDecodeError as exc:
        raise CodecError("SCHEMA", "the record key is not UTF-8") from exc
    if value is None:
        return player, None
    record = codec.decode(value)
    if record.player_id != player:
        raise CodecError(
            "SCHEMA", f"playerId {record.player_id!r} is not the record key {player!r}"
        )
    if record.team_id is not None and not valid_team_id(record.team_id):
        raise CodecError(
            "SCHEMA", f"team id {record.team_id!r}: allowed A-Z a-z 0-9 . _ - (1 to 64)"
        )
    expected = keyring.digest(
        record.key_id, membership_canonical(player, record.team_id, record.ts_ms)
    )
    if expected is None:
        raise CodecError("UNKNOWN_KEY", f"key id {record.key_id!r} is not in the keyring")
    if not hmac.compare_digest(expected, record.sig):
        raise CodecError("SIGNATURE", "the signature does not match the record")
    return player, record.team_id
