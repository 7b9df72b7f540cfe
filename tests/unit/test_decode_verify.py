"""The compiled decode + verify against the Python reference, differentially.

Both engines of ``schemas/decode_verify.py`` read the same bytes: valid events
of every schema version (v1, the v2 fixture with an added union field, a v3
whose enum has a symbol ``EventKind`` lacks), signed by known, unknown and
wrong keys, then mangled (truncations, bit flips, byte overwrites, wrong magic
and ids, trailing bytes, invalid UTF-8, out-of-range enum indexes) and plain
random bytes. On every input they must give the same event and the same code.

The only differences allowed are the documented ones, where fastavro accepts
bytes that are no well-formed record and the native engine, which reads
every field, refuses them: a varint longer than the 10 bytes Avro allows
(fastavro wraps it around: DECODE), and a field v1 does not read (v2's
``region``) that is cut short (DECODE) or not UTF-8 (SCHEMA), which fastavro
skips unread. Such inputs are recognised by reading them with the writer's
schema alone and writing them back (:func:`_strict_code`).
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain.errors import ConfigError
from domain.events import EventKind, ScoreEvent
from domain.signing import Verdict, parse_keyring, sign, signed_event, verify
from domain.validation import DECODE, SCHEMA, SIGNATURE, UNKNOWN_KEY, Decoded
from schemas import decode_verify
from schemas.codec import DEFAULT_REGISTRY, ScoreEventCodec
from schemas.decode_verify import (
    NativeDecodeVerify,
    PythonDecodeVerify,
    decode_verifier,
    native_module,
    resolve_engine,
)
from tests.unit.test_codec import _event as unsigned_event
from tests.unit.test_codec import _patch_kind, _registry, _v2_with_bonus

V1 = DEFAULT_REGISTRY.parent / "score_event.v1.avsc"
V2 = Path(__file__).parent / "fixtures" / "score_event.v2.avsc"
KEYS = parse_keyring("k1:" + "11" * 32 + ",k2:" + "22" * 32)
OTHER = parse_keyring("k1:" + "33" * 32 + ",k9:" + "99" * 32)
#: Schema ids of the test registry: v1, v2 (adds ``region``), v3 (adds ``BONUS``).
IDS = (1, 2, 5)


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> ScoreEventCodec:
    tmp = tmp_path_factory.mktemp("registry")
    v3 = _v2_with_bonus(tmp_path_factory.mktemp("source"))
    return ScoreEventCodec.from_registry(_registry(tmp, *zip(IDS, (V1, V2, v3), strict=True)))


@pytest.fixture(scope="module")
def engines(codec: ScoreEventCodec) -> tuple[PythonDecodeVerify, NativeDecodeVerify]:
    python = decode_verifier(KEYS, codec, "python")
    native = decode_verifier(KEYS, codec, "native")
    assert isinstance(python, PythonDecodeVerify) and isinstance(native, NativeDecodeVerify)
    return python, native


# -- the oracle -----------------------------------------------------------------------


def rows(decoded: Decoded) -> list[tuple[ScoreEvent | None, str | None, str | None]]:
    """The three columns of an engine's answer as one ``(event, code, detail)`` per record."""
    events, codes, details = decoded
    assert len(events) == len(codes) == len(details)
    return list(zip(events, codes, details, strict=True))


def _outcomes(decoded: Decoded) -> list[tuple[ScoreEvent | None, str | None]]:
    out = []
    for event, code, detail in rows(decoded):
        if event is None:
            assert code in (DECODE, SCHEMA) and detail, (code, detail)
        else:
            assert isinstance(event, ScoreEvent) and type(event.kind) is EventKind
            assert code in (None, SIGNATURE, UNKNOWN_KEY) and detail is None, (event, code)
        out.append((event, code))
    return out


