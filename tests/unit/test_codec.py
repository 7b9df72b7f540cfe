"""The Avro codec: wire format, round trips, evolution and every error class."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import CodecError, ConfigError
from domain.events import EventKind, ScoreEvent
from schemas.codec import DEFAULT_REGISTRY, ScoreEventCodec, load_registry

SCHEMAS = DEFAULT_REGISTRY.parent
V2 = Path(__file__).parent / "fixtures" / "score_event.v2.avsc"


@pytest.fixture(scope="module")
def codec() -> ScoreEventCodec:
    return ScoreEventCodec.from_registry()


def _event(**overrides: object) -> ScoreEvent:
    fields: dict[str, object] = {
        "event_id": "e-0001",
        "game_id": "g1",
        "player_id": "p0000042",
        "score": 12345,
        "ts_ms": 1_714_800_000_123,
        "kind": EventKind.SCORE,
        "key_id": "k1",
        "sig": bytes(range(32)),
    }
    fields.update(overrides)
    return ScoreEvent(**fields)


def _registry(tmp_path: Path, *versions: tuple[int, Path], compatibility: str = "FULL") -> Path:
    entries = []
    for number, (schema_id, source) in enumerate(versions, start=1):
        shutil.copy(source, tmp_path / f"v{number}.avsc")
        entries.append({"version": number, "id": schema_id, "schema": f"v{number}.avsc"})
    doc = {
        "subjects": {"score-events-value": {"compatibility": compatibility, "versions": entries}}
    }
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(doc))
    return path


def _patch_kind(data: bytes, event: ScoreEvent, index_byte: int, after: int = 0) -> bytes:
    """Replace the kind's enum index (followed by keyId, sig and ``after`` more bytes)."""
    tail = 1 + len(event.key_id) + 1 + len(event.sig) + after  # short fields: 1-byte lengths
    position = len(data) - tail - 1
    assert data[position] in (0x00, 0x02)
    return data[:position] + bytes([index_byte]) + data[position + 1 :]


# -- round trips ------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        _event(),
        _event(kind=EventKind.RETRACT, score=0),
        _event(score=2**63 - 1, ts_ms=2**62),
        _event(score=-1, ts_ms=-1),
        _event(event_id="\u00e9v\u00e9nement-\u2603", player_id="\U0001f3ae", game_id=""),
        _event(sig=b""),
        _event(sig=b"\x00" * 1000),
    ],
)
def test_round_trip(codec: ScoreEventCodec, event: ScoreEvent) -> None:
    data = codec.encode(event)
    decoded = codec.decode(data)
    assert decoded == event
    assert type(decoded.ts_ms) is int and type(decoded.score) is int
    assert decoded.kind is event.kind


def test_wire_header_is_confluent_format(codec: ScoreEventCodec) -> None:
    data = codec.encode(_event())
    assert data[0] == 0 and data[1:5] == (1).to_bytes(4, "big")
    assert codec.schema_ids == (1, 2)
    assert codec.encode(_event(metadata="m"))[:5] == b"\x00" + (2).to_bytes(4, "big")


def test_bytes_equal_plain_fastavro_with_the_committed_schema(codec: ScoreEventCodec) -> None:
    """The wire view (enum as int, no logical type) writes and reads the very same bytes."""
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "score_event.v1.avsc").read_text()))
    for kind in EventKind:
        event = _event(kind=kind)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(
            buffer,
            schema,
            {
                "eventId": event.event_id,
                "gameId": event.game_id,
                "playerId": event.player_id,
                "score": event.score,
                "ts": event.ts_ms,
                "kind": kind.value,
                "keyId": event.key_id,
                "sig": event.sig,
            },
        )
        assert codec.encode(event)[5:] == buffer.getvalue()
        buffer.seek(0)
        record = fastavro.schemaless_reader(buffer, schema)
        assert isinstance(record, dict) and record["kind"] == kind.value


# -- decode errors ----------------------------------------------------------


def _code(codec: ScoreEventCodec, data: bytes) -> str:
    with pytest.raises(CodecError) as caught:
        codec.decode(data)
    assert caught.value.detail and str(caught.value).startswith(caught.value.code)
    return caught.value.code


