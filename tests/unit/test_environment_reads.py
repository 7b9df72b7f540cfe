"""Only the settings module touches the process environment; everything else takes arguments."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Names of ``os`` that read or change the process environment.
ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
#: Modules allowed to touch it, and why.
ALLOWED = {
    # Settings.from_env reads it; child_environment copies it, unchanged plus
    # overrides, for the children we start; hand_to_spawned_children adds to it
    # for children a library spawns without an environment of their own.
    "config/settings.py": "the one settings object",
}


def environment_uses(source: str) -> list[int]:
    """The lines of ``source`` that name ``os.environ``, ``os.getenv`` and the like."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ENVIRONMENT
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in ENVIRONMENT for alias in node.names)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _project_files() -> list[Path]:
    """Every Python file of the project but the tests (and hidden or built trees)."""
    tops = [
        p
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in ("tests", "native")
    ]
    files = [path for top in tops for path in top.rglob("*.py")]
    return sorted(f for f in files if "node_modules" not in f.parts)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nx = os.environ.get('LB_X')\n",
        "import os\nos.environ['LB_X'] = '1'\n",
        "import os\nx = os.getenv('LB_X', '')\n",
        "import os\nenv = {**os.environ}\n",
        "from os import environ\n",
        "from os import getenv as read\n",
    ],
)
def test_the_scan_sees_every_way_to_the_environment(source: str) -> None:
    assert environment_uses(source), source


def test_the_scan_passes_other_environs() -> None:
    # A WSGI app's ``environ`` argument is the request, not the process environment.
    assert environment_uses("def app(environ, start):\n    return environ.get('PATH_INFO')\n") == []


def test_the_settings_module_is_found_and_seen() -> None:
    files = {str(p.relative_to(ROOT)) for p in _project_files()}
    assert set(ALLOWED) <= files
    assert environment_uses((ROOT / "config" / "settings.py").read_text())


def test_nothing_outside_the_settings_module_touches_the_environment() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in _project_files()
        if str(path.relative_to(ROOT)) not in ALLOWED
        and (lines := environment_uses(path.read_text()))
    }
    assert found == {}, (
        "read settings through config.settings.Settings.from_env and pass them down "
        f"(file: lines): {found}"
    )
