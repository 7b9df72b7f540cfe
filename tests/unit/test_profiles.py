"""Profiles: the signed string, the codec, the per-record rules, the bucket writes' arguments."""

from __future__ import annotations

import pytest

from domain.errors import CodecError, ConfigError
from domain.profile_batches import ProfileChange, ProfileValidator
from domain.profiles import (
    BUCKETS,
    ProfileKeys,
    ProfileRecord,
    bucket_of,
    canonical,
    profile_problem,
    sign_profile,
    stored_bytes,
    stored_profile,
    verify_profile,
)
from domain.records import RecordBatch, SourceRecord
from domain.signing import Verdict, parse_keyring
from schemas.compat import check_registry
from schemas.profile_codec import ProfileCodec
from sinks.profiles import encode_batch, resume_offset

KEYS = parse_keyring("k1:" + "11" * 32 + ",k2:" + "22" * 32)
OTHER = parse_keyring("k1:" + "33" * 32)
CODEC = ProfileCodec.from_registry()


def _record(player: str = "p1", name: str = "Ada", **kw: object) -> ProfileRecord:
    fields: dict[str, object] = {
        "player_id": player,
        "display_name": name,
        "avatar_url": "https://img.example/ada.png",
        "country": "FR",
        "updated_at_ms": 1_700_000_000_000,
    }
    fields.update(kw)
    return sign_profile(KEYS, "k1", **fields)


def test_canonical_string_is_length_prefixed_so_fields_cannot_shift() -> None:
    assert canonical("p1", "Ada", None, "FR", 5) == b"profile-v1|2:p1|3:Ada|-|2:FR|5"
    # Without the lengths these two would sign the same bytes.
    assert canonical("p", "a|b", "", None, 1) != canonical("p", "a", "b|", None, 1)
    assert canonical("p", "\u00e9", None, None, 1) == "profile-v1|1:p|2:\u00e9|-|-|1".encode()


def test_signature_verifies_with_the_same_keyring_only() -> None:
    record = _record()
    assert verify_profile(KEYS, record) is Verdict.OK
    assert verify_profile(OTHER, record) is Verdict.SIGNATURE
    assert verify_profile(KEYS, record._replace(key_id="k9")) is Verdict.UNKNOWN_KEY
    assert verify_profile(KEYS, record._replace(display_name="Eve")) is Verdict.SIGNATURE
    with pytest.raises(ConfigError, match="k9"):
        sign_profile(KEYS, "k9", player_id="p", display_name="x", updated_at_ms=1)


def test_codec_round_trip_and_framing() -> None:
    record = _record(avatar_url=None, country=None)
    data = CODEC.encode(record)
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == CODEC.schema_id
    assert CODEC.decode(data) == record
    assert CODEC.decode(CODEC.encode(_record())) == _record()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "DECODE"),
        (b"\x01\x00\x00\x00\x64abc", "DECODE"),
        (b"\x00\x00\x00\x00\x01abc", "SCHEMA"),
        (b"\x00\x00\x00\x00\x64\x02", "DECODE"),
    ],
)
def test_codec_refusals_carry_their_dead_letter_code(data: bytes, code: str) -> None:
    with pytest.raises(CodecError) as caught:
        CODEC.decode(data)
    assert caught.value.code == code


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(CodecError, match="left after"):
        CODEC.decode(CODEC.encode(_record()) + b"\x00")


def test_registry_covers_the_profile_subject() -> None:
    assert check_registry() == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"display_name": ""}, "displayName"),
        ({"display_name": "x" * 65}, "displayName"),
        ({"display_name": "a\nb"}, "control"),
        ({"avatar_url": "javascript:alert(1)"}, "avatarUrl"),
        ({"avatar_url": "https://x/" + "a" * 600}, "avatarUrl"),
        ({"country": "fr"}, "country"),
        ({"country": "FRA"}, "country"),
    ],
)
def test_field_rules(changes: dict[str, object], problem: str) -> None:
    found = profile_problem(_record()._replace(**changes))
    assert found is not None and problem in found
    assert profile_problem(_record()) is None


def _batch(*records: SourceRecord) -> RecordBatch:
    return RecordBatch("profiles", 0, records)