def test_too_short_and_bad_magic_are_decode(codec: ScoreEventCodec) -> None:
    good = codec.encode(_event())
    for data in (b"", b"\x00", b"\x00\x00\x00\x00", b"\x01" + good[1:], b"{json}", b"\xff" * 40):
        assert _code(codec, data) == "DECODE"


def test_every_truncation_is_decode(codec: ScoreEventCodec) -> None:
    good = codec.encode(_event())
    for size in range(len(good)):
        assert _code(codec, good[:size]) == "DECODE", size


@pytest.mark.parametrize("garbage", [b"\x00", b"\xff", b"extra bytes"])
def test_trailing_bytes_are_decode(codec: ScoreEventCodec, garbage: bytes) -> None:
    assert _code(codec, codec.encode(_event()) + garbage) == "DECODE"


def test_malformed_lengths_and_varints_are_decode(codec: ScoreEventCodec) -> None:
    header = b"\x00\x00\x00\x00\x01"
    assert _code(codec, header + b"\x09abcdefgh") == "DECODE"  # negative length (-5)
    assert _code(codec, header + b"\xfe\xff\xff\xff\x0f") == "DECODE"  # 2 GB string
    assert _code(codec, header + b"\xff" * 20) == "DECODE"  # unterminated varint


def test_unknown_schema_id_is_schema(codec: ScoreEventCodec) -> None:
    good = codec.encode(_event())
    for schema_id in (0, 3, 99, 2**32 - 1):
        assert _code(codec, b"\x00" + schema_id.to_bytes(4, "big") + good[5:]) == "SCHEMA"


@pytest.mark.parametrize(
    "index_byte",
    [0x01, 0x03, 0x04, 0x7E],  # zigzag of -1, -2, 2, 63
)
def test_invalid_enum_index_is_schema(codec: ScoreEventCodec, index_byte: int) -> None:
    """-1 matters most: plain fastavro would read it as the last symbol, RETRACT."""
    event = _event()
    data = _patch_kind(codec.encode(event), event, index_byte)
    assert _code(codec, data) == "SCHEMA"


def test_patch_helper_finds_the_kind(codec: ScoreEventCodec) -> None:
    event = _event()
    data = _patch_kind(codec.encode(event), event, 0x02)
    assert codec.decode(data).kind is EventKind.RETRACT


def test_invalid_utf8_is_schema(codec: ScoreEventCodec) -> None:
    event = _event(player_id="pppp")
    data = codec.encode(event).replace(b"pppp", b"\xff\xfe\xfd\xfc")
    assert _code(codec, data) == "SCHEMA"


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=120))
def test_arbitrary_bodies_never_leak_foreign_exceptions(body: bytes) -> None:
    codec = ScoreEventCodec.from_registry()
    try:
        event = codec.decode(b"\x00\x00\x00\x00\x01" + body)
    except CodecError as exc:
        assert exc.code in ("DECODE", "SCHEMA")
    else:
        assert isinstance(event, ScoreEvent) and isinstance(event.kind, EventKind)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=80))
def test_arbitrary_bytes_never_leak_foreign_exceptions(data: bytes) -> None:
    codec = ScoreEventCodec.from_registry()
    try:
        codec.decode(data)
    except CodecError as exc:
        assert exc.code in ("DECODE", "SCHEMA")


# -- encode errors ----------------------------------------------------------


def test_encode_refuses_unknown_ids_and_unrepresentable_values(codec: ScoreEventCodec) -> None:
    with pytest.raises(CodecError) as caught:
        codec.encode(_event(), schema_id=7)
    assert caught.value.code == "SCHEMA"
    with pytest.raises(CodecError) as caught:
        codec.encode(_event(score=2**63))
    assert caught.value.code == "SCHEMA" and caught.value.__cause__ is not None
    with pytest.raises(CodecError):
        codec.encode(_event(player_id=None))


# -- schema v2: metadata -----------------------------------------------------------


@pytest.mark.parametrize("metadata", ["car=red", "", "Zoë | 日本 | 🏎", "x" * 5000])
def test_v2_round_trip_with_metadata(codec: ScoreEventCodec, metadata: str) -> None:
    event = _event(metadata=metadata)
    data = codec.encode(event)
    assert data[1:5] == (2).to_bytes(4, "big")
    assert codec.decode(data) == event
    assert codec.decode(data).metadata == metadata


