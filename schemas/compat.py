"""Schema evolution checks: can each version read the data of the one before, and back.

SPEC: later versions of a topic's schema only add fields with defaults, and CI
checks it. Two independent layers decide, so a gap in one is caught by the other:

1. *Structural rules* from the Avro specification's schema-resolution section
   (reader fields missing from the writer need a default, types may only change
   by a legal promotion, enum symbols may not disappear, names must match),
   which give precise, field-level messages.
2. *Real resolution*: when the rules find nothing, sample records covering every
   enum symbol, union branch and extreme value are generated from the writer
   schema, encoded with fastavro and decoded with the reader schema; any error
   is a problem. This guards against the rules and fastavro disagreeing.

Directions: **backward** = the new schema reads data written with the old one
(consumers upgrade first); **forward** = the old schema reads data written with
the new one (producers upgrade first). ``check_compatible`` demands both (FULL).

Run ``python -m schemas.compat [registry.json]`` in CI: exit 1 on any problem.
"""

from __future__ import annotations

import argparse
import copy
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fastavro

from domain.errors import ConfigError
from schemas.codec import load_registry

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
#: Writer type -> reader types it may be read as (Avro "promotion" rules).
_PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset(("long", "float", "double")),
    "long": frozenset(("float", "double")),
    "float": frozenset(("double",)),
    "string": frozenset(("bytes",)),
    "bytes": frozenset(("string",)),
}
#: Python types a JSON default may have, per primitive Avro type.
_DEFAULT_TYPES: Mapping[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (int, float),
    "double": (int, float),
    "bytes": (str,),
    "string": (str,),
    "fixed": (str,),
    "enum": (str,),
    "record": (dict,),
    "map": (dict,),
    "array": (list,),
}
_MAX_DEPTH = 6


