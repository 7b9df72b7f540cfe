"""Decode + signature verify of a whole batch of record values, by one of two engines.

The validation step's first two questions about a record, "is it an event?"
and "did a key of ours sign it?", cost about a third of the job's CPU per
event in Python (fastavro's per-record call, the HMAC, the event tuple).
Two interchangeable engines answer them for a batch at once:

``python``
    The reference: :meth:`schemas.codec.ScoreEventCodec.decode` (fastavro)
    and :func:`domain.signing.verify`, one record at a time.
``native``
    ``lb_native`` (the Rust crate in ``native/``, built by
    ``scripts/bootstrap.sh``): the ``apache-avro`` crate reads the same wire
    views the codec prepares (:meth:`~schemas.codec.ScoreEventCodec.wire_views`)
    and the RustCrypto HMAC checks the same canonical string with the same
    keys, so both engines give the same events and the same dead-letter codes
    (``tests/unit/test_decode_verify.py`` checks it differentially).

``auto`` (the default of ``LB_DECODER``) is ``native`` when ``lb_native`` is
installed and ``python`` otherwise. Every rule after these two questions
(game ids, identity against the Kafka key, bounds, event time, windows) is
in :mod:`domain.validation`, whichever engine runs.

The Avro spec allows at most 10 bytes for a varint: both engines refuse a
longer one as ``DECODE`` wherever it is (fastavro would wrap it around, so the
codec looks for one first, :mod:`schemas.varints`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

from domain.errors import CodecError, ConfigError
from domain.events import ScoreEvent
from domain.signing import Keyring, Verdict, verify
from domain.validation import DECODE, Decoded
from schemas.codec import ScoreEventCodec

#: Values of ``LB_DECODER``.
ENGINES = ("auto", "native", "python")
NATIVE_MODULE = "lb_native"
#: What to run when ``lb_native`` is missing but ``LB_DECODER=native`` asks for it.
BUILD_HINT = "scripts/bootstrap.sh builds it (it needs Rust's cargo)"


def native_module() -> Any | None:
    """The compiled ``lb_native`` module, or None when it is not installed."""
    try:
        return importlib.import_module(NATIVE_MODULE)
    except ImportError:
        return None


class PythonDecodeVerify:
    """The reference engine: fastavro through the codec, then ``domain.signing.verify``."""

    engine = "python"

    def __init__(self, codec: ScoreEventCodec, keyring: Keyring) -> None:
        self._codec = codec
        self._keyring = keyring

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        """Events, codes and details, one each per value (see :data:`domain.validation.Decoded`)."""
        decode = self._codec.decode
        keyring = self._keyring
        events: list[ScoreEvent | None] = []
        codes: list[str | None] = []
        details: list[str | None] = []
        for value in values:
            event: ScoreEvent | None = None
            code: str | None = DECODE
            detail: str | None = "record has no value"
            if value is not None:
                try:
                    event = decode(value)
                except CodecError as exc:
                    code, detail = exc.code, exc.detail
                else:
                    verdict = verify(keyring, event)
                    code = None if verdict is Verdict.OK else verdict.value
                    detail = None
            events.append(event)
            codes.append(code)
            details.append(detail)
        return events, codes, details


class NativeDecodeVerify:
    """The compiled engine: ``lb_native.DecodeVerifier`` over the codec's wire views."""

    engine = "native"

    def __init__(self, codec: ScoreEventCodec, keyring: Keyring) -> None:
        module = native_module()
        if module is None:
            raise ConfigError(f"LB_DECODER=native: {NATIVE_MODULE} is not installed; {BUILD_HINT}")
        self._codec = codec
        self._keyring = keyring
        wires = [
            (
                view.schema_id,
                _widened(view.writer_json),
                None if view.reader_json is None else _widened(view.reader_json),
                [None if kind is None else (kind, kind.value) for kind in view.kinds],
            )
            for view in codec.wire_views()
        ]
        keys = [(key_id, keyring[key_id]) for key_id in keyring.key_ids]
        try:
            self._check = module.DecodeVerifier(wires, keys, ScoreEvent).check
        except ValueError as exc:
            raise ConfigError(f"{NATIVE_MODULE}: {exc}") from exc

    def __call__(self, values: Sequence[bytes | None]) -> Decoded:
        """Events, codes and details, one each per value, like :class:`PythonDecodeVerify`."""
        result: Decoded = self._check(values if isinstance(values, list) else list(values))
        return result

    def __reduce__(self) -> tuple[type[NativeDecodeVerify], tuple[ScoreEventCodec, Keyring]]:
        # Worker processes rebuild the compiled state from the codec and keyring.
        return (NativeDecodeVerify, (self._codec, self._keyring))


def resolve_engine(engine: str) -> str:
    """``native`` or ``python``: what ``engine`` (a value of ``LB_DECODER``) runs here.

    ``ConfigError`` for an unknown name, or for ``native`` when ``lb_native``
    is not installed, so ``lb run`` says so before it starts any process.
    """
    if engine not in ENGINES:
        raise ConfigError(f"LB_DECODER must be one of {', '.join(ENGINES)}, got {engine!r}")
    built = native_module() is not None
    if engine == "native" and not built:
        raise ConfigError(f"LB_DECODER=native: {NATIVE_MODULE} is not installed; {BUILD_HINT}")
    return "native" if engine == "native" or (engine == "auto" and built) else "python"


def decode_verifier(
    keyring: Keyring, codec: ScoreEventCodec | None = None, engine: str = "auto"
) -> PythonDecodeVerify | NativeDecodeVerify:
    """The engine ``engine`` names (``auto``: native when built) for ``codec``'s registry."""
    resolved = resolve_engine(engine)
    codec = codec if codec is not None else ScoreEventCodec.from_registry()
    if resolved == "python":
        return PythonDecodeVerify(codec, keyring)
    return NativeDecodeVerify(codec, keyring)


def _widened(view_json: str) -> str:
    """The view with every ``int`` read as ``long``: the same bytes, no 32-bit check.

    Avro writes both as the same zig-zag varint. fastavro does not range-check
    an int either, so an out-of-range enum index reaches the kind table (and is
    refused there as ``SCHEMA``) on both engines alike.
    """

    def widen(node: Any) -> Any:
        if node == "int":
            return "long"
        if isinstance(node, list):  # a union may not hold two longs: keep its int then
            return [item if item == "int" and "long" in node else widen(item) for item in node]
        if isinstance(node, dict):
            out = dict(node)
            for key in ("type", "items", "values"):
                if key in out:
                    out[key] = widen(out[key])
            if isinstance(out.get("fields"), list):
                out["fields"] = [
                    {**field, "type": widen(field.get("type"))} for field in out["fields"]
                ]
            return out
        return node

    return json.dumps(widen(json.loads(view_json)))