def _strict_code(codec: ScoreEventCodec, data: bytes) -> str | None:
    """The code a reader of *every* field gives bytes fastavro let through as v1; None if none.

    The body is read with the writer's own schema, every field, and written
    back: a well-formed record (every varint at most 10 bytes, nothing cut
    short, valid UTF-8) reproduces itself. Reading as v1, fastavro *skips*
    the fields v1 lacks (v2's ``region``): a cut or a bad string there goes
    unnoticed, and it wraps an over-long varint around.
    """
    schema_id = int.from_bytes(data[1:5], "big")
    view = next(v for v in codec.wire_views() if v.schema_id == schema_id)
    schema = fastavro.parse_schema(json.loads(view.writer_json))
    try:
        record = fastavro.schemaless_reader(io.BytesIO(data[5:]), schema, None)
    except UnicodeDecodeError:
        return SCHEMA
    except Exception:  # e.g. EOFError: the bytes end inside a field v1 does not read
        return DECODE
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    return None if out.getvalue() == data[5:] else DECODE


def agree(
    codec: ScoreEventCodec,
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
    values: Sequence[bytes | None],
) -> list[tuple[ScoreEvent | None, str | None]]:
    """Both engines on ``values`` (one batch); the common outcomes."""
    python, native = engines
    expected = _outcomes(python(values))
    got = _outcomes(native(values))
    assert len(got) == len(values)
    for value, want, have in zip(values, expected, got, strict=True):
        if want != have:
            assert value is not None, (want, have)
            strict = _strict_code(codec, value)
            assert strict is not None and have == (None, strict), (value, want, have)
    return got


# -- inputs ---------------------------------------------------------------------------

ids = st.text(st.characters(codec="utf-8"), min_size=0, max_size=24)
longs = st.integers(-(2**63), 2**63 - 1)


@st.composite
def events(draw: st.DrawFn) -> ScoreEvent:
    """A score event signed right, signed wrong, or by a key the keyring lacks."""
    fields: dict[str, Any] = {
        "event_id": draw(ids),
        "game_id": draw(ids),
        "player_id": draw(ids),
        "score": draw(longs),
        "ts_ms": draw(longs),
        "kind": draw(st.sampled_from(EventKind)),
    }
    signer, key_id = draw(
        st.sampled_from([(KEYS, "k1"), (KEYS, "k2"), (OTHER, "k1"), (OTHER, "k9")])
    )
    event = signed_event(signer, key_id, **fields)
    return draw(
        st.sampled_from([event, event._replace(sig=event.sig[:-1]), event._replace(sig=b""), event])
    )


def _encode(codec: ScoreEventCodec, event: ScoreEvent, schema_id: int, region: str | None) -> bytes:
    """``event`` written with ``schema_id``; v2/v3 fill ``region`` like a v2 producer."""
    data = codec.encode(event, schema_id)
    if schema_id == 1 or region is None:
        return data
    assert data[-1] == 0  # the last field, region, is null: union branch 0
    tail = io.BytesIO()
    fastavro.schemaless_writer(tail, fastavro.parse_schema(["null", "string"]), region)
    return data[:-1] + tail.getvalue()


Mutation = Callable[[bytes], bytes]


@st.composite
def mutations(draw: st.DrawFn, size: int) -> Mutation:
    at = draw(st.integers(0, max(size - 1, 0)))
    choice = draw(
        st.sampled_from(["none", "truncate", "flip", "overwrite", "magic", "id", "trail", "utf8"])
    )
    if choice == "truncate":
        return lambda data: data[:at]
    if choice == "flip":
        bit = draw(st.integers(0, 7))
        return lambda data: data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1 :]
    if choice == "overwrite":
        chunk = draw(st.binary(min_size=1, max_size=12))
        return lambda data: data[:at] + chunk + data[at + len(chunk) :]
    if choice == "magic":
        magic = draw(st.integers(1, 255))
        return lambda data: bytes([magic]) + data[1:]
    if choice == "id":
        schema_id = draw(st.sampled_from([0, 3, 4, 99, 2**32 - 1, *IDS]))
        return lambda data: data[:1] + schema_id.to_bytes(4, "big") + data[5:]
    if choice == "trail":
        extra = draw(st.binary(min_size=1, max_size=8))
        return lambda data: data + extra
    if choice == "utf8":
        bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"]))
        return lambda data: data[: max(at, 5)] + bad + data[max(at, 5) + len(bad) :]
    return lambda data: data


