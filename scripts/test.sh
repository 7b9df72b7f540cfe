#!/usr/bin/env bash
# The test command (README): install, lint, type-check, start the real services,
# run pytest, stop what was started. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy .

started=0
if ! .venv/bin/lb status >/dev/null 2>&1; then started=1; fi
.venv/bin/lb up --cluster
if [ "$started" = 1 ] && [ "${LB_KEEP_SERVICES:-0}" != 1 ]; then
  trap '.venv/bin/lb down >/dev/null || true' EXIT
fi
.venv/bin/pytest "$@"
