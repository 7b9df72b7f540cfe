"""The domain package stays pure: no framework or client imports, no clock reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "domain"
FORBIDDEN_MODULES = {"bytewax", "redis", "confluent_kafka", "fastavro", "pyarrow", "os", "socket"}


def _modules() -> list[Path]:
    return sorted(DOMAIN.glob("*.py"))


def test_domain_has_modules() -> None:
    assert len(_modules()) >= 2


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_domain_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_domain_module_never_reads_the_clock(path: Path) -> None:
    text = path.read_text()
    for call in (
        "datetime.now(",
        "datetime.utcnow(",
        "time.time(",
        "time.monotonic(",
        "date.today(",
    ):
        assert call not in text, f"{path.name} reads the clock via {call}"
