#!/usr/bin/env bash
# Installs what the project needs on a fresh machine of this kind, idempotently:
# Debian's redis-server/redis-tools, a JRE and Maven (for the Kafka broker),
# chromium and chromium-driver (the live page's browser test), wrk (the HTTP
# benchmark), prometheus/promtool (lb up --monitoring and the rules' test), tmux
# (the live terminal view's test), iproute2 and iptables as root (the fault
# suite's hosts in network namespaces), and the Python virtualenv at .venv with the
# pinned dependencies and the compiled decode + verify (native/, lb_native),
# built from crates.io with Rust's cargo, which must be installed (rustup), and
# the TypeScript client and the live page's script (scripts/build_js.sh, npm).
set -euo pipefail
cd "$(dirname "$0")/.."

# rustup installs cargo in ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: native/ (lb_native) is built with Rust's cargo; install it with rustup (https://rustup.rs)" >&2
  exit 2
fi

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
command -v curl >/dev/null || need+=(curl)  # the HTTP examples of docs/API.md, run by the tests
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v wrk >/dev/null || need+=(wrk)
command -v prometheus >/dev/null || need+=(prometheus)  # lb up --monitoring; promtool too
command -v tmux >/dev/null || need+=(tmux)  # the live terminal view's test (lb top --watch)
if [ "$(id -u)" -eq 0 ]; then  # hosts in network namespaces (tests/faults/netns.py) need root
  command -v ip >/dev/null || need+=(iproute2)
  command -v iptables >/dev/null || need+=(iptables)  # partitions between those hosts
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${need[*]} (install them with apt-get as root)" >&2
    exit 2
  fi
  echo "installing ${need[*]} with apt-get" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/pip install -q --upgrade pip==26.3
  .venv/bin/pip install -q -e '.[dev,bench]'
  touch .venv/.installed
fi
# lb_native: a wheel built by maturin (pinned in native/pyproject.toml) with the
# crate versions of native/Cargo.lock; rebuilt whenever a source file changes.
if [ ! -f .venv/.native ] || [ -n "$(find native/src native/Cargo.toml native/Cargo.lock \
    native/pyproject.toml -newer .venv/.native -print -quit)" ]; then
  echo "building native/ (lb_native) with cargo" >&2
  .venv/bin/pip install -q --force-reinstall --no-deps ./native
  touch .venv/.native
fi
scripts/kits.sh  # the Go and Java producer kits (clients/), built and tested
scripts/build_js.sh  # clients/js and api/static/live.js, built with npm (Node.js >= 20.10)