def check_compatible(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Problems that stop ``new`` replacing ``old`` in either direction ([] = FULL-compatible)."""
    return backward_problems(old, new) + forward_problems(old, new)


def backward_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why ``new`` cannot read data written with ``old`` ([] when it can)."""
    return [f"backward: {p}" for p in _read_problems(old, new, "old", "new")]


def forward_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why ``old`` cannot read data written with ``new`` ([] when it can)."""
    return [f"forward: {p}" for p in _read_problems(new, old, "new", "old")]


def check_registry(path: Path | str | None = None) -> list[str]:
    """Problems in the registry file, or between consecutive versions of any subject.

    Each subject is checked at the compatibility level it declares (FULL,
    BACKWARD, FORWARD or NONE), between version n and n+1 (non-transitive,
    like Confluent's default levels).
    """
    try:
        subjects = load_registry(path)
    except ConfigError as exc:
        return [str(exc)]
    problems: list[str] = []
    for subject in subjects.values():
        for old, new in zip(subject.versions, subject.versions[1:], strict=False):
            found: list[str] = []
            if subject.compatibility in ("FULL", "BACKWARD"):
                found += backward_problems(old.schema, new.schema)
            if subject.compatibility in ("FULL", "FORWARD"):
                found += forward_problems(old.schema, new.schema)
            where = f"{subject.name} v{old.version} -> v{new.version}"
            problems += [f"{where}: {p}" for p in found]
    return problems


def _read_problems(
    writer: Mapping[str, Any], reader: Mapping[str, Any], writer_label: str, reader_label: str
) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader``."""
    parsed: dict[str, Any] = {}
    for label, schema in ((writer_label, writer), (reader_label, reader)):
        try:
            fastavro.parse_schema(copy.deepcopy(dict(schema)))
            # Logical types do not change the bytes; dropping them keeps the
            # samples' extreme values from failing datetime conversion.
            parsed[label] = fastavro.parse_schema(_strip_logical(schema))
        except Exception as exc:
            return [f"the {label} schema is not valid Avro: {exc}"]
    w, r = parsed[writer_label], parsed[reader_label]
    context = _Context(
        w.get("__named_schemas", {}), r.get("__named_schemas", {}), writer_label, reader_label
    )
    problems = _default_problems(r, context.reader_named, reader_label)
    problems += context.can_read(w, r, _short(r.get("name", "")) or "<root>", 0)
    if not problems:
        problems = _resolution_problems(w, r, context)
    return list(dict.fromkeys(problems))  # dedupe, keep order


class _Context:
    """Named types of both sides and the labels used in messages."""

    def __init__(
        self,
        writer_named: Mapping[str, Any],
        reader_named: Mapping[str, Any],
        writer_label: str,
        reader_label: str,
    ) -> None:
        self.writer_named = writer_named
        self.reader_named = reader_named
        self.writer_label = writer_label
        self.reader_label = reader_label
        self._seen: set[tuple[str, str]] = set()

    def can_read(self, w: Any, r: Any, path: str, depth: int) -> list[str]:
        """Structural resolution of writer type ``w`` by reader type ``r``."""
        w, r = _resolve(w, self.writer_named), _resolve(r, self.reader_named)
        wt, rt = _kind(w), _kind(r)
        if rt == "union":
            if wt == "union":
                return [
                    f"{path}: {self.writer_label} union branch {_describe(b)} matches no "
                    f"branch of the {self.reader_label} union {_describe(r)}"
                    for b in w
                    if not any(not self.can_read(b, rb, path, depth + 1) for rb in r)
                ]
            if any(not self.can_read(w, rb, path, depth + 1) for rb in r):
                return []
            return [
                f"{path}: {self.writer_label} type {_describe(w)} matches no branch of the "
                f"{self.reader_label} union {_describe(r)}"
            ]
        if wt == "union":
            return [
                f"{path}: {self.writer_label} union branch {_describe(b)} cannot be read as "
                f"{self.reader_label} type {_describe(r)}"
                for b in w
                if self.can_read(b, r, path, depth + 1)
            ]
        if wt != rt and rt not in _PROMOTIONS.get(wt, frozenset()):
            return [f"{path}: type changed from {_describe(w)} to {_describe(r)}"]
        if wt in _PRIMITIVES:
            return []
        if wt in ("record", "enum", "fixed") and not _names_match(w, r):
            return [f"{path}: named type {w['name']} was renamed to {r['name']} without an alias"]
        if wt == "record":
            return self._record(w, r, path, depth)
        if wt == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                return [
                    f"{path}: enum symbols {missing} of the {self.writer_label} schema are "
                    f"unknown to the {self.reader_label} schema, which has no enum default"
                ]
            return []
        if wt == "fixed":
            if w["size"] != r["size"]:
                return [f"{path}: fixed size changed from {w['size']} to {r['size']}"]
            return []
        if wt == "array":
            return self.can_read(w["items"], r["items"], f"{path}[]", depth + 1)
        if wt == "map":
            return self.can_read(w["values"], r["values"], f"{path}{{}}", depth + 1)
        return [f"{path}: unsupported type {_describe(w)}"]

    def _record(
        self, w: Mapping[str, Any], r: Mapping[str, Any], path: str, depth: int
    ) -> list[str]:
        key = (w["name"], r["name"])
        if key in self._seen or depth > _MAX_DEPTH:
            return []  # recursive type: already being checked further up
        self._seen.add(key)
        writer_fields = {f["name"]: f for f in w["fields"]}
        for f in w["fields"]:
            for alias in f.get("aliases", []):
                writer_fields.setdefault(alias, f)
        problems: list[str] = []
        for field in r["fields"]:
            candidates = [field["name"], *field.get("aliases", [])]
            match = next((writer_fields[n] for n in candidates if n in writer_fields), None)
            where = f"{path}.{field['name']}"
            if match is None:
                if "default" not in field:
                    problems.append(
                        f"{where}: field is missing from the {self.writer_label} schema and "
                        f"has no default in the {self.reader_label} schema"
                    )
                continue
            problems += self.can_read(match["type"], field["type"], where, depth + 1)
        self._seen.discard(key)
        return problems


def _strip_logical(node: Any) -> Any:
    """A deep copy of a schema without ``logicalType`` annotations."""
    if isinstance(node, list):
        return [_strip_logical(item) for item in node]
    if isinstance(node, dict):
        return {k: _strip_logical(v) for k, v in node.items() if k != "logicalType"}
    return node


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    """Named references -> their definitions; ``{"type": "long", ...}`` -> ``"long"``."""
    while True:
        if isinstance(schema, str) and schema not in _PRIMITIVES and schema in named:
            schema = named[schema]
        elif (
            isinstance(schema, dict)
            and isinstance(schema.get("type"), str)
            and (schema["type"] in _PRIMITIVES or schema["type"] in named)
        ):
            schema = schema["type"]
        else:
            return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return str(schema)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(w: Mapping[str, Any], r: Mapping[str, Any]) -> bool:
    """Avro: unqualified names match, or the writer's name is one of the reader's aliases."""
    aliases = {_short(a) for a in r.get("aliases", [])}
    return _short(w["name"]) == _short(r["name"]) or _short(w["name"]) in aliases


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(s) for s in schema) + "]"
    if isinstance(schema, dict):
        name = schema.get("name")
        return f"{schema.get('type')} {name}" if name else str(schema.get("type"))
    return str(schema)


def _default_problems(schema: Mapping[str, Any], named: Mapping[str, Any], label: str) -> list[str]:
    """Field defaults the reader would use must fit the field (a union's: its first branch).

    fastavro accepts a union default matching *any* branch and does not check
    enum defaults; the Avro specification is stricter, and other readers follow it.
    """
    problems: list[str] = []
    for record in [schema, *(n for n in named.values() if isinstance(n, dict))]:
        if record.get("type") not in ("record", "error"):
            continue
        for field in record.get("fields", []):
            if "default" not in field:
                continue
            target = field["type"]
            if isinstance(target, list):
                target = target[0] if target else "null"
            target = _resolve(target, named)
            kind = _kind(target)
            value = field["default"]
            allowed = _DEFAULT_TYPES.get(kind, (object,))
            wrong = not isinstance(value, allowed) or (
                isinstance(value, bool) and kind not in ("boolean",)
            )
            if not wrong and kind == "enum":
                wrong = value not in target.get("symbols", [])
            if wrong:
                problems.append(
                    f"the {label} schema's default {value!r} of field "
                    f"{_short(record['name'])}.{field['name']} does not fit {_describe(target)}"
                )
    return problems


def _resolution_problems(w: Any, r: Any, context: _Context) -> list[str]:
    """Encode covering samples with the writer, decode with the reader (real fastavro)."""
    problems: list[str] = []
    written = 0
    for sample in _samples(w, context.writer_named, 0):
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, w, sample)
        except Exception:
            continue  # a sample our generator got wrong for this schema; not a finding
        written += 1
        buffer.seek(0)
        try:
            fastavro.schemaless_reader(buffer, w, r)
        except Exception as exc:
            problems.append(
                f"a record written with the {context.writer_label} schema cannot be read "
                f"with the {context.reader_label} schema: {type(exc).__name__}: {exc}"
            )
    if written == 0:
        problems.append(f"no sample record could be written with the {context.writer_label} schema")
    return problems


