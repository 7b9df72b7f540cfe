"""The TypeScript client's OpenAPI document (clients/js/openapi.json) is the app's own.

The client's types are generated from that file, so it must be what the app
serves at ``/openapi.json`` now; ``clients/js/scripts/openapi.py`` rewrites it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "clients" / "js" / "scripts" / "openapi.py"


def test_the_committed_openapi_document_is_what_the_app_serves() -> None:
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