# -- the differential properties ----------------------------------------------------------


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_engines_agree_on_valid_and_mangled_events(
    codec: ScoreEventCodec,
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
    data: st.DataObject,
) -> None:
    event = data.draw(events())
    schema_id = data.draw(st.sampled_from(IDS))
    region = data.draw(st.one_of(st.none(), ids)) if schema_id != 1 else None
    wire = _encode(codec, event, schema_id, region)
    mangled = data.draw(mutations(len(wire)))(wire)
    ((got_event, code),) = agree(codec, engines, [mangled])
    if mangled == wire:  # untouched: decoded exactly, judged by the signature alone
        assert got_event == event
        if event.key_id not in KEYS:
            assert code == UNKNOWN_KEY
        else:
            right = sign(KEYS, event.key_id, *event[:6]) == event.sig
            assert code == (None if right else SIGNATURE)


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=120), schema_id=st.sampled_from(IDS))
def test_engines_agree_on_random_bodies(
    codec: ScoreEventCodec,
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
    body: bytes,
    schema_id: int,
) -> None:
    agree(codec, engines, [b"\x00" + schema_id.to_bytes(4, "big") + body])


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=80)), max_size=20))
@example(values=[b"", b"\x00", b"\x00\x00\x00\x00", None, b"{json}", b"\xff" * 40])
def test_engines_agree_on_random_batches(
    codec: ScoreEventCodec,
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
    values: list[bytes | None],
) -> None:
    agree(codec, engines, values)


# -- targeted cases -------------------------------------------------------------------------


def _event(**overrides: Any) -> ScoreEvent:
    """test_codec's example event, signed with ``k1``."""
    fields = unsigned_event(**overrides)._asdict()
    del fields["key_id"], fields["sig"]
    return signed_event(KEYS, "k1", **fields)


def _codes(
    codec: ScoreEventCodec,
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
    values: Sequence[bytes | None],
) -> list[str | None]:
    return [code for _, code in agree(codec, engines, values)]


def test_every_truncation_and_every_bit_flip_of_each_version(
    codec: ScoreEventCodec, engines: tuple[PythonDecodeVerify, NativeDecodeVerify]
) -> None:
    for schema_id in IDS:
        for region in (None, "eu-west") if schema_id != 1 else (None,):
            for event in (_event(), _event(kind=EventKind.RETRACT, score=0, player_id="\u2603")):
                wire = _encode(codec, event, schema_id, region)
                truncated = [wire[:size] for size in range(len(wire))]
                assert set(_codes(codec, engines, truncated)) == {DECODE}
                flipped = [
                    wire[:at] + bytes([wire[at] ^ (1 << bit)]) + wire[at + 1 :]
                    for at in range(len(wire))
                    for bit in range(8)
                ]
                codes = _codes(codec, engines, flipped)
                if region is None:  # every byte is signed or framing: no flip gets through
                    assert None not in codes
                assert _codes(codec, engines, [wire]) == [None]


def test_dead_letter_codes_of_known_cases(
    codec: ScoreEventCodec, engines: tuple[PythonDecodeVerify, NativeDecodeVerify]
) -> None:
    event = _event()
    good = codec.encode(event)
    kind_at = len(good) - 37  # the kind, then keyId "k1" (3 bytes) and the sig (33 bytes)
    assert _patch_kind(good, event, 0x02)[kind_at] == 0x02
    cases = {
        None: DECODE,
        b"": DECODE,
        b"\x01" + good[1:]: DECODE,
        good + b"\x00": DECODE,
        good[:1] + (99).to_bytes(4, "big") + good[5:]: SCHEMA,
        _patch_kind(good, event, 0x01): SCHEMA,  # index -1
        _patch_kind(good, event, 0x7E): SCHEMA,  # index 63
        good[:kind_at] + b"\x80\x80\x80\x80\x10" + good[kind_at + 1 :]: SCHEMA,  # 2**31
        codec.encode(_event(player_id="pppp")).replace(b"pppp", b"\xff\xfe\xfd\xfc"): SCHEMA,
        codec.encode(_event()._replace(score=99)): SIGNATURE,
        codec.encode(_event()._replace(key_id="k7")): UNKNOWN_KEY,
        good: None,
    }
    assert _codes(codec, engines, list(cases)) == list(cases.values())
    # A BONUS (index 2) is a valid index of the v3 writer but no EventKind: SCHEMA.
    bonus = _patch_kind(codec.encode(event, 5), event, 0x04, after=1)
    assert _codes(codec, engines, [bonus]) == [SCHEMA]


