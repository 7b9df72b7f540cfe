"""Signatures: the canonical string, the keyring format, rotation, tamper detection."""

from __future__ import annotations

import hashlib
import hmac
import pickle
import traceback

import pytest

from domain.errors import ConfigError
from domain.events import EventKind, ScoreEvent
from domain.signing import (
    Keyring,
    Verdict,
    canonical,
    parse_keyring,
    sign,
    signed_event,
    verify,
)

SECRET_1 = "00112233445566778899aabbccddeeff"
SECRET_2 = "ff" * 32
KEYS = f"k1:{SECRET_1},k2:{SECRET_2}"


@pytest.fixture
def keyring() -> Keyring:
    return parse_keyring(KEYS)


def _event(keyring: Keyring, key_id: str = "k1", **overrides: object) -> ScoreEvent:
    fields: dict[str, object] = {
        "event_id": "e-1",
        "game_id": "g1",
        "player_id": "p0000042",
        "score": 12345,
        "ts_ms": 1_714_800_000_123,
    }
    fields.update(overrides)
    return signed_event(keyring, key_id, **fields)


def test_canonical_string_is_the_spec_format() -> None:
    assert canonical("e-1", "g1", "p1", 100, 1_714_800_000_000, EventKind.SCORE) == (
        b"v1|e-1|g1|p1|100|1714800000000|SCORE"
    )
    assert canonical("\u00e9", "g", "p", 0, 0, EventKind.RETRACT) == b"v1|\xc3\xa9|g|p|0|0|RETRACT"
    assert canonical("e", "g", "p", -5, 7, EventKind.SCORE) == b"v1|e|g|p|-5|7|SCORE"


def test_known_answer_vector(keyring: Keyring) -> None:
    # Pinned so producers in other languages can check their implementation.
    sig = sign(keyring, "k1", "e-1", "g1", "p0000042", 12345, 1_714_800_000_123, EventKind.SCORE)
    assert sig.hex() == "15de3e8113a38bbe6de45d83ff70af7cc21708667544b915a792f0c8c6e56721"


def test_canonical_string_with_metadata_is_v2_with_its_digest() -> None:
    meta = "Zoë | 🏎"
    digest = hashlib.sha256(meta.encode("utf-8")).hexdigest()
    assert canonical("e-1", "g1", "p1", 100, 7, EventKind.SCORE, meta) == (
        f"v2|e-1|g1|p1|100|7|SCORE|{digest}".encode()
    )
    # Empty metadata is metadata: the v2 string with the digest of no bytes.
    assert canonical("e", "g", "p", 0, 0, EventKind.SCORE, "") == (
        b"v2|e|g|p|0|0|SCORE|e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    # No metadata: exactly the v1 string, so v1 signatures stay valid.
    assert canonical("e", "g", "p", 0, 0, EventKind.SCORE, None) == b"v1|e|g|p|0|0|SCORE"


def test_known_answer_vector_with_metadata(keyring: Keyring) -> None:
    sig = sign(
        keyring, "k1", "e-1", "g1", "p0000042", 12345, 1_714_800_000_123, EventKind.SCORE, "car=7"
    )
    message = (
        b"v2|e-1|g1|p0000042|12345|1714800000123|SCORE|"
        + hashlib.sha256(b"car=7").hexdigest().encode()
    )
    assert sig == hmac.new(bytes.fromhex(SECRET_1), message, hashlib.sha256).digest()


@pytest.mark.parametrize(
    ("signed", "sent"),
    [("car=7", "car=8"), ("car=7", None), (None, ""), ("", None), ("a", "a ")],
)
def test_metadata_is_covered_by_the_signature(
    keyring: Keyring, signed: str | None, sent: str | None
) -> None:
    event = _event(keyring, metadata=signed)
    assert verify(keyring, event) is Verdict.OK
    assert verify(keyring, event._replace(metadata=sent)) is Verdict.SIGNATURE


@pytest.mark.parametrize("length", [16, 32, 63, 64, 65, 200])
def test_keyring_digest_is_plain_hmac_sha256(length: int) -> None:
    secret = bytes((i * 7 + 3) % 256 for i in range(length))
    keyring = Keyring({"k": secret})
    for message in (b"", b"v1|a|b|c|1|2|SCORE", b"x" * 1000):
        assert keyring.digest("k", message) == hmac.new(secret, message, hashlib.sha256).digest()
    assert keyring.digest("other", b"m") is None


def test_parse_keyring_accepts_several_keys_and_whitespace() -> None:
    keyring = parse_keyring(f" k1 : {SECRET_1} , k2:{SECRET_2.upper()} ")
    assert keyring.key_ids == ("k1", "k2")
    assert keyring["k1"] == bytes.fromhex(SECRET_1)
    assert keyring["k2"] == bytes.fromhex(SECRET_2)
    assert len(keyring) == 2 and set(keyring) == {"k1", "k2"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "at least one key"),
        ("   ", "at least one key"),
        ("k1", "entry 1"),
        (f"k1:{SECRET_1},", "entry 2"),
        (f":{SECRET_1}", "entry 1"),
        ("k1:", "entry 1"),
        (f"k1:{SECRET_1},k1:{SECRET_2}", "more than once"),
        ("k1:zz" + SECRET_1, "not valid hex"),
        ("k1:abc", "not valid hex"),
        ("k1:00ff", "at least 16 bytes"),
        (f"bad id:{SECRET_1}", "key id"),
        (f"k|1:{SECRET_1}", "key id"),
    ],
)
def test_parse_keyring_refuses_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_keyring(spec)


