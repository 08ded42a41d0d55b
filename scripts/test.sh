#!/usr/bin/env bash
# Runs the whole test suite. The inner loop is `go test -short ./...`, which
# leaves the long end-to-end, crash, fault and concurrency runs to this
# script; docs/testing.md describes both.
#
# With Node 20+ and npm on PATH it first installs the local stand-ins for
# Cosmos DB and Service Bus (scripts/testenv, pinned by package-lock.json);
# the tests start and stop them on free loopback ports. Without Node those
# integration tests skip with a message, unless NIMBUS_REQUIRE_EMULATORS=1
# (CI), which turns a skip into a failure.
#
# The race detector is used when cgo has a C compiler (RACE=1 forces it,
# RACE=0 turns it off). Extra arguments go to `go test`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

testenv="$root/scripts/testenv"
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  stamp="$testenv/node_modules/.nimbus-lock"
  if ! cmp -s "$testenv/package-lock.json" "$stamp" 2>/dev/null; then
    echo "installing the local Cosmos DB and Service Bus stand-ins (npm ci in scripts/testenv)" >&2
    npm ci --prefix "$testenv" --no-audit --no-fund --loglevel=error >&2
    cp "$testenv/package-lock.json" "$stamp"
  fi
else
  echo "node/npm not found: tests that need the local Cosmos DB and Service Bus stand-ins will skip" >&2
fi

race=""
case "${RACE:-auto}" in
  1) race="-race" ;;
  0) ;;
  *)
    cc="$(go env CC)"
    if [ "$(go env CGO_ENABLED)" = "1" ] && command -v "${cc%% *}" >/dev/null 2>&1; then
      race="-race"
    else
      echo "no C compiler for cgo: running without the race detector" >&2
    fi
    ;;
esac

exec go test $race -count=1 -timeout "${TEST_TIMEOUT:-60m}" ./... "$@"
