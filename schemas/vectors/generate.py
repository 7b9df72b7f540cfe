"""Write (or check) the test vectors of every registered score-event schema version.

The vectors are the wire contract a producer in any language is held to: for
fixed events and fixed secrets, the canonical signed string, the HMAC-SHA256,
the Avro body and the Confluent-framed record value, all made here by the
project's own codec (:mod:`schemas.codec`) and signer (:mod:`domain.signing`);
plus records the job must refuse, each with the dead-letter code it gets.

One JSON file per version (``score_event.v<N>.json`` beside this module). The
files are committed; ``python -m schemas.vectors.generate --check`` fails when
they no longer match what the code makes (``tests/unit/test_vectors.py`` runs
the same comparison and replays every case through the real validator).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.events import EventKind, ScoreEvent
from domain.signing import Keyring, event_canonical, parse_keyring, signed_event
from schemas.codec import (
    HEADER_SIZE,
    SCORE_EVENTS_SUBJECT,
    SchemaVersion,
    ScoreEventCodec,
    load_registry,
)

HERE = Path(__file__).parent
#: The keyring every vector is signed with (``LB_HMAC_KEYS`` format); test secrets only.
KEYS = "k1:" + "11" * 32 + ",k2:" + "a5" * 16 + "5a" * 16
#: A key the job does not hold (signs the ``UNKNOWN_KEY`` case).
FOREIGN_KEYS = "k9:" + "99" * 32
#: The game catalog (``LB_GAMES``) the invalid cases are judged under.
GAMES_TOML = (
    '[games."g1"]\nmax_score = 1000000\n'
    '[games."space.race_2-x"]\nmax_score = 1000000\n'
    '[games."gday"]\nmax_score = 1000000\nwindows = ["daily"]\nlateness_seconds = 3600\n'
)
#: 2026-05-04T10:00:00.123Z: the event time of most vectors.
T = 1_777_888_800_123
SECOND = 1000
DAY = 86_400_000


@dataclass(frozen=True)
class Case:
    """One invalid record: what a producer got wrong and the code the job gives it."""

    name: str
    code: str
    layer: str
    why: str
    key: bytes
    value: bytes
    record_ts: int
    event: ScoreEvent | None = None
    #: A producer can tell from the event alone (no game catalog, no clock).
    local: bool = False


def _events() -> list[tuple[str, str, ScoreEvent]]:
    """The valid events: (name, what it exercises, unsigned event with keyId)."""
    long_player = "p" + "x" * 127  # 128 characters: the longest id, a 2-byte length varint
    rows: list[tuple[str, str, dict[str, Any]]] = [
        ("basic", "a plain SCORE event", {}),
        (
            "second-key",
            "signed with the second live key (rotation)",
            {"event_id": "e-0002", "key_id": "k2", "score": 1_000_000},
        ),
        (
            "retract",
            "RETRACT (enum index 1) with score 0",
            {"event_id": "e-0003", "kind": EventKind.RETRACT, "score": 0},
        ),
        (
            "unicode-player",
            "a playerId of 2-, 3- and 4-byte UTF-8: lengths are in bytes, the key is its UTF-8",
            {"event_id": "e-0004", "player_id": "Zoë-日本-🎮", "score": 7},
        ),
        (
            "game-id-punctuation",
            "a gameId with every allowed punctuation mark",
            {"event_id": "e-0005", "game_id": "space.race_2-x", "score": 63},
        ),
        (
            "varint-edges",
            "score 64 (the first 2-byte zigzag varint), a 128-character playerId",
            {"event_id": "e-0006", "player_id": long_player, "score": 64},
        ),
        (
            "uuid-event-id",
            "a 36-character UUID eventId and an event time 1 ms into 2026",
            {
                "event_id": "0b6a3c6e-5a3c-4f3e-9b7e-0c9a5d1e2f40",
                "ts_ms": 1_767_225_600_001,
                "score": 999_999,
            },
        ),
    ]
    base: dict[str, Any] = {
        "event_id": "e-0001",
        "game_id": "g1",
        "player_id": "p-42",
        "score": 1200,
        "ts_ms": T,
        "kind": EventKind.SCORE,
        "key_id": "k1",
    }
    out = []
    for name, note, overrides in rows:
        fields = {**base, **overrides}
        out.append((name, note, ScoreEvent(**fields, sig=b"")))
    return out


def _metadata_events() -> list[tuple[str, str, ScoreEvent]]:
    """The valid events of a version with ``metadata``: it signs the v2 canonical string."""
    base = _events()[0][2]
    rows = [
        (
            "metadata",
            "ASCII metadata (JSON text): the v2 canonical string ends in its SHA-256",
            "e-0101",
            '{"car":"red-7","lap":3}',
        ),
        (
            "metadata-unicode",
            "metadata of 2-, 3- and 4-byte UTF-8 holding '|': hashed as UTF-8 bytes",
            "e-0102",
            "Zoë | 日本 | 🏎️ run 2",
        ),
        (
            "metadata-empty",
            "an empty metadata string is metadata: the v2 string, SHA-256 of no bytes",
            "e-0103",
            "",
        ),
        (
            "metadata-at-limit",
            "512 bytes of metadata: the default metadata_max_bytes",
            "e-0104",
            "m" * 509 + "日",
        ),
    ]
    return [
        (name, note, base._replace(event_id=event_id, metadata=metadata))
        for name, note, event_id, metadata in rows
    ]


def _sign(keyring: Keyring, event: ScoreEvent) -> ScoreEvent:
    return signed_event(
        keyring,
        event.key_id,
        event_id=event.event_id,
        game_id=event.game_id,
        player_id=event.player_id,
        score=event.score,
        ts_ms=event.ts_ms,
        kind=event.kind,
        metadata=event.metadata,
    )


def _event_json(event: ScoreEvent, with_metadata: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "eventId": event.event_id,
        "gameId": event.game_id,
        "playerId": event.player_id,
        "score": event.score,
        "ts": event.ts_ms,
        "kind": event.kind.value,
        "keyId": event.key_id,
    }
    if with_metadata:
        out["metadata"] = event.metadata
    return out


def _valid(
    codec: ScoreEventCodec, keyring: Keyring, schema_id: int, with_metadata: bool
) -> list[dict[str, Any]]:
    out = []
    rows = _events() + (_metadata_events() if with_metadata else [])
    for name, note, unsigned in rows:
        event = _sign(keyring, unsigned)
        framed = codec.encode(event, schema_id)
        text = event_canonical(event)
        out.append(
            {
                "name": name,
                "note": note,
                "event": _event_json(event, with_metadata),
                "canonical": text.decode(),
                "sig_hex": event.sig.hex(),
                "key_hex": event.player_id.encode().hex(),
                "avro_body_hex": framed[HEADER_SIZE:].hex(),
                "framed_hex": framed.hex(),
                "record_ts": event.ts_ms + SECOND,
            }
        )
    return out


def _signed_cases(codec: ScoreEventCodec, ring: Keyring, schema_id: int) -> list[Case]:
    """Records that decode: a signature or a rule of the job refuses them."""
    good = _sign(ring, _events()[0][2])
    key = good.player_id.encode()
    rts = good.ts_ms + SECOND

    def signed(**changes: Any) -> ScoreEvent:
        return _sign(ring, good._replace(**changes))

    def case(name: str, code: str, layer: str, why: str, event: ScoreEvent, **kw: Any) -> Case:
        value = codec.encode(event, schema_id)
        local = kw.get("local", False)
        return Case(name, code, layer, why, kw.get("key", key), value, rts, event, local)

    mistakes = [
        ("score", "the score changed after signing", good._replace(score=1201)),
        ("kind-lowercase", "kind signed as 'score' instead of its symbol 'SCORE'", None),
        ("ts-seconds", "ts signed in seconds instead of milliseconds", None),
        ("other-secret", "signed with k2's secret but sent as keyId k1", None),
        ("hex-sig", "sig sent as the hex text of the HMAC (64 bytes)", None),
    ]
    k2 = ring.digest("k2", event_canonical(good))
    assert k2 is not None
    forged = {
        "kind-lowercase": _mac(ring, "k1", event_canonical(good).replace(b"|SCORE", b"|score")),
        "ts-seconds": _mac(
            ring, "k1", event_canonical(good).replace(f"|{T}|".encode(), f"|{T // 1000}|".encode())
        ),
        "other-secret": k2,
        "hex-sig": good.sig.hex().encode(),
    }
    cases = []
    for name, why, event in mistakes:
        bad = event if event is not None else good._replace(sig=forged[name])
        cases.append(case(f"signature-{name}", "SIGNATURE", "signature", why, bad))
    foreign = parse_keyring(FOREIGN_KEYS)
    cases += [
        case(
            "unknown-key",
            "UNKNOWN_KEY",
            "signature",
            "keyId k9 is not in the job's keyring",
            _sign(foreign, good._replace(key_id="k9")),
        ),
        case(
            "key-not-player",
            "SCHEMA",
            "rules",
            "the Kafka key is not the UTF-8 playerId",
            good,
            key=b"p-43",
        ),
        case(
            "empty-event-id", "SCHEMA", "rules", "eventId is empty", signed(event_id=""), local=True
        ),
        case(
            "game-id-chars",
            "SCHEMA",
            "rules",
            "gameId has a character outside [A-Za-z0-9._-]",
            signed(game_id="g 1"),
            local=True,
        ),
        case(
            "unknown-game",
            "UNKNOWN_GAME",
            "rules",
            "game g2 is not configured and there is no [default]",
            signed(game_id="g2"),
        ),
        case("negative-score", "BOUNDS", "rules", "score below 0", signed(score=-1), local=True),
        case(
            "score-over-max",
            "BOUNDS",
            "rules",
            "score above the game's max_score (1000000)",
            signed(score=1_000_001),
        ),
        case(
            "future",
            "FUTURE",
            "rules",
            "ts 301 s after the record timestamp (allowed skew 300 s)",
            signed(ts_ms=rts + 301 * SECOND),
        ),
        case(
            "late",
            "LATE",
            "rules",
            "a daily-only game (lateness 3600 s) given a score two days old",
            signed(game_id="gday", ts_ms=rts - 2 * DAY),
        ),
    ]
    return cases


def _metadata_cases(codec: ScoreEventCodec, ring: Keyring, schema_id: int) -> list[Case]:
    """Records of a version with ``metadata`` that its signature or size rule refuses."""
    good = _sign(ring, _metadata_events()[0][2])
    key = good.player_id.encode()
    rts = good.ts_ms + SECOND
    as_v1 = _mac(ring, "k1", event_canonical(good._replace(metadata=None)))
    large = _sign(ring, good._replace(metadata="é" * 257))
    rows = [
        (
            "signature-metadata",
            "SIGNATURE",
            "signature",
            "the metadata changed after signing",
            good._replace(metadata='{"car":"red-8","lap":3}'),
        ),
        (
            "signature-metadata-unsigned",
            "SIGNATURE",
            "signature",
            "signed with the v1 canonical string though the event carries metadata",
            good._replace(sig=as_v1),
        ),
        (
            "metadata-too-large",
            "METADATA_TOO_LARGE",
            "rules",
            "514 bytes of metadata (257 two-byte characters): over metadata_max_bytes 512",
            large,
        ),
    ]
    return [
        Case(name, code, layer, why, key, codec.encode(event, schema_id), rts, event)
        for name, code, layer, why, event in rows
    ]


def _mac(ring: Keyring, key_id: str, message: bytes) -> bytes:
    digest = ring.digest(key_id, message)
    assert digest is not None
    return digest


def _codec_cases(codec: ScoreEventCodec, ring: Keyring, schema_id: int) -> list[Case]:
    """Records whose bytes are not a readable event of a registered schema."""
    good = _sign(ring, _events()[0][2])
    key = good.player_id.encode()
    rts = good.ts_ms + SECOND
    framed = codec.encode(good, schema_id)
    header, body = framed[:HEADER_SIZE], framed[HEADER_SIZE:]
    # The kind's enum index sits right before keyId ("k1": length 2 -> varint 4) and sig
    # (and, in a version with metadata, its union index: 0 for null).
    tail = 1 if _has_metadata(codec, schema_id) else 0
    kind_at = len(framed) - (1 + len(good.key_id) + 1 + len(good.sig)) - 1 - tail
    bad_utf8 = _sign(ring, good._replace(player_id="p-\u00e9"))
    bad_utf8_value = codec.encode(bad_utf8, schema_id).replace("p-\u00e9".encode(), b"p-\xe9\xff")
    rows = [
        ("empty", "DECODE", "an empty value", b""),
        ("short-header", "DECODE", "3 bytes: shorter than the 5-byte header", framed[:3]),
        ("magic-byte", "DECODE", "first byte 0x01 instead of 0x00", b"\x01" + framed[1:]),
        ("truncated-body", "DECODE", "the Avro body ends inside sig", framed[:-5]),
        ("trailing-bytes", "DECODE", "a byte left over after the record", framed + b"\x00"),
        ("plain-json", "DECODE", "JSON text instead of Avro", json.dumps({"score": 1}).encode()),
        (
            "unknown-schema-id",
            "SCHEMA",
            "schema id 99 is not registered",
            b"\x00" + (99).to_bytes(4, "big") + body,
        ),
        (
            "kind-index",
            "SCHEMA",
            "enum index 2: v1's kind has two symbols",
            framed[:kind_at] + b"\x04" + framed[kind_at + 1 :],
        ),
        ("invalid-utf8", "SCHEMA", "playerId bytes are not valid UTF-8", bad_utf8_value),
    ]
    assert framed[kind_at] == 0 and header[0] == 0
    return [Case(n, c, "codec", why, key, value, rts) for n, c, why, value in rows]


def _has_metadata(codec: ScoreEventCodec, schema_id: int) -> bool:
    version = next(v for v in codec.subject.versions if v.schema_id == schema_id)
    return any(field.get("name") == "metadata" for field in version.schema["fields"])


def document(version: SchemaVersion) -> dict[str, Any]:
    """The vectors of one schema version as a JSON-ready document."""
    subject = load_registry()[version.subject]
    codec = ScoreEventCodec(subject)
    ring = parse_keyring(KEYS)
    with_metadata = _has_metadata(codec, version.schema_id)
    invalid = _codec_cases(codec, ring, version.schema_id) + _signed_cases(
        codec, ring, version.schema_id
    )
    if with_metadata:
        invalid += _metadata_cases(codec, ring, version.schema_id)
    return {
        "description": (
            "Test vectors of the score-event wire contract (docs/CLIENTS.md). Each valid "
            "event gives its canonical signed string (UTF-8), its HMAC-SHA256 under `keys`, "
            "the Avro binary body and the Confluent-framed record value (0x00, schema id "
            "as 4 bytes big-endian, body); the record key is the UTF-8 playerId. Each "
            "invalid record gives the dead-letter code the job writes for it when run with "
            "`keys` as LB_HMAC_KEYS and `games_toml` as its LB_GAMES file, at record "
            "timestamp `record_ts`. layer: codec = the bytes alone are no event of a "
            "registered schema; signature = it decodes but the keyring refuses it; rules = "
            "it decodes and verifies but breaks a rule of the job; local = a producer can tell "
            "from the event alone, before sending. Generated by "
            "`python -m schemas.vectors.generate`; do not edit by hand."
        ),
        "subject": version.subject,
        "version": version.version,
        "schema_id": version.schema_id,
        "schema_file": version.path.name,
        "keys": KEYS,
        "games_toml": GAMES_TOML,
        "valid": _valid(codec, ring, version.schema_id, with_metadata),
        "invalid": [
            {
                "name": case.name,
                "code": case.code,
                "layer": case.layer,
                "why": case.why,
                "key_hex": case.key.hex(),
                "value_hex": case.value.hex(),
                "record_ts": case.record_ts,
                "local": case.local,
                **({} if case.event is None else {"event": _event_json(case.event, with_metadata)}),
                **({} if case.event is None else {"sig_hex": case.event.sig.hex()}),
            }
            for case in invalid
        ],
    }


def rendered() -> dict[Path, str]:
    """Every vectors file's path and exact text, one per registered version."""
    subject = load_registry()[SCORE_EVENTS_SUBJECT]
    return {
        HERE / f"{version.path.stem}.json": json.dumps(
            document(version), indent=2, ensure_ascii=False
        )
        + "\n"
        for version in subject.versions
    }


def main(argv: list[str] | None = None) -> int:
    """Write the files, or with ``--check`` name each one that is out of date (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m schemas.vectors.generate")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python -m schemas.vectors.generate)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
