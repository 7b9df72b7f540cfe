#!/usr/bin/env bash
# Installs the pinned npm packages of clients/js (npm ci, from its package-lock.json;
# npm's own cache keeps them between runs) and builds the TypeScript client
# (clients/js/dist) and the live page's script (api/static/live.js, bundled with
# the client by esbuild). Run by scripts/bootstrap.sh; each step runs only when
# its inputs changed, so a second run costs nothing. Needs Node.js >= 20.10 and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
js=clients/js

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node/npm not found: clients/js and the live page's script are built with Node.js >= 20.10 and npm" >&2
  exit 2
fi
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
              process.exit(a > 20 || (a === 20 && b >= 10) ? 0 : 1)'; then
  echo "node $(node --version) is too old: clients/js needs Node.js >= 20.10" >&2
  exit 2
fi

if [ ! -f "$js/node_modules/.package-lock.json" ] \
    || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
  echo "installing the npm packages of clients/js (npm ci)" >&2
  # --ignore-scripts: esbuild's install script only re-checks its platform binary.
  (cd "$js" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error)
fi

out=api/static/live.js
if [ ! -f "$out" ] || [ ! -f "$js/dist/index.js" ] || [ -n "$(find "$js/src" "$js/scripts/build.mjs" \
    "$js/openapi.json" "$js"/tsconfig*.json "$js/package-lock.json" api/static/live.ts \
    -newer "$out" -not -path "$js/src/generated/*" -print -quit)" ]; then
  echo "building clients/js and the live page's script (npm run build)" >&2
  (cd "$js" && npm run --silent build >/dev/null)
fi