def test_validator_sets_erases_and_refuses_by_each_record_alone() -> None:
    good = _record("p1")
    unsigned = _record("p2")._replace(sig=b"")
    stranger = sign_profile(OTHER, "k1", player_id="p3", display_name="X", updated_at_ms=1)
    wrong_key = _record("p4")
    bad_name = sign_profile(KEYS, "k2", player_id="p5", display_name="", updated_at_ms=1)
    batch = _batch(
        SourceRecord(10, 0, b"p1", CODEC.encode(good)),
        SourceRecord(11, 0, b"p2", CODEC.encode(unsigned)),
        SourceRecord(12, 0, b"p3", CODEC.encode(stranger)),
        SourceRecord(13, 0, b"other", CODEC.encode(wrong_key)),
        SourceRecord(14, 0, b"p5", CODEC.encode(bad_name)),
        SourceRecord(15, 0, b"p6", b"\x01junk"),
        SourceRecord(16, 0, b"p1", None),
        SourceRecord(17, 0, None, CODEC.encode(good)),
        SourceRecord(18, 0, b"p7", CODEC.encode(_record("p7")._replace(key_id="nope"))),
    )
    checked = ProfileValidator(CODEC.decode, KEYS).check_batch(batch)
    assert checked.last_offset == 18
    assert checked.changes == (
        ProfileChange(
            10,
            "p1",
            {
                "displayName": "Ada",
                "avatarUrl": "https://img.example/ada.png",
                "country": "FR",
                "updatedAt": 1_700_000_000_000,
            },
        ),
        ProfileChange(11, "p2", None),
        ProfileChange(12, "p3", None),
        ProfileChange(13, "other", None),
        ProfileChange(14, "p5", None),
        ProfileChange(15, "p6", None),
        ProfileChange(16, "p1", None),
        ProfileChange(18, "p7", None),
    )
    codes = {letter.record.offset: letter.code for letter in checked.dead}
    assert codes == {
        11: "SIGNATURE",
        12: "SIGNATURE",
        13: "SCHEMA",
        14: "BOUNDS",
        15: "DECODE",
        17: "SCHEMA",
        18: "UNKNOWN_KEY",
    }
    letters = checked.letters()
    assert letters.dead == checked.dead and letters.accepted == () and letters.last_offset == 18


def test_stored_value_round_trip() -> None:
    profile = {"displayName": "Zoë", "avatarUrl": None, "country": "NO", "updatedAt": 3}
    assert stored_profile(stored_bytes(profile)) == profile


def test_every_batch_writes_every_bucket_with_its_own_records() -> None:
    checked = ProfileValidator(CODEC.decode, KEYS).check_batch(
        _batch(
            SourceRecord(5, 0, b"p1", CODEC.encode(_record("p1"))),
            SourceRecord(6, 0, b"p2", None),
        )
    )
    beliefs: list[int | None] = [None] * BUCKETS
    beliefs[bucket_of("p1")] = 4
    calls = encode_batch("ns", checked, beliefs)
    assert len(calls) == BUCKETS
    for bucket, (keys, args) in enumerate(calls):
        assert keys == [ProfileKeys("ns", bucket).profiles, ProfileKeys("ns", bucket).offsets]
        assert args[0] == "profiles/0" and args[2] == 6
        assert args[1] == (4 if bucket == bucket_of("p1") else "")
        players = args[4::3]
        expected = [p for p in ("p1", "p2") if bucket_of(p) == bucket]
        assert players == expected
    tombstone = calls[bucket_of("p2")][1]
    assert tombstone[tombstone.index("p2") + 1] == b""


@pytest.mark.parametrize(
    ("snapshot", "stored", "start"),
    [
        (100, [None] * 4, 0),  # Redis lost everything of a partition that was read
        (0, [None] * 4, 0),
        (100, [99, 99, 99, 99], 100),
        (100, [99, 40, 99, 99], 41),
        (100, [99, None, 99, 99], 0),  # one bucket lost its watermark
        (50, [99, 99, 99, 99], 50),
    ],
)
def test_resume_offset(snapshot: int, stored: list[int | None], start: int) -> None:
    assert resume_offset(snapshot, stored) == start
