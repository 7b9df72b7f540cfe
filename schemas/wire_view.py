"""A writer schema as the decoder reads it: the same bytes, no per-record conversion.

:func:`wire_view` rewrites an Avro schema so fastavro decodes enums as their
index (``int``) and skips ``logicalType`` conversions: the codec maps indexes
to symbols once per schema instead of once per record.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: Full and short enum name -> its symbols.
Enums = dict[str, list[str]]


def wire_view(schema: Mapping[str, Any]) -> tuple[dict[str, Any], Enums]:
    """A copy of ``schema`` that reads the same bytes with no per-record conversion.

    Enums become ``int`` (references to them by name too, defaults become the
    symbol's index) and ``logicalType`` annotations are dropped. Returns the
    view and the enums found (full and short name -> symbols).
    """
    enums: Enums = {}
    _collect(schema, "", enums)
    return _rewrite(copy.deepcopy(dict(schema)), enums), enums


def _collect(node: Any, namespace: str, enums: Enums) -> None:
    """Every enum declared anywhere in ``node``, by short and by full name."""
    if isinstance(node, list):
        for item in node:
            _collect(item, namespace, enums)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    name = node.get("name")
    ns = node.get("namespace", namespace)
    if isinstance(name, str) and "." in name:
        ns = name.rsplit(".", 1)[0]
    if kind == "enum" and isinstance(name, str):
        short = name.rsplit(".", 1)[-1]
        enums[short] = list(node.get("symbols", []))
        enums[f"{ns}.{short}" if ns else short] = list(node.get("symbols", []))
    for field in node.get("fields", []) if kind in ("record", "error") else []:
        _collect(field.get("type"), ns, enums)
    for key in ("items", "values"):
        if key in node:
            _collect(node[key], ns, enums)
    if isinstance(kind, (dict, list)):
        _collect(kind, ns, enums)


def _enum_symbols(node: Any, enums: Enums) -> list[str] | None:
    """The symbols of the enum ``node`` is (or refers to), else None."""
    if isinstance(node, str):
        return enums.get(node)
    if isinstance(node, dict):
        if node.get("type") == "enum":
            return list(node.get("symbols", []))
        return _enum_symbols(node.get("type"), enums)
    if isinstance(node, list) and node:
        return _enum_symbols(node[0], enums)  # a union's default belongs to its first branch
    return None


def _rewrite(node: Any, enums: Enums) -> Any:
    if isinstance(node, str):
        return "int" if node in enums else node
    if isinstance(node, list):
        return [_rewrite(item, enums) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "enum":
        return "int"
    out = {k: v for k, v in node.items() if k != "logicalType"}
    if set(out) == {"type"} and isinstance(out["type"], str):
        return _rewrite(out["type"], enums)  # {"type": "long", "logicalType": ...} -> "long"
    if out.get("type") in ("record", "error"):
        out["fields"] = [_rewrite_field(field, enums) for field in node.get("fields", [])]
    for key in ("items", "values"):
        if key in out:
            out[key] = _rewrite(out[key], enums)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _rewrite(out["type"], enums)
    return out


def _rewrite_field(field: Mapping[str, Any], enums: Enums) -> dict[str, Any]:
    """A record field with its type rewritten and an enum default as the symbol's index."""
    new_field = dict(field)
    new_field["type"] = _rewrite(field["type"], enums)
    symbols = _enum_symbols(field["type"], enums)
    if "default" in field and symbols is not None and field["default"] in symbols:
        new_field["default"] = symbols.index(field["default"])
    return new_field
