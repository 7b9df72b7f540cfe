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


# -- the layers ---------------------------------------------------------------------------

ROOT = DOMAIN.parent

#: Which of our packages each package may import (besides itself). Read top-down:
#: the pure core, the settings, the edges that read and write one system each, the
#: wiring (flows) and the work beside the job (jobs), then the faces (api, lb) and
#: the benchmarks. What is not listed is refused: no sources <-> sinks cycle, no read
#: side that needs the streaming job, nothing that imports the CLI but the benchmarks.
LAYERS: dict[str, frozenset[str]] = {
    "domain": frozenset(),
    "adapters": frozenset({"domain"}),
    "config": frozenset({"adapters", "domain"}),
    "schemas": frozenset({"domain"}),
    "infra": frozenset({"adapters", "config", "domain"}),
    "telemetry": frozenset({"adapters", "config", "domain", "infra"}),
    "producer": frozenset({"adapters", "config", "domain", "schemas"}),
    "sources": frozenset({"adapters", "config", "domain", "schemas", "telemetry"}),
    "sinks": frozenset({"adapters", "config", "domain", "schemas", "telemetry"}),
    "readers": frozenset({"adapters", "config", "domain", "schemas"}),
    "flows": frozenset(
        {"adapters", "config", "domain", "schemas", "sinks", "sources", "telemetry"}
    ),
    "jobs": frozenset(
        {
            "adapters",
            "config",
            "domain",
            "schemas",
            "readers",
            "sinks",
            "producer",
            "telemetry",
        }
    ),
    "api": frozenset(
        {"adapters", "config", "domain", "schemas", "readers", "producer", "telemetry"}
    ),
    # The CLI is an edge over everything; ``lb sketches measure`` runs bench.percentiles.
    "lb": frozenset(
        {
            "adapters",
            "api",
            "bench",
            "config",
            "domain",
            "flows",
            "infra",
            "jobs",
            "producer",
            "readers",
            "schemas",
            "sinks",
            "sources",
            "telemetry",
        }
    ),
}
LAYERS["bench"] = LAYERS["lb"] - {"bench"} | {"lb"}
OURS = frozenset(LAYERS) | {"tests"}


def _imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path`` (also inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _package_files() -> list[Path]:
    return sorted(p for package in LAYERS for p in (ROOT / package).rglob("*.py"))


def test_every_top_level_package_has_a_layer() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages - OURS == set(), "a new package needs its place in LAYERS"


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_only_its_layers(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    ours = (_imports(path) & OURS) - {package}
    refused = ours - LAYERS[package]
    assert not refused, f"{path.relative_to(ROOT)} imports {sorted(refused)} ({package} may not)"


def test_sources_and_sinks_do_not_import_each_other() -> None:
    assert "sinks" not in LAYERS["sources"]
    assert "sources" not in LAYERS["sinks"]
