#!/usr/bin/env bash
# Regenerate the TypeScript stubs in clients/typescript/src/gen from proto/
# with buf (buf.gen.typescript.yaml) and the protoc-gen-es pinned in
# clients/typescript/package-lock.json. Offline once `npm ci` has run;
# runs it when node_modules is missing or older than the lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/npm-ci-typescript.sh
${GO:-go} tool -modfile=tools/go.mod buf generate --template buf.gen.typescript.yaml
echo "generated $(find clients/typescript/src/gen -name '*_pb.ts' | wc -l) files under clients/typescript/src/gen"