def test_the_native_engine_verifies_the_pinned_known_answer(
    engines: tuple[PythonDecodeVerify, NativeDecodeVerify],
) -> None:
    # test_signing.py's vector, with its keyring: HMAC and canonical string as producers compute.
    keyring = parse_keyring("k1:00112233445566778899aabbccddeeff")
    native = decode_verifier(keyring, engine="native")
    sig = bytes.fromhex("15de3e8113a38bbe6de45d83ff70af7cc21708667544b915a792f0c8c6e56721")
    event = ScoreEvent(
        "e-1", "g1", "p0000042", 12345, 1_714_800_000_123, EventKind.SCORE, "k1", sig
    )
    value = ScoreEventCodec.from_registry().encode(event)
    assert rows(native([value])) == [(event, None, None)]
    assert rows(native([value.replace(b"e-1", b"e-2")]))[0][1] == SIGNATURE


def test_an_over_long_varint_is_decode_on_both_engines(
    codec: ScoreEventCodec, engines: tuple[PythonDecodeVerify, NativeDecodeVerify]
) -> None:
    """The score 12345 padded to 12 varint bytes: fastavro alone would read 12345."""
    event = _event()
    good = codec.encode(event)
    canonical_score = b"\xf2\xc0\x01"  # zig-zag 24690, 3 bytes
    assert good.count(canonical_score) == 1
    padded = good.replace(canonical_score, b"\xf2\xc0\x81" + b"\x80" * 8 + b"\x00")
    python, native = engines
    assert rows(python([padded]))[0][:2] == rows(native([padded]))[0][:2] == (None, DECODE)
    assert _strict_code(codec, padded) == DECODE
    # Before an invalid string (keyId "k1" -> 0xff 0xfe): the varint is the first fault.
    bad_key = padded.replace(b"\x04k1", b"\x04\xff\xfe")
    assert bad_key != padded and _codes(codec, engines, [bad_key]) == [DECODE]
    # After one (playerId), the string is.
    other = codec.encode(_event(player_id="pppp"))
    assert other.count(canonical_score) == 1
    bad_player = other.replace(b"pppp", b"\xff\xfe\xfd\xfc").replace(
        canonical_score, b"\xf2\xc0\x81" + b"\x80" * 8 + b"\x00"
    )
    assert _codes(codec, engines, [bad_player]) == [SCHEMA]
    # Ten high bytes in a row inside a string are no varint: both read the event.
    snowmen = _event(player_id="\u2603" * 4)
    assert rows(python([codec.encode(snowmen)])) == [(snowmen, None, None)]
    assert _codes(codec, engines, [codec.encode(snowmen)]) == [None]
    # Padded to the 10 bytes Avro allows, both read it.
    ten = good.replace(canonical_score, b"\xf2\xc0\x81" + b"\x80" * 6 + b"\x00")
    assert _codes(codec, engines, [ten]) == [None]


# -- selection, pickling, errors --------------------------------------------------------------


def test_native_is_built_and_auto_picks_it() -> None:
    assert native_module() is not None, "lb_native is not built: run scripts/bootstrap.sh"
    assert decode_verifier(KEYS).engine == "native"
    assert decode_verifier(KEYS, engine="python").engine == "python"


def test_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="LB_DECODER"):
        decode_verifier(KEYS, engine="fast")


