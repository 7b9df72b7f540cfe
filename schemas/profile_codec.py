"""Player profiles <-> Confluent-wire-format Avro bytes (subject ``player-profiles-value``).

The same framing as the score events (:mod:`schemas.codec`): byte ``0x00``,
the schema id as 4 bytes big-endian, the record in Avro binary. Profiles are
few and small next to score events, so this codec reads with fastavro record
by record (no compiled engine). Errors carry the dead-letter code: ``DECODE``
for bytes that are not a readable record, ``SCHEMA`` for an unknown schema id,
invalid UTF-8 or a version that cannot be read as v1.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, cast

import fastavro
from fastavro.read import SchemaResolutionError

from domain.errors import CodecError, ConfigError
from domain.profiles import ProfileRecord
from schemas.codec import HEADER_SIZE, MAGIC_BYTE, Subject, load_registry

#: Subject of the profiles topic's values.
PROFILES_SUBJECT = "player-profiles-value"
_DETAIL_LIMIT = 200


def _plain(node: Any) -> Any:
    """A schema without ``logicalType`` annotations: ``updatedAt`` stays epoch ms."""
    if isinstance(node, list):
        return [_plain(item) for item in node]
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if k != "logicalType"}
    return node


def _brief(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


class ProfileCodec:
    """Encodes and decodes :class:`ProfileRecord` for every schema id of the subject.

    Later versions are read as v1 by Avro schema resolution; encoding writes v1.
    """

    __slots__ = ("_default_id", "_reader", "_writers")

    def __init__(self, subject: Subject) -> None:
        base = subject.versions[0]
        self._default_id = base.schema_id
        self._reader = cast(dict[str, Any], fastavro.parse_schema(_plain(base.schema)))
        self._writers: dict[int, dict[str, Any]] = {
            v.schema_id: cast(dict[str, Any], fastavro.parse_schema(_plain(v.schema)))
            for v in subject.versions
        }

    @classmethod
    def from_registry(cls, path: Path | str | None = None) -> ProfileCodec:
        """The codec of the committed registry (or the one at ``path``)."""
        subjects = load_registry(path)
        if PROFILES_SUBJECT not in subjects:
            raise ConfigError(f"schema registry has no subject {PROFILES_SUBJECT!r}")
        return cls(subjects[PROFILES_SUBJECT])

    @property
    def schema_id(self) -> int:
        """The id records are written with (v1)."""
        return self._default_id

    def encode(self, record: ProfileRecord) -> bytes:
        """Framed Avro bytes of ``record``; ``CodecError("SCHEMA")`` if it does not fit."""
        buffer = io.BytesIO()
        buffer.write(bytes([MAGIC_BYTE]) + self._default_id.to_bytes(4, "big"))
        try:
            fastavro.schemaless_writer(
                buffer,
                self._reader,
                {
                    "playerId": record.player_id,
                    "displayName": record.display_name,
                    "avatarUrl": record.avatar_url,
                    "country": record.country,
                    "updatedAt": record.updated_at_ms,
                    "keyId": record.key_id,
                    "sig": record.sig,
                },
            )
        except Exception as exc:
            raise CodecError("SCHEMA", f"profile does not fit the schema: {_brief(exc)}") from exc
        return buffer.getvalue()

    def decode(self, data: bytes) -> ProfileRecord:
        """The record in ``data``; ``CodecError`` with code DECODE or SCHEMA."""
        size = len(data)
        if size < HEADER_SIZE:
            raise CodecError("DECODE", f"{size} bytes is shorter than the 5-byte wire header")
        if data[0] != MAGIC_BYTE:
            raise CodecError("DECODE", f"magic byte is 0x{data[0]:02x}, not 0x00")
        schema_id = int.from_bytes(data[1:5], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            raise CodecError("SCHEMA", f"unknown profile schema id {schema_id}")
        reader = None if schema_id == self._default_id else self._reader
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            doc: Any = fastavro.schemaless_reader(buffer, writer, reader)
        except UnicodeDecodeError as exc:
            raise CodecError("SCHEMA", f"schema id {schema_id}: invalid UTF-8") from exc
        except SchemaResolutionError as exc:
            raise CodecError("SCHEMA", f"schema id {schema_id}: {_brief(exc)}") from exc
        except Exception as exc:
            raise CodecError(
                "DECODE", f"schema id {schema_id}: malformed or truncated Avro body: {_brief(exc)}"
            ) from exc
        if buffer.tell() != size:
            raise CodecError(
                "DECODE",
                f"schema id {schema_id}: {size - buffer.tell()} bytes left after the record",
            )
        return ProfileRecord(
            doc["playerId"],
            doc["displayName"],
            doc["avatarUrl"],
            doc["country"],
            doc["updatedAt"],
            doc["keyId"],
            doc["sig"],
        )
