#!/usr/bin/env bash
# Test the zarrgate Python client (clients/python) against a real server.
#
# Makes (or reuses) a venv at ${ZARRGATE_VENV:-.cache/venv}-client, installs
# clients/python/requirements-test.txt and the package (editable), builds
# `zarrgate` once with go, and runs pytest. Extra arguments go to pytest
# (e.g. scripts/test-python.sh -k roundtrip). Needs only python3 (>= 3.11)
# and go; on Debian, python3-venv is installed with apt-get when missing.
#
# Env: PYTHON (default python3), ZARRGATE_VENV, GO (default go),
#      ZARRGATE_BIN (use this server binary instead of building one),
#      ZARRGATE_VENV_ONLY=1 (only set up the venv; used by gen-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
venv="${ZARRGATE_VENV:-.cache/venv}-client"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
client="$root/clients/python"
req="$client/requirements-test.txt"

log() { printf 'test-python: %s\n' "$*" >&2; }

if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  log "need Python >= 3.11 as \$PYTHON (have: $("$py" --version 2>&1 || echo none))"
  exit 2
fi

# Debian splits venv/ensurepip out of python3 (package python3-venv).
if ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
  ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  log "python $ver has no venv/ensurepip: installing python3-venv with apt-get"
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv "python$ver-venv" \
    || $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi

if [ ! -x "$venv/bin/python" ]; then
  log "creating venv $venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
fi

# Reinstall only when the pins, the package metadata or the checkout
# changed: the editable install points at one checkout's sources, and
# clones sharing the venv must each test their own.
stamp="$venv/.zarrgate-client-stamp"
want=$( (cat "$req" "$client/pyproject.toml"; echo "$client") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing $req and clients/python (editable)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  # setuptools is pinned in the requirements: no isolated build env needed.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation -e "$client"
  echo "$want" >"$stamp"
fi

if [ "${ZARRGATE_VENV_ONLY:-}" = 1 ]; then
  exit 0
fi

if [ -z "${ZARRGATE_BIN:-}" ]; then
  bindir=$(mktemp -d)
  trap 'rm -rf "$bindir"' EXIT
  log "building zarrgate"
  ${GO:-go} build -o "$bindir/zarrgate" ./cmd/zarrgate
  export ZARRGATE_BIN="$bindir/zarrgate"
fi

cd "$client"
log "pytest with $("$venv/bin/python" -c 'import sys, zarr, grpc; print(f"python {sys.version.split()[0]}, zarr {zarr.__version__}, grpcio {grpc.__version__}")')"
# pytest's own closing line ("N passed, ...") is the summary; -ra lists the
# reasons of anything skipped, xfailed or failed above it.
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "$@"