def test_v1_and_v2_without_metadata_decode_to_the_same_event(codec: ScoreEventCodec) -> None:
    event = _event()
    v1, v2 = codec.encode(event, 1), codec.encode(event, 2)
    assert v2 == b"\x00" + (2).to_bytes(4, "big") + v1[5:] + b"\x00"  # union index 0: null
    assert codec.decode(v1) == codec.decode(v2) == event
    assert codec.decode(v1).metadata is None


def test_metadata_does_not_fit_v1(codec: ScoreEventCodec) -> None:
    with pytest.raises(CodecError) as caught:
        codec.encode(_event(metadata="m"), schema_id=1)
    assert caught.value.code == "SCHEMA" and "metadata" in caught.value.detail


def test_v2_bytes_equal_plain_fastavro_with_the_committed_schema(codec: ScoreEventCodec) -> None:
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "score_event.v2.avsc").read_text()))
    for metadata in (None, "Zoë"):
        event = _event(metadata=metadata)
        buffer = io.BytesIO()
        buffer.write(b"\x00" + (2).to_bytes(4, "big"))
        record = {
            "eventId": event.event_id,
            "gameId": event.game_id,
            "playerId": event.player_id,
            "score": event.score,
            "ts": event.ts_ms,
            "kind": event.kind.value,
            "keyId": event.key_id,
            "sig": event.sig,
            "metadata": metadata,
        }
        fastavro.schemaless_writer(buffer, schema, record)
        assert codec.encode(event, 2) == buffer.getvalue()


# -- evolution: a v2 writer ---------------------------------------------------


def test_decodes_every_registered_version(tmp_path: Path) -> None:
    codec = ScoreEventCodec.from_registry(
        _registry(tmp_path, (1, SCHEMAS / "score_event.v1.avsc"), (2, V2))
    )
    assert codec.schema_ids == (1, 2)
    event = _event(kind=EventKind.RETRACT)
    v2_data = codec.encode(event, schema_id=2)
    assert v2_data[1:5] == (2).to_bytes(4, "big")
    assert codec.decode(v2_data) == event
    assert codec.decode(codec.encode(event, schema_id=1)) == event

    # A v2 producer that fills the new field: the v1 view skips it.
    schema = fastavro.parse_schema(json.loads(V2.read_text()))
    buffer = io.BytesIO()
    buffer.write(b"\x00" + (2).to_bytes(4, "big"))
    fastavro.schemaless_writer(
        buffer,
        schema,
        {
            "eventId": "e-9",
            "gameId": "g1",
            "playerId": "p1",
            "score": 5,
            "ts": 1_714_800_000_000,
            "kind": "SCORE",
            "keyId": "k1",
            "sig": b"s",
            "region": "eu-west",
        },
    )
    decoded = codec.decode(buffer.getvalue())
    assert decoded == ScoreEvent(
        "e-9", "g1", "p1", 5, 1_714_800_000_000, EventKind.SCORE, "k1", b"s"
    )
    assert _code(codec, buffer.getvalue() + b"\x00") == "DECODE"
    # region = null is one more byte after sig; -1 must not become RETRACT in v2 either
    assert _code(codec, _patch_kind(v2_data, event, 0x01, after=1)) == "SCHEMA"
    assert codec.decode(_patch_kind(v2_data, event, 0x00, after=1)).kind is EventKind.SCORE


def _v2_with_bonus(tmp_path: Path) -> Path:
    """The v2 fixture whose enum has a third symbol, BONUS, that EventKind lacks."""
    v2 = json.loads(V2.read_text())
    kind = next(f for f in v2["fields"] if f["name"] == "kind")
    kind["type"]["symbols"] = ["SCORE", "RETRACT", "BONUS"]
    source = tmp_path / "src.avsc"
    source.write_text(json.dumps(v2))
    return source


