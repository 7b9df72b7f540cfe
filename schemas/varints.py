"""Over-long Avro varints, found where the compiled reader finds them.

Avro writes an int or a long as a zig-zag varint of at most 10 bytes. The
compiled engine (``lb_native``: the ``apache-avro`` crate) refuses a varint
whose first 10 bytes all carry the continuation bit, wherever it meets one: a
long, an enum index, a union branch, the length of a string or bytes. fastavro
reads on and wraps the value around, so without this check the Python engine
would accept a record the compiled one refuses, or reach a later fault (an
invalid string) and name another code for it.

:class:`VarintWalk` reads a body along its writer schema the way the compiled
reader does, varint by varint, and reports the first over-long one it meets
before any other fault. Only a body with 10 bytes of ``0x80`` or more in a row
can hold one; :func:`has_long_run` finds such a run at C speed, so the walk
runs only for the few bodies that have one (long non-ASCII strings, about one
signature in 80) and costs the rest a ``bytes.translate`` and a ``find``
(about a quarter of what a regular expression for the run costs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The most bytes a varint may have; the last one has no continuation bit.
MAX_VARINT_BYTES = 10
#: ``body.translate(HIGH_BITS)``: 1 for each byte with the continuation bit, else 0.
HIGH_BITS = bytes(int(byte >= 0x80) for byte in range(256))
#: What a translated body holds where it could hold an over-long varint.
LONG_RUN = b"\x01" * MAX_VARINT_BYTES
_FIXED_SIZES = {"null": 0, "boolean": 1, "float": 4, "double": 8}


def has_long_run(body: bytes, start: int = 0) -> bool:
    """Whether ``body[start:]`` has 10 bytes with the continuation bit in a row."""
    return body.translate(HIGH_BITS).find(LONG_RUN, start) != -1


class _Overlong(Exception):
    """The walk met an over-long varint at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class _Stop(Exception):
    """The walk met another fault first (cut short, bad length, bad UTF-8, no such branch)."""


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` and the position after it."""
    value = shift = 0
    for index in range(pos, min(pos + MAX_VARINT_BYTES, len(body))):
        byte = body[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), index + 1
        shift += 7
    if len(body) - pos >= MAX_VARINT_BYTES:
        raise _Overlong(pos)
    raise _Stop  # the body ends inside the varint


class VarintWalk:
    """Reads bodies of one writer schema (a parsed Avro JSON schema) for over-long varints."""

    __slots__ = ("_names", "_schema")

    def __init__(self, schema: Any) -> None:
        self._schema = schema
        self._names: dict[str, Any] = {}
        self._collect(schema, "")

    def first_overlong(self, body: bytes, start: int = 0) -> int | None:
        """Offset of the first over-long varint of the record at ``body[start:]``.

        None when the record has none, or when the compiled reader would stop
        at another fault before reaching one (the decoder reports that itself).
        """
        if not has_long_run(body, start):
            return None
        try:
            self._walk(self._schema, body, start)
        except _Overlong as found:
            return found.offset
        except _Stop:
            return None
        return None

    def _collect(self, node: Any, namespace: str) -> None:
        """Every named type of ``node`` by full and short name (a later field may use either)."""
        if isinstance(node, list):
            for item in node:
                self._collect(item, namespace)
            return
        if not isinstance(node, Mapping):
            return
        name = node.get("name")
        ns = node.get("namespace", namespace)
        if node.get("type") in ("record", "error", "enum", "fixed") and isinstance(name, str):
            if "." in name:
                ns = name.rsplit(".", 1)[0]
            short = name.rsplit(".", 1)[-1]
            self._names[short] = node
            self._names[f"{ns}.{short}" if ns else short] = node
        for field in node.get("fields", []):
            self._collect(field.get("type"), ns)
        for key in ("type", "items", "values"):
            if isinstance(node.get(key), (list, Mapping)):
                self._collect(node[key], ns)

    def _walk(self, node: Any, body: bytes, pos: int) -> int:
        """The position after the value of type ``node`` at ``pos``."""
        if isinstance(node, list):
            branch, pos = _varint(body, pos)
            if not 0 <= branch < len(node):
                raise _Stop
            return self._walk(node[branch], body, pos)
        if isinstance(node, Mapping):
            kind = node["type"]
            if kind in ("record", "error"):
                for field in node["fields"]:
                    pos = self._walk(field["type"], body, pos)
                return pos
            if kind == "fixed":
                return _skip(body, pos, int(node["size"]))
            if kind in ("array", "map"):
                return self._blocks(node, body, pos)
            if kind == "enum":
                return _varint(body, pos)[1]
            return self._walk(kind, body, pos)
        if node in ("int", "long"):
            return _varint(body, pos)[1]
        if node in ("string", "bytes"):
            size, pos = _varint(body, pos)
            end = _skip(body, pos, size)
            if node == "string":
                try:
                    body[pos:end].decode()
                except UnicodeDecodeError as exc:
                    raise _Stop from exc
            return end
        if node in _FIXED_SIZES:
            return _skip(body, pos, _FIXED_SIZES[node])
        if node not in self._names:
            raise _Stop  # no such type: the decoder says what is wrong
        return self._walk(self._names[node], body, pos)

    def _blocks(self, node: Mapping[str, Any], body: bytes, pos: int) -> int:
        """The position after an array's or a map's blocks."""
        item = node["items"] if node["type"] == "array" else node["values"]
        while True:
            count, pos = _varint(body, pos)
            if count == 0:
                return pos
            if count < 0:
                count = -count
                pos = _varint(body, pos)[1]  # the block's size in bytes
            if item == "null" and node["type"] == "array":
                continue  # nulls take no bytes
            if count > len(body) - pos:
                raise _Stop  # more items than bytes left
            for _ in range(count):
                if node["type"] == "map":
                    pos = self._walk("string", body, pos)
                pos = self._walk(item, body, pos)


def _skip(body: bytes, pos: int, size: int) -> int:
    """The position ``size`` bytes on; a negative size or one past the end stops the walk."""
    end = pos + size
    if size < 0 or end > len(body):
        raise _Stop
    return end