def _samples(schema: Any, named: Mapping[str, Any], depth: int) -> list[Any]:
    """Values of ``schema`` covering every enum symbol, union branch and edge value."""
    if depth > _MAX_DEPTH:
        return []
    schema = _resolve(schema, named)
    kind = _kind(schema)
    primitive: dict[str, list[Any]] = {
        "null": [None],
        "boolean": [False, True],
        "int": [0, -1, 2**31 - 1, -(2**31)],
        "long": [0, -1, 2**63 - 1, -(2**63)],
        "float": [0.0, -1.5],
        "double": [0.0, -1.5e300],
        "bytes": [b"", b"\x00\xff"],
        "string": ["", "s\u00e9\u2713"],
    }
    if kind in primitive:
        return primitive[kind]
    if kind == "union":
        return [value for branch in schema for value in _samples(branch, named, depth + 1)]
    if kind == "enum":
        return list(schema["symbols"])
    if kind == "fixed":
        return [bytes(schema["size"]), b"\xff" * schema["size"]]
    if kind == "array":
        items = _samples(schema["items"], named, depth + 1)
        return [[], items] if items else [[]]
    if kind == "map":
        values = _samples(schema["values"], named, depth + 1)
        return [{}, {f"k{i}": v for i, v in enumerate(values)}] if values else [{}]
    if kind in ("record", "error"):
        columns = [(f["name"], _samples(f["type"], named, depth + 1)) for f in schema["fields"]]
        if any(not values for _, values in columns):
            return []
        count = max((len(values) for _, values in columns), default=1)
        return [{name: values[i % len(values)] for name, values in columns} for i in range(count)]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    """CI entry point: print every problem of the registry; exit 1 if there is any."""
    parser = argparse.ArgumentParser(
        prog="python -m schemas.compat",
        description="Check that every subject of a schema registry file keeps its declared "
        "compatibility level (FULL, BACKWARD, FORWARD or NONE) from each version to the "
        "next. Exit 0: compatible; 1: problems, one per line on stderr.",
    )
    parser.add_argument(
        "registry",
        nargs="?",
        default=None,
        help="registry file (default: the committed schemas/registry.json)",
    )
    args = parser.parse_args(argv)
    problems = check_registry(args.registry)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("schemas: every subject keeps its compatibility level")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
