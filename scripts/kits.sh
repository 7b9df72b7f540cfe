#!/usr/bin/env bash
# Builds the producer kits and runs their own tests against schemas/vectors/:
# clients/go (`go test`, then bin/lb-produce-go) and clients/java (`mvn -q test`,
# which also writes target/classpath.txt for `java -cp`). Modules and artifacts
# come from the Go module proxy and Maven Central on the first run and stay in
# GOMODCACHE and ~/.m2 after it; nothing is fetched again while go.sum and
# pom.xml are unchanged. A kit is rebuilt only when one of its inputs is newer
# than its stamp. A failing build or test stops here with go's or mvn's output.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in go mvn java; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool not found: the client kits (clients/go, clients/java) need Go and a JDK with Maven" >&2
    exit 2
  fi
done

# newer STAMP PATH...: true when STAMP is missing or any file under PATH is newer.
newer() {
  local stamp=$1
  shift
  [ ! -f "$stamp" ] || [ -n "$(find "$@" -type f -newer "$stamp" -not -path '*/target/*' \
    -not -path '*/bin/*' -not -path '*/__pycache__/*' -print -quit)" ]
}

shared=(schemas/vectors schemas/score_event.v1.avsc schemas/score_event.v2.avsc)
if newer clients/go/bin/.built clients/go "${shared[@]}"; then
  echo "client kit: go test + build (clients/go)" >&2
  (cd clients/go && go vet ./... && go test -count=1 ./... && go build -o bin/lb-produce-go ./cmd/lb-produce-go)
  touch clients/go/bin/.built
fi
if newer clients/java/target/.built clients/java "${shared[@]}"; then
  echo "client kit: mvn -q test (clients/java)" >&2
  (cd clients/java && mvn -B -q test)
  touch clients/java/target/.built
fi