@pytest.mark.parametrize("spec", [f"k1:{SECRET_1}xyz", f"k1:{SECRET_1}0", f"k1:{SECRET_1},k1:ab"])
def test_keyring_errors_never_echo_secrets(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_keyring(spec)
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert SECRET_1 not in shown and SECRET_1[:8] not in shown


def test_keyring_text_forms_hide_secrets(keyring: Keyring) -> None:
    for text in (repr(keyring), str(keyring), f"{keyring}", repr([keyring])):
        assert "k1" in text and "k2" in text
        assert SECRET_1 not in text and SECRET_2 not in text
        assert repr(bytes.fromhex(SECRET_1)) not in text


def test_keyring_is_immutable_and_picklable(keyring: Keyring) -> None:
    assert not hasattr(keyring, "__setitem__")
    with pytest.raises(TypeError):
        keyring["k3"] = b"x" * 32  # type: ignore[index]
    clone = pickle.loads(pickle.dumps(keyring))
    assert clone == keyring and clone.key_ids == keyring.key_ids
    event = _event(keyring)
    assert verify(clone, event) is Verdict.OK


def test_keyring_refuses_direct_bad_input() -> None:
    with pytest.raises(ConfigError):
        Keyring({})
    with pytest.raises(ConfigError):
        Keyring({"k": b"short"})


def test_signed_event_verifies_with_every_live_key(keyring: Keyring) -> None:
    for key_id in ("k1", "k2"):
        for kind in EventKind:
            event = _event(keyring, key_id, kind=kind)
            assert event.key_id == key_id and event.kind is kind and len(event.sig) == 32
            assert verify(keyring, event) is Verdict.OK
    assert _event(keyring).kind is EventKind.SCORE  # the default


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_id", "e-2"),
        ("game_id", "g2"),
        ("player_id", "p0000043"),
        ("score", 12346),
        ("ts_ms", 1_714_800_000_124),
        ("kind", EventKind.RETRACT),
    ],
)
def test_any_tampered_field_fails_the_signature(
    keyring: Keyring, field: str, value: object
) -> None:
    tampered = _event(keyring)._replace(**{field: value})
    assert verify(keyring, tampered) is Verdict.SIGNATURE


def test_damaged_signatures_fail(keyring: Keyring) -> None:
    event = _event(keyring)
    flipped = bytes([event.sig[0] ^ 1]) + event.sig[1:]
    for sig in (flipped, event.sig[:16], b"", event.sig + b"\x00"):
        assert verify(keyring, event._replace(sig=sig)) is Verdict.SIGNATURE


def test_signature_of_another_key_fails(keyring: Keyring) -> None:
    event = _event(keyring, "k1")
    assert verify(keyring, event._replace(key_id="k2")) is Verdict.SIGNATURE


def test_unknown_key(keyring: Keyring) -> None:
    other = parse_keyring(f"k9:{SECRET_2}")
    assert verify(keyring, _event(other, "k9")) is Verdict.UNKNOWN_KEY
    assert Verdict.UNKNOWN_KEY.value == "UNKNOWN_KEY" and Verdict.SIGNATURE.value == "SIGNATURE"


def test_signing_with_a_missing_key_is_a_config_error(keyring: Keyring) -> None:
    with pytest.raises(ConfigError, match="k9"):
        _event(keyring, "k9")


def test_rotation_old_and_new_keys_verify_in_one_keyring() -> None:
    old = parse_keyring(f"k1:{SECRET_1}")
    new = parse_keyring(f"k2:{SECRET_2}")
    both = parse_keyring(KEYS)
    assert verify(both, _event(old, "k1")) is Verdict.OK
    assert verify(both, _event(new, "k2")) is Verdict.OK
    assert verify(new, _event(old, "k1")) is Verdict.UNKNOWN_KEY
