#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, idempotently: the
# S3-compatible test server (built from the Go module proxy), netCDF's
# ncgen/ncdump (Debian netcdf-bin, netCDF-C 4.9.0), libdeflate-dev and
# libzstd-dev (the cgocodecs build: the container image's), the openssl CLI (the
# Python tests make their TLS certificates with it), chromium (the browser
# view's headless test) and the pinned Python venv
# (zarr-python, numcodecs, and netCDF4, whose wheel bundles netCDF-C 4.10).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/s3server.sh build >/dev/null
if ! command -v ncgen >/dev/null || ! command -v ncdump >/dev/null; then
	echo "deps: installing netcdf-bin (ncgen, ncdump)" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq netcdf-bin >/dev/null
fi
if ! command -v openssl >/dev/null; then
	echo "deps: installing openssl" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
fi
if ! command -v chromium >/dev/null; then
	# internal/webui's test loads the browser view in headless chromium.
	echo "deps: installing chromium" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if [ ! -e /usr/include/libdeflate.h ] || [ ! -e /usr/include/zstd.h ]; then
	# The cgocodecs build, the container image's, links them (make
	# test-cgocodecs, make build-image, make deploy-check).
	echo "deps: installing libdeflate-dev, libzstd-dev" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libdeflate-dev libzstd-dev >/dev/null
fi
ZARRGATE_VENV_ONLY=1 scripts/test-python.sh