def test_v2_enum_with_unknown_symbol_is_schema(tmp_path: Path) -> None:
    source = _v2_with_bonus(tmp_path)
    registry = tmp_path / "reg"
    registry.mkdir()
    codec = ScoreEventCodec.from_registry(
        _registry(registry, (1, SCHEMAS / "score_event.v1.avsc"), (5, source))
    )
    event = _event()
    data = codec.encode(event, schema_id=5)
    assert codec.decode(data) == event
    bonus = _patch_kind(data, event, 0x04, after=1)  # index 2 = BONUS, valid for this writer
    assert _code(codec, bonus) == "SCHEMA"


# -- registry loading ---------------------------------------------------------


def test_committed_registry_shape() -> None:
    subjects = load_registry()
    versions = subjects["score-events-value"].versions
    assert [(v.version, v.schema_id, v.path.name) for v in versions] == [
        (1, 1, "score_event.v1.avsc"),
        (2, 2, "score_event.v2.avsc"),
    ]
    v2 = {f["name"]: f for f in versions[1].schema["fields"]}
    assert v2["metadata"] == {**v2["metadata"], "type": ["null", "string"], "default": None}
    assert list(v2)[:-1] == [f["name"] for f in versions[0].schema["fields"]]
    schema = versions[0].schema
    assert schema["name"] == "ScoreEvent" and schema["namespace"] == "leaderboard"
    fields = {f["name"]: f for f in schema["fields"]}
    assert list(fields) == ["eventId", "gameId", "playerId", "score", "ts", "kind", "keyId", "sig"]
    assert fields["ts"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields["kind"]["type"]["symbols"] == ["SCORE", "RETRACT"]
    assert fields["kind"]["default"] == "SCORE"
    assert all(f.get("doc") for f in schema["fields"])


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "subjects"),
        ({"subjects": {"s": {"versions": []}}}, "versions"),
        (
            {"subjects": {"s": {"versions": [{"version": 2, "id": 1, "schema": "v1.avsc"}]}}},
            "order",
        ),
        ({"subjects": {"s": {"versions": [{"version": 1, "id": "1", "schema": "v1.avsc"}]}}}, "id"),
        (
            {"subjects": {"s": {"versions": [{"version": 1, "id": 1, "schema": "nope.avsc"}]}}},
            "nope",
        ),
        (
            {
                "subjects": {
                    "s": {"versions": [{"version": 1, "id": 1, "schema": "v1.avsc"}]},
                    "t": {"versions": [{"version": 1, "id": 1, "schema": "v1.avsc"}]},
                }
            },
            "already used",
        ),
        (
            {
                "subjects": {
                    "s": {
                        "compatibility": "SOMETIMES",
                        "versions": [{"version": 1, "id": 1, "schema": "v1.avsc"}],
                    }
                }
            },
            "compatibility",
        ),
    ],
)
def test_bad_registries_are_config_errors(tmp_path: Path, doc: object, message: str) -> None:
    shutil.copy(SCHEMAS / "score_event.v1.avsc", tmp_path / "v1.avsc")
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=message):
        load_registry(path)


def test_unparsable_registry_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_registry(path)
    (tmp_path / "v1.avsc").write_text(json.dumps({"type": "record", "name": "R", "fields": "x"}))
    path.write_text(
        json.dumps(
            {"subjects": {"s": {"versions": [{"version": 1, "id": 1, "schema": "v1.avsc"}]}}}
        )
    )
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        load_registry(path)
    with pytest.raises(ConfigError, match="no subject"):
        ScoreEventCodec.from_registry(
            _registry(tmp_path, (1, SCHEMAS / "score_event.v1.avsc")), "x"
        )


def test_first_version_must_hold_a_score_event(tmp_path: Path) -> None:
    v1 = json.loads((SCHEMAS / "score_event.v1.avsc").read_text())
    next(f for f in v1["fields"] if f["name"] == "score")["type"] = "int"
    source = tmp_path / "src.avsc"
    source.write_text(json.dumps(v1))
    registry = tmp_path / "reg"
    registry.mkdir()
    with pytest.raises(ConfigError, match="score"):
        ScoreEventCodec.from_registry(_registry(registry, (1, source)))


def test_codec_pickles_for_worker_processes(codec: ScoreEventCodec) -> None:
    clone = pickle.loads(pickle.dumps(codec))
    event = _event()
    assert clone.decode(codec.encode(event)) == event
    assert pickle.loads(pickle.dumps(codec.decode))(clone.encode(event)) == event
