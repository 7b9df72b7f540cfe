"""Schema evolution: compatible changes pass, every kind of breaking change is named."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import DEFAULT_REGISTRY
from schemas.compat import (
    backward_problems,
    check_compatible,
    check_registry,
    forward_problems,
    main,
)

SCHEMAS = DEFAULT_REGISTRY.parent
V1: dict[str, Any] = json.loads((SCHEMAS / "score_event.v1.avsc").read_text())
V2: dict[str, Any] = json.loads(
    (Path(__file__).parent / "fixtures" / "score_event.v2.avsc").read_text()
)


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def _changed(base: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    schema = copy.deepcopy(base)
    change(schema)
    return schema


def test_committed_registry_passes() -> None:
    assert check_registry() == []
    assert check_registry(DEFAULT_REGISTRY) == []
    assert main([]) == 0


def test_v2_fixture_is_compatible_both_ways() -> None:
    assert check_compatible(V1, V2) == []
    assert check_compatible(V2, V1) == []  # dropping a defaulted field is fine too
    assert check_compatible(V1, V1) == []


def test_compatible_changes() -> None:
    docs_only = _changed(V1, lambda s: _field(s, "score").update(doc="changed words"))
    no_logical = _changed(V1, lambda s: _field(s, "ts").update(type="long"))
    aliased = _changed(V1, lambda s: s.update(name="Score2", aliases=["ScoreEvent"]))
    for schema in (docs_only, no_logical):
        assert check_compatible(V1, schema) == []
    assert backward_problems(V1, aliased) == []


def test_added_field_without_default_breaks_backward() -> None:
    bad = _changed(V2, lambda s: _field(s, "region").pop("default"))
    problems = check_compatible(V1, bad)
    assert problems == [
        "backward: ScoreEvent.region: field is missing from the old schema and has no "
        "default in the new schema"
    ]


def test_removed_field_without_default_breaks_forward() -> None:
    bad = _changed(V1, lambda s: s["fields"].remove(_field(s, "keyId")))
    assert backward_problems(V1, bad) == []
    problems = forward_problems(V1, bad)
    assert len(problems) == 1 and "keyId" in problems[0] and problems[0].startswith("forward:")


@pytest.mark.parametrize(
    ("field", "new_type", "backward", "forward"),
    [
        ("score", "string", True, True),
        ("score", "int", True, False),  # long -> int narrows: old data may not fit
        ("score", "double", False, True),  # promotion one way only
        ("score", ["null", "long"], False, True),
        ("eventId", "long", True, True),
        ("playerId", "bytes", False, True),  # bytes that are not UTF-8 break old readers
    ],
)
def test_type_changes(field: str, new_type: Any, backward: bool, forward: bool) -> None:
    new = _changed(V1, lambda s: _field(s, field).update(type=new_type))
    assert bool(backward_problems(V1, new)) is backward
    assert bool(forward_problems(V1, new)) is forward
    assert all(field in p or "cannot be read" in p for p in check_compatible(V1, new))


def test_enum_changes() -> None:
    added = _changed(V1, lambda s: _field(s, "kind")["type"]["symbols"].append("BONUS"))
    assert backward_problems(V1, added) == []
    assert forward_problems(V1, added) == [
        "forward: ScoreEvent.kind: enum symbols ['BONUS'] of the new schema are unknown to "
        "the old schema, which has no enum default"
    ]
    removed = _changed(V1, lambda s: _field(s, "kind")["type"].update(symbols=["SCORE"]))
    assert "RETRACT" in " ".join(backward_problems(V1, removed))


def test_union_default_must_match_the_first_branch() -> None:
    bad = _changed(V2, lambda s: _field(s, "region").update(type=["string", "null"]))
    problems = check_compatible(V1, bad)
    assert any("default None" in p and "region" in p for p in problems)


def test_enum_default_must_be_a_symbol() -> None:
    bad = _changed(V1, lambda s: _field(s, "kind").update(default="BONUS"))
    assert any("BONUS" in p for p in check_compatible(bad, V1))


def test_renamed_record_without_alias() -> None:
    renamed = _changed(V1, lambda s: s.update(name="Other"))
    problems = check_compatible(V1, renamed)
    assert len(problems) == 2 and all("renamed" in p for p in problems)


def test_invalid_schema_is_reported_not_raised() -> None:
    broken = _changed(V1, lambda s: s.update(fields="nope"))
    problems = check_compatible(V1, broken)
    assert problems and all("not valid Avro" in p for p in problems)


def test_nested_and_recursive_types() -> None:
    base = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "value", "type": "int"},
            {"name": "next", "type": ["null", "Node"], "default": None},
            {
                "name": "tags",
                "type": {"type": "map", "values": {"type": "array", "items": "string"}},
            },
        ],
    }
    widened = _changed(base, lambda s: _field(s, "value").update(type="long"))
    assert backward_problems(base, widened) == []
    assert forward_problems(base, widened) != []
    retyped = _changed(base, lambda s: _field(s, "tags")["type"]["values"].update(items="int"))
    problems = check_compatible(base, retyped)
    assert problems and all("tags" in p for p in problems)


def _registry(tmp_path: Path, new: dict[str, Any], compatibility: str = "FULL") -> Path:
    shutil.copy(SCHEMAS / "score_event.v1.avsc", tmp_path / "v1.avsc")
    (tmp_path / "v2.avsc").write_text(json.dumps(new))
    doc = {
        "subjects": {
            "score-events-value": {
                "compatibility": compatibility,
                "versions": [
                    {"version": 1, "id": 1, "schema": "v1.avsc"},
                    {"version": 2, "id": 2, "schema": "v2.avsc"},
                ],
            }
        }
    }
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(doc))
    return path


def test_registry_with_compatible_v2(tmp_path: Path) -> None:
    assert check_registry(_registry(tmp_path, V2)) == []


def test_registry_with_incompatible_v2(tmp_path: Path) -> None:
    bad = _changed(V2, lambda s: _field(s, "region").pop("default"))
    problems = check_registry(_registry(tmp_path, bad))
    assert len(problems) == 1
    assert problems[0].startswith("score-events-value v1 -> v2: backward: ScoreEvent.region")
    assert main([str(tmp_path / "registry.json")]) == 1


def test_registry_levels(tmp_path: Path) -> None:
    forward_only_break = _changed(V1, lambda s: _field(s, "kind")["type"]["symbols"].append("X"))
    assert check_registry(_registry(tmp_path, forward_only_break, "BACKWARD")) == []
    assert len(check_registry(_registry(tmp_path, forward_only_break, "FORWARD"))) == 1
    assert len(check_registry(_registry(tmp_path, forward_only_break, "FULL"))) == 1
    assert check_registry(_registry(tmp_path, {"type": "int"}, "NONE")) == []


def test_broken_registry_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text("[]")
    problems = check_registry(path)
    assert len(problems) == 1 and "subjects" in problems[0]
