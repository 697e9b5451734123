#!/usr/bin/env bash
# Install clients/typescript's node_modules exactly as its package-lock.json
# pins them (`npm ci`), unless they already are: a stamp in node_modules
# records the lockfile they came from, so that generation and tests stay
# offline once this has run. Needs node and npm (Node 20 or newer).
set -euo pipefail
cd "$(dirname "$0")/../clients/typescript"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "npm-ci-typescript: $tool not found: install Node.js 20 or newer (with npm)" >&2; exit 2; }
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "npm-ci-typescript: need Node.js 20 or newer, have $(node --version)" >&2
  exit 2
fi
stamp=node_modules/.zarrgate-lock-stamp
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "npm-ci-typescript: npm ci in clients/typescript" >&2
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi
