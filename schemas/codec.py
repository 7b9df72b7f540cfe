"""Score events <-> Confluent-wire-format Avro bytes, driven by the committed registry.

Wire format (SPEC): byte ``0x00``, the schema id as 4 bytes big-endian, then the
record in Avro binary encoding. Schema ids come from ``schemas/registry.json``
(no Schema Registry server runs here); v1 of ``score-events-value`` has id 1,
v2 (v1 plus the optional ``metadata`` string) id 2. Every record is read as the
newest version, whatever version wrote it, so v1 and v2 records share a topic.

Decoding is on the hot path (100K events/s), so every schema is parsed once, at
construction, into a *wire view* that fastavro can read without any per-record
conversion:

* logical types are dropped, so ``ts`` stays an int of epoch milliseconds (a
  ``datetime`` would be slower and round-trips lossily);
* enums are read as their int index and mapped to :class:`EventKind` here,
  because fastavro indexes the symbol list with Python semantics: a corrupt
  negative index such as ``-1`` silently becomes the *last* symbol
  (``RETRACT``) instead of an error. The binary encoding of an enum *is* its
  index as an Avro int, so the view reads the very same bytes.

Error classification of :meth:`ScoreEventCodec.decode` (the dead-letter code is
``CodecError.code``):

``DECODE`` -- the bytes are not a readable record of the schema they name:
    empty or shorter than the 5-byte header, a magic byte other than ``0x00``,
    an Avro body that ends early (truncated string/bytes, unterminated or
    over-long varint, negative length), bytes left over after a complete record,
    or any other error fastavro raises while reading (e.g. an out-of-range
    union branch index, which fastavro cannot tell apart from a broken varint).
``SCHEMA`` -- the bytes are well-formed but break the schema contract: a schema
    id the registry does not know, an enum index outside the writer's symbols,
    a symbol :class:`EventKind` does not know, a string that is not valid
    UTF-8, or a writer schema that cannot be resolved against the newest version.

An over-long varint (its first 10 bytes all with the continuation bit) is
``DECODE`` wherever it is, as the compiled engine has it: fastavro would wrap
it around, so :mod:`schemas.varints` looks for one before fastavro reads.

Known limit inherited from fastavro: a negative *union* index selects a branch
from the end (v2's ``metadata`` is a union): the compiled engine refuses such a
record as ``DECODE``; this one reads a value no producer signed, which the
signature check then refuses.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import fastavro
from fastavro.read import SchemaResolutionError

from domain.errors import CodecError, ConfigError
from domain.events import EventKind, ScoreEvent
from schemas.varints import HIGH_BITS, LONG_RUN, VarintWalk
from schemas.wire_view import wire_view

#: The registry committed with the code.
DEFAULT_REGISTRY = Path(__file__).with_name("registry.json")
#: Subject of the score-events topic's values (Confluent's ``<topic>-value`` naming).
SCORE_EVENTS_SUBJECT = "score-events-value"
#: First byte of every Confluent-framed message.
MAGIC_BYTE = 0
#: Magic byte plus the 4-byte schema id.
HEADER_SIZE = 5
#: Compatibility levels a subject may declare (Confluent's names, non-transitive).
COMPATIBILITY_LEVELS = ("FULL", "BACKWARD", "FORWARD", "NONE")

#: Type each field must have in the reader's wire view (enum -> int, logical type dropped).
_VIEW_TYPES = {
    "eventId": "string",
    "gameId": "string",
    "playerId": "string",
    "score": "long",
    "ts": "long",
    "kind": "int",
    "keyId": "string",
    "sig": "bytes",
}
_KIND_VALUES = frozenset(kind.value for kind in EventKind)
_DETAIL_LIMIT = 200


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One registered schema: where it lives and what it says."""

    subject: str
    version: int
    schema_id: int
    path: Path
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Subject:
    """A subject's versions, oldest first, and the compatibility promised between them."""

    name: str
    compatibility: str
    versions: tuple[SchemaVersion, ...]


def load_registry(path: Path | str | None = None) -> dict[str, Subject]:
    """Read and check the registry file; ``ConfigError`` on any inconsistency.

    Checked here, once, so neither the codec nor CI has to trust the file:
    schema ids are unique across subjects (an id names exactly one schema),
    versions run 1, 2, 3, ... without gaps, and every schema file parses.
    """
    registry_path = Path(path) if path is not None else DEFAULT_REGISTRY
    doc = _load_json(registry_path)
    subjects_doc = doc.get("subjects") if isinstance(doc, dict) else None
    if not isinstance(subjects_doc, dict) or not subjects_doc:
        raise ConfigError(f"schema registry {registry_path}: needs a non-empty 'subjects' object")
    seen_ids: dict[int, str] = {}
    subjects: dict[str, Subject] = {}
    for name, subject_doc in subjects_doc.items():
        where = f"schema registry {registry_path}: subject {name!r}"
        if not isinstance(subject_doc, dict):
            raise ConfigError(f"{where}: must be an object")
        compatibility = subject_doc.get("compatibility", "FULL")
        if compatibility not in COMPATIBILITY_LEVELS:
            raise ConfigError(f"{where}: compatibility must be one of {COMPATIBILITY_LEVELS}")
        versions_doc = subject_doc.get("versions")
        if not isinstance(versions_doc, list) or not versions_doc:
            raise ConfigError(f"{where}: needs a non-empty 'versions' list")
        versions: list[SchemaVersion] = []
        for position, entry in enumerate(versions_doc, start=1):
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: version entry {position} must be an object")
            version, schema_id, file = entry.get("version"), entry.get("id"), entry.get("schema")
            if version != position:
                raise ConfigError(
                    f"{where}: entry {position} has version {version!r}; versions must be "
                    "listed in order as 1, 2, 3, ..."
                )
            if not isinstance(schema_id, int) or isinstance(schema_id, bool):
                raise ConfigError(f"{where} v{version}: 'id' must be an integer")
            if not 0 <= schema_id < 2**31:
                raise ConfigError(f"{where} v{version}: id {schema_id} is out of range")
            if schema_id in seen_ids:
                raise ConfigError(
                    f"{where} v{version}: id {schema_id} is already used by {seen_ids[schema_id]}"
                )
            seen_ids[schema_id] = f"{name} v{version}"
            if not isinstance(file, str) or not file:
                raise ConfigError(f"{where} v{version}: 'schema' must name an .avsc file")
            schema_path = registry_path.parent / file
            schema = _load_json(schema_path)
            if not isinstance(schema, dict):
                raise ConfigError(f"{schema_path}: an Avro record schema must be a JSON object")
            try:
                fastavro.parse_schema(copy.deepcopy(schema))
            except Exception as exc:
                raise ConfigError(f"{schema_path}: not a valid Avro schema: {exc}") from exc
            versions.append(SchemaVersion(name, position, schema_id, schema_path, schema))
        subjects[name] = Subject(name, compatibility, tuple(versions))
    return subjects


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc


class WireView(NamedTuple):
    """One schema id as :meth:`ScoreEventCodec.decode` reads it (see the module doc)."""

    schema_id: int
    #: The writer schema's wire view, JSON.
    writer_json: str
    #: The newest version's wire view it is resolved against, JSON; None when the
    #: writer is the newest version.
    reader_json: str | None
    #: Writer enum index -> EventKind (None: a symbol EventKind does not know).
    kinds: tuple[EventKind | None, ...]


@dataclass(frozen=True, slots=True)
class _Wire:
    """Everything needed to read or write one schema id, prepared once."""

    schema_id: int
    header: bytes
    #: The writer's wire view as JSON text (what the compiled reader parses).
    view_json: str
    #: fastavro-parsed wire view of the writer schema.
    writer: dict[str, Any]
    #: Parsed wire view of the reader (newest) schema, or None when writer == reader.
    reader: dict[str, Any] | None
    #: Writer enum index -> EventKind (None: a symbol EventKind does not know).
    kinds: tuple[EventKind | None, ...]
    #: EventKind -> writer enum index, for encoding.
    kind_index: Mapping[EventKind, int]
    #: Finds the over-long varints of the writer's bodies (see :mod:`schemas.varints`).
    varints: VarintWalk
    #: Whether the writer schema has the ``metadata`` field.
    metadata: bool = False


class ScoreEventCodec:
    """Encodes and decodes :class:`ScoreEvent` for every schema id of one subject.

    Decoding accepts any registered version: each is resolved against the
    newest one by Avro schema resolution (a field the writer lacks takes its
    default, e.g. a v1 record's ``metadata`` is null). Version 1 must carry
    every ``ScoreEvent`` field but ``metadata``. Encoding writes version 1 for
    an event without metadata and the newest version for one with it, unless
    asked for another id. Instances are immutable and thread-safe.
    """

    __slots__ = ("_by_id", "_default_id", "_metadata_id", "_reader_json", "subject")

    def __init__(self, subject: Subject) -> None:
        """Prepare every version of ``subject``; ``ConfigError`` if v1 cannot hold a ScoreEvent."""
        self.subject = subject
        base, newest = subject.versions[0], subject.versions[-1]
        _check_reader(base, wire_view(base.schema)[0])
        reader_view, reader_enums = wire_view(newest.schema)
        _check_reader(newest, reader_view)
        self._reader_json = json.dumps(reader_view)
        reader_parsed = cast(dict[str, Any], fastavro.parse_schema(reader_view))
        reader_symbols = _kind_symbols(newest.schema, reader_enums)
        by_id: dict[int, _Wire] = {}
        for version in subject.versions:
            view, enums = wire_view(version.schema)
            view_json = json.dumps(view)
            symbols = _kind_symbols(version.schema, enums) or reader_symbols
            kinds = tuple(EventKind(s) if s in _KIND_VALUES else None for s in symbols)
            try:
                parsed = cast(dict[str, Any], fastavro.parse_schema(view))
            except Exception as exc:
                raise ConfigError(f"{version.path}: wire view does not parse: {exc}") from exc
            by_id[version.schema_id] = _Wire(
                schema_id=version.schema_id,
                header=bytes([MAGIC_BYTE]) + version.schema_id.to_bytes(4, "big"),
                view_json=view_json,
                writer=parsed,
                reader=None if version is newest else reader_parsed,
                kinds=kinds,
                kind_index={kind: index for index, kind in enumerate(kinds) if kind is not None},
                varints=VarintWalk(view),
                metadata=_has_metadata(version.schema),
            )
        self._by_id = by_id
        self._default_id = base.schema_id
        self._metadata_id = next(
            (v.schema_id for v in reversed(subject.versions) if _has_metadata(v.schema)), None
        )

    @classmethod
    def from_registry(
        cls, path: Path | str | None = None, subject: str = SCORE_EVENTS_SUBJECT
    ) -> ScoreEventCodec:
        """The codec for ``subject`` of the registry at ``path`` (default: the committed one)."""
        subjects = load_registry(path)
        if subject not in subjects:
            raise ConfigError(f"schema registry has no subject {subject!r}")
        return cls(subjects[subject])

    @property
    def metadata_schema_id(self) -> int:
        """The newest schema id with a ``metadata`` field; ``ConfigError`` when none has one."""
        if self._metadata_id is None:
            raise ConfigError(f"subject {self.subject.name!r} has no version with metadata")
        return self._metadata_id

    @property
    def schema_ids(self) -> tuple[int, ...]:
        """Every schema id this codec can decode (and encode), oldest version first."""
        return tuple(self._by_id)

    def wire_views(self) -> tuple[WireView, ...]:
        """What another reader needs to decode exactly like :meth:`decode`, per schema id.

        The compiled path (``schemas/native.py``) reads these same views, so the
        schema rewriting above and the enum index table stay in this one place.
        """
        return tuple(
            WireView(
                wire.schema_id,
                wire.view_json,
                None if wire.reader is None else self._reader_json,
                wire.kinds,
            )
            for wire in self._by_id.values()
        )

    def encode(self, event: ScoreEvent, schema_id: int | None = None) -> bytes:
        """Confluent-framed Avro bytes of ``event`` written with schema ``schema_id``.

        Without an id: version 1 for an event without metadata, the newest
        version with a ``metadata`` field for one with it. Fields a later
        version added are written with their defaults. Raises
        ``CodecError("SCHEMA", ...)`` for an unknown id or a value the schema
        cannot hold (e.g. a score past 2**63, a kind the version lacks,
        metadata in a version without the field).
        """
        if schema_id is None:
            schema_id = self._default_id if event.metadata is None else self.metadata_schema_id
        wire = self._by_id.get(schema_id)
        if wire is None:
            raise CodecError("SCHEMA", f"cannot encode with unknown schema id {schema_id}")
        try:
            record = {
                "eventId": event.event_id,
                "gameId": event.game_id,
                "playerId": event.player_id,
                "score": event.score,
                "ts": event.ts_ms,
                "kind": wire.kind_index[event.kind],
                "keyId": event.key_id,
                "sig": event.sig,
            }
            if wire.metadata:
                record["metadata"] = event.metadata
            elif event.metadata is not None:
                raise ValueError("this version has no metadata field")
            buffer = io.BytesIO()
            buffer.write(wire.header)
            fastavro.schemaless_writer(buffer, wire.writer, record)
        except Exception as exc:
            raise CodecError(
                "SCHEMA",
                f"event {event.event_id!r} does not fit schema id {schema_id}: {_brief(exc)}",
            ) from exc
        return buffer.getvalue()

    def decode(self, data: bytes) -> ScoreEvent:
        """The event in ``data``; ``CodecError`` with code DECODE or SCHEMA (see module doc)."""
        size = len(data)
        if size < HEADER_SIZE:
            raise CodecError("DECODE", f"{size} bytes is shorter than the 5-byte wire header")
        if data[0] != MAGIC_BYTE:
            raise CodecError("DECODE", f"magic byte is 0x{data[0]:02x}, not 0x00")
        schema_id = int.from_bytes(data[1:5], "big")
        wire = self._by_id.get(schema_id)
        if wire is None:
            raise CodecError("SCHEMA", f"unknown schema id {schema_id}")
        if data.translate(HIGH_BITS).find(LONG_RUN, HEADER_SIZE) != -1:  # rare: walk the body
            offset = wire.varints.first_overlong(data, HEADER_SIZE)
            if offset is not None:
                raise CodecError(
                    "DECODE",
                    f"schema id {schema_id}: malformed Avro body: the varint at byte {offset} "
                    "runs past 10 bytes",
                )
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            record: Any = fastavro.schemaless_reader(buffer, wire.writer, wire.reader)
        except UnicodeDecodeError as exc:
            raise CodecError("SCHEMA", f"schema id {schema_id}: invalid UTF-8 in a string") from exc
        except SchemaResolutionError as exc:
            raise CodecError(
                "SCHEMA",
                f"schema id {schema_id} cannot be read as the newest version: {_brief(exc)}",
            ) from exc
        except Exception as exc:
            raise CodecError(
                "DECODE", f"schema id {schema_id}: malformed or truncated Avro body: {_brief(exc)}"
            ) from exc
        end = buffer.tell()
        if end != size:
            raise CodecError(
                "DECODE", f"schema id {schema_id}: {size - end} bytes left after the record"
            )
        index = record["kind"]
        kind = wire.kinds[index] if 0 <= index < len(wire.kinds) else None
        if kind is None:
            raise CodecError(
                "SCHEMA", f"schema id {schema_id}: enum index {index} is not a known kind"
            )
        return ScoreEvent(
            record["eventId"],
            record["gameId"],
            record["playerId"],
            record["score"],
            record["ts"],
            kind,
            record["keyId"],
            record["sig"],
            record.get("metadata"),
        )


def _brief(exc: BaseException) -> str:
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


def _kind_symbols(schema: Mapping[str, Any], enums: Mapping[str, list[str]]) -> list[str]:
    """The symbols of the top-level ``kind`` enum, or [] when the version has no such field."""
    for field in schema.get("fields", []):
        if field.get("name") == "kind":
            kind_type = field.get("type")
            if isinstance(kind_type, dict) and kind_type.get("type") == "enum":
                return list(kind_type.get("symbols", []))
            if isinstance(kind_type, str) and kind_type in enums:
                return list(enums[kind_type])
    return []


def _has_metadata(schema: Mapping[str, Any]) -> bool:
    """Whether a version has the top-level ``metadata`` field (a nullable string)."""
    return any(field.get("name") == "metadata" for field in schema.get("fields", []))


def _check_reader(base: SchemaVersion, view: Mapping[str, Any]) -> None:
    """Refuse a first version that cannot carry every ScoreEvent field."""
    types = {field["name"]: field["type"] for field in view.get("fields", [])}
    for name, expected in _VIEW_TYPES.items():
        if types.get(name) != expected:
            raise ConfigError(
                f"{base.path}: field {name!r} must be {expected!r} on the wire "
                f"(got {types.get(name)!r}) to hold a ScoreEvent"
            )
    if not _kind_symbols(base.schema, {}):
        raise ConfigError(f"{base.path}: field 'kind' must be an inline enum")
    if "metadata" in types and types["metadata"] != ["null", "string"]:
        raise ConfigError(
            f'{base.path}: field \'metadata\' must be ["null", "string"] on the wire '
            f"(got {types['metadata']!r})"
        )