def test_without_the_native_module_auto_falls_back_and_native_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert [resolve_engine(e) for e in ("auto", "native", "python")] == [
        "native",
        "native",
        "python",
    ]
    monkeypatch.setattr(decode_verify, "native_module", lambda: None)
    assert resolve_engine("auto") == "python"
    assert decode_verifier(KEYS).engine == "python"
    with pytest.raises(ConfigError, match=r"lb_native is not installed; scripts/bootstrap\.sh"):
        resolve_engine("native")
    with pytest.raises(ConfigError, match="LB_DECODER=native"):
        NativeDecodeVerify(ScoreEventCodec.from_registry(), KEYS)


def test_native_engine_pickles_for_worker_processes(
    codec: ScoreEventCodec, engines: tuple[PythonDecodeVerify, NativeDecodeVerify]
) -> None:
    _, native = engines
    copy = pickle.loads(pickle.dumps(native))
    values = [codec.encode(_event()), codec.encode(_event(), 2), b"\x00junk"]
    assert copy(values) == native(values)
    assert copy(tuple(values)) == native(values)  # any sequence, not only a list


def test_native_refuses_an_event_class_it_cannot_fill(codec: ScoreEventCodec) -> None:
    module = native_module()
    assert module is not None
    wires = [(v.schema_id, v.writer_json, v.reader_json, [None]) for v in codec.wire_views()]
    for wrong in (tuple, type("Fields8", (tuple,), {"_fields": tuple("abcdefgh")}), int):
        with pytest.raises((ValueError, AttributeError)):
            module.DecodeVerifier(wires, [("k1", b"1" * 16)], wrong)


def test_keyring_semantics_match(codec: ScoreEventCodec) -> None:
    """Rotation: an event signed by either live key passes; a retired key is unknown."""
    old_and_new = parse_keyring("old:" + "aa" * 16 + ",new:" + "bb" * 16)
    only_new = parse_keyring("new:" + "bb" * 16)
    signed = [
        codec.encode(
            signed_event(
                old_and_new, key, event_id="e", game_id="g", player_id="p", score=1, ts_ms=2
            )
        )
        for key in ("old", "new")
    ]
    for keyring, expected in ((old_and_new, [None, None]), (only_new, [UNKNOWN_KEY, None])):
        python = decode_verifier(keyring, codec, "python")
        native = decode_verifier(keyring, codec, "native")
        assert list(python(signed)[1]) == list(native(signed)[1]) == expected


# -- the committed registry: v1 and v2 (metadata) ---------------------------------------------


@pytest.fixture(scope="module")
def committed() -> tuple[ScoreEventCodec, tuple[PythonDecodeVerify, NativeDecodeVerify]]:
    codec = ScoreEventCodec.from_registry()
    python = decode_verifier(KEYS, codec, "python")
    native = decode_verifier(KEYS, codec, "native")
    assert isinstance(python, PythonDecodeVerify) and isinstance(native, NativeDecodeVerify)
    return codec, (python, native)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_engines_agree_on_v1_and_v2_records_with_metadata(
    committed: tuple[ScoreEventCodec, tuple[PythonDecodeVerify, NativeDecodeVerify]],
    data: st.DataObject,
) -> None:
    codec, engines = committed
    event = data.draw(events())
    metadata = data.draw(st.one_of(st.none(), ids))
    if metadata is not None:  # signed over its metadata, or not (SIGNATURE, UNKNOWN_KEY)
        event = data.draw(
            st.sampled_from([event._replace(metadata=metadata), _event(metadata=metadata)])
        )
    schema_id = 1 if event.metadata is None and data.draw(st.booleans()) else 2
    wire = codec.encode(event, schema_id)
    mangled = data.draw(mutations(len(wire)))(wire)
    ((got_event, code),) = agree(codec, engines, [mangled])
    if mangled == wire:
        assert got_event == event
        if got_event.key_id in KEYS:
            right = verify(KEYS, event) is Verdict.OK
            assert code == (None if right else SIGNATURE)
