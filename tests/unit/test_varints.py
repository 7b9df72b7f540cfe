"""schemas.varints: an over-long varint is found where a reader meets it, and only there."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from schemas.varints import VarintWalk

#: Every kind of Avro type the walk reads, named types used again by name.
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "R",
    "namespace": "t",
    "fields": [
        {"name": "text", "type": "string"},
        {"name": "fixed", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "longs", "type": {"type": "array", "items": "long"}},
        {"name": "nulls", "type": {"type": "array", "items": "null"}},
        {"name": "names", "type": {"type": "map", "values": "string"}},
        {"name": "choice", "type": ["null", "F", "string"]},
        {"name": "again", "type": "t.F"},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "flag", "type": "boolean"},
            {"name": "ratio", "type": "double"},
            {"name": "share", "type": "float"},
            {"name": "blob", "type": "bytes"},
        ]}},
        {"name": "last", "type": "long"},
    ],
}  # fmt: skip
MARK = 1234567  # zig-zag varint 8e da 96 01: easy to find in a body


def _record(**overrides: Any) -> dict[str, Any]:
    record = {
        "text": "\u2603" * 4,  # 12 bytes >= 0x80 in a row: the walk runs
        "fixed": b"\xff\xff\xff",
        "longs": [5, MARK, -1],
        "nulls": [None, None],
        "names": {"k\u00e9": "\u00e9" * 6},
        "choice": b"\xfe\xfe\xfe",
        "again": b"abc",
        "inner": {"flag": True, "ratio": -1.5, "share": 2.0, "blob": b"\x80" * 12},
        "last": 7,
    }
    return {**record, **overrides}


def _body(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return out.getvalue()


def _pad(body: bytes, varint: bytes, to: int) -> bytes:
    """``body`` with its one ``varint`` written in ``to`` bytes (the same value)."""
    assert body.count(varint) == 1
    padded = varint[:-1] + bytes([varint[-1] | 0x80]) + b"\x80" * (to - len(varint) - 1) + b"\x00"
    return body.replace(varint, padded)


@pytest.fixture
def walk() -> VarintWalk:
    return VarintWalk(SCHEMA)


def test_a_well_formed_body_has_none_even_with_long_runs_of_high_bytes(walk: VarintWalk) -> None:
    body = _body(_record())
    assert b"\x80" * 10 in body
    assert walk.first_overlong(body) is None
    assert walk.first_overlong(b"\x01\x02\x03" + body, start=3) is None


@pytest.mark.parametrize(
    ("name", "varint"),
    [
        ("an array item", b"\x8e\xda\x96\x01"),  # MARK
        ("the last long", b"\x0e"),  # 7
    ],
)
def test_an_eleven_byte_varint_is_found_at_its_offset(
    walk: VarintWalk, name: str, varint: bytes
) -> None:
    body = _body(_record())
    at = body.index(varint)
    assert walk.first_overlong(_pad(body, varint, 11)) == at, name
    # Ten bytes are what Avro allows: fastavro reads it, and so does the walk.
    ten = _pad(body, varint, 10)
    assert fastavro.schemaless_reader(io.BytesIO(ten), fastavro.parse_schema(SCHEMA), None)
    assert walk.first_overlong(ten) is None


def test_a_length_or_a_branch_index_can_be_the_over_long_one(walk: VarintWalk) -> None:
    body = _body(_record(text="abc"))
    assert walk.first_overlong(b"\x86" + b"\x80" * 9 + b"\x00" + body[1:]) == 0
    choice = body.index(b"\x02\xfe\xfe\xfe")  # branch 1 (F): index 1 is zig-zag 0x02
    padded = body[:choice] + b"\x82" + b"\x80" * 9 + b"\x00" + body[choice + 1 :]
    assert walk.first_overlong(padded) == choice


def test_another_fault_first_leaves_it_to_the_decoder(walk: VarintWalk) -> None:
    body = _pad(_body(_record(text="abcd")), b"\x0e", 11)
    assert walk.first_overlong(body) is not None
    bad_text = body.replace(b"abcd", b"\xff\xfe\xfd\xfc")
    assert walk.first_overlong(bad_text) is None  # invalid UTF-8 before it
    assert walk.first_overlong(b"\x7f" + body[1:]) is None  # a length past the end
    assert walk.first_overlong(body[:20]) is None  # cut short
