#!/usr/bin/env bash
# Test the TypeScript client (clients/typescript) against real servers:
# installs its pinned node_modules (`npm ci`, scripts/npm-ci-typescript.sh),
# builds `zarrgate` and the Go writer of the test's arrays
# (clients/typescript/test/gowriter), type-checks and compiles the package
# and its tests with the pinned tsc, and runs them with Node's test runner.
# Extra arguments go to `node --test` (e.g. --test-name-pattern=TLS).
#
# Env: GO (default go), ZARRGATE_BIN (use this server binary instead of
# building one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/npm-ci-typescript.sh

bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
if [ -z "${ZARRGATE_BIN:-}" ]; then
  ${GO:-go} build -o "$bindir/zarrgate" ./cmd/zarrgate
  export ZARRGATE_BIN="$bindir/zarrgate"
fi
${GO:-go} build -o "$bindir/gowriter" ./clients/typescript/test/gowriter
export ZARRGATE_GOWRITER="$bindir/gowriter"

cd "$root/clients/typescript"
rm -rf dist
node_modules/.bin/tsc -p .
echo "test-typescript: node $(node --version), $(node_modules/.bin/tsc --version)" >&2
# Node's test runner closes with its own summary (# pass N / # fail N).
exec node --test "$@" dist/test/*.test.js
