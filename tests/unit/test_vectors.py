"""The committed test vectors (schemas/vectors/) against the project's own codec and rules.

Every kit (clients/go, clients/java) is tested against these same files; here
they are checked to be exactly what the Python codec and signer make, and each
invalid record is replayed through the real validator, on both decode engines,
to get the dead-letter code the file promises.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from domain.errors import CodecError
from domain.events import EventKind, ScoreEvent
from domain.games import GameCatalog
from domain.outcomes import DeadLetterCode
from domain.records import SourceRecord
from domain.signing import Verdict, event_canonical, parse_keyring, verify
from domain.validation import Rejected, Validator
from schemas.codec import ScoreEventCodec, load_registry
from schemas.decode_verify import decode_verifier, native_module
from schemas.vectors import generate

VECTORS = Path(generate.__file__).parent
FILES = sorted(VECTORS.glob("*.json"))
CODEC = ScoreEventCodec.from_registry()
ENGINES = ["python", "native"] if native_module() is not None else ["python"]


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def _event(fields: dict[str, Any], sig_hex: str) -> ScoreEvent:
    return ScoreEvent(
        fields["eventId"],
        fields["gameId"],
        fields["playerId"],
        fields["score"],
        fields["ts"],
        EventKind(fields["kind"]),
        fields["keyId"],
        bytes.fromhex(sig_hex),
        fields.get("metadata"),
    )


def _has_metadata(doc: dict[str, Any]) -> bool:
    schema = json.loads((VECTORS.parent / doc["schema_file"]).read_text())
    return any(field["name"] == "metadata" for field in schema["fields"])


def test_the_v2_vectors_sign_their_metadata() -> None:
    doc = _load(VECTORS / "score_event.v2.json")
    by_name = {case["name"]: case for case in doc["valid"]}
    assert by_name["basic"]["event"]["metadata"] is None
    assert by_name["basic"]["canonical"].startswith("v1|")
    unicode = by_name["metadata-unicode"]
    assert unicode["event"]["metadata"] == "Zoë | 日本 | 🏎️ run 2"
    assert unicode["canonical"].startswith("v2|e-0102|") and len(unicode["canonical"]) > 64
    assert by_name["metadata-empty"]["canonical"].endswith(
        "|e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def _validator(doc: dict[str, Any], engine: str) -> Validator:
    keyring = parse_keyring(doc["keys"])
    return Validator(
        GameCatalog.from_toml(doc["games_toml"]), decode_verifier(keyring, CODEC, engine)
    )


def test_one_file_per_registered_version_and_each_is_what_the_code_makes() -> None:
    versions = load_registry()["score-events-value"].versions
    assert [p.name for p in FILES] == sorted(f"{v.path.stem}.json" for v in versions)
    for path, text in generate.rendered().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is out of date"
    assert generate.main(["--check"]) == 0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_valid_events_round_trip_and_verify(path: Path) -> None:
    doc = _load(path)
    keyring = parse_keyring(doc["keys"])
    assert len(doc["valid"]) >= 5
    for case in doc["valid"]:
        event = _event(case["event"], case["sig_hex"])
        framed = bytes.fromhex(case["framed_hex"])
        assert framed[:5] == b"\x00" + doc["schema_id"].to_bytes(4, "big"), case["name"]
        assert framed[5:].hex() == case["avro_body_hex"], case["name"]
        assert CODEC.encode(event, doc["schema_id"]) == framed, case["name"]
        assert CODEC.decode(framed) == event, case["name"]
        text = event_canonical(event)
        assert text == case["canonical"].encode(), case["name"]
        assert keyring.digest(event.key_id, text) == event.sig, case["name"]
        assert verify(keyring, event) is Verdict.OK
        assert bytes.fromhex(case["key_hex"]) == event.player_id.encode()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_job_accepts_every_valid_event(path: Path, engine: str) -> None:
    doc = _load(path)
    validator = _validator(doc, engine)
    for offset, case in enumerate(doc["valid"]):
        record = SourceRecord(
            offset,
            case["record_ts"],
            bytes.fromhex(case["key_hex"]),
            bytes.fromhex(case["framed_hex"]),
        )
        accepted = validator.check(record)
        assert accepted.event == _event(case["event"], case["sig_hex"]), case["name"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_invalid_record_gets_its_dead_letter_code(path: Path, engine: str) -> None:
    doc = _load(path)
    validator = _validator(doc, engine)
    codes = set()
    for offset, case in enumerate(doc["invalid"]):
        code = DeadLetterCode(case["code"])
        codes.add(code)
        record = SourceRecord(
            offset,
            case["record_ts"],
            bytes.fromhex(case["key_hex"]),
            bytes.fromhex(case["value_hex"]),
        )
        with pytest.raises(Rejected) as refused:
            validator.check(record)
        assert refused.value.code == code, f"{case['name']}: {refused.value.detail}"
    # A version without metadata cannot carry too much of it.
    expected = set(DeadLetterCode) - (
        set() if _has_metadata(doc) else {DeadLetterCode.METADATA_TOO_LARGE}
    )
    assert codes == expected, "every dead-letter code has a vector"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_invalid_record_fails_at_its_layer(path: Path) -> None:
    doc = _load(path)
    keyring = parse_keyring(doc["keys"])
    for case in doc["invalid"]:
        value = bytes.fromhex(case["value_hex"])
        if case["layer"] == "codec":
            with pytest.raises(CodecError) as failed:
                CODEC.decode(value)
            assert failed.value.code == case["code"], case["name"]
            assert "event" not in case
            continue
        event = CODEC.decode(value)
        assert event == _event(case["event"], case["sig_hex"]), case["name"]
        verdict = verify(keyring, event)
        if case["layer"] == "signature":
            assert verdict.value == case["code"], case["name"]
        else:
            assert case["layer"] == "rules"
            assert verdict is Verdict.OK, case["name"]
