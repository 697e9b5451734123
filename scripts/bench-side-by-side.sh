#!/usr/bin/env bash
# The side-by-side benchmark of issue 20: zarrgate against tensorstore,
# zarrs (zarr-python's Rust pipeline), zarr-python, numcodecs and a raw
# 2-thread read of the chunk files, every system in its own process, in
# interleaved rounds, on a 512 MiB float32 array written by zarr-python
# (libzstd level 3). Prints a Markdown table (docs/benchmarks.md, "Side by
# side (issue 20)") with the date, load and commit.
#
#   scripts/bench-side-by-side.sh            (or: make bench-side-by-side)
#
# With pkg-config finding libzstd and libdeflate, a second zarrgate built
# with -tags cgocodecs runs beside the default pure-Go one (rows marked
# "cgocodecs"); without them those rows are skipped, and the table says why.
#
# Env: ROUNDS (default 5), ROWS (comma-separated subset of: read-zstd,
# read-sharded, read-uncompressed, random, write, decode, python, ratio;
# default all), ZARRGATE_BENCH_VENV (default ~/.cache/zarrgate/venv-bench:
# made here from clients/python/requirements-test.txt + bench/requirements.txt,
# never the test venv), ZARRGATE_BENCH_DATA (where the arrays are written
# once and kept; default ~/.cache/zarrgate/bench-side-by-side), OUT (a
# directory for the raw JSON rows; default a temporary one), PYTHON
# (default python3, >= 3.11), GO (default go).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
venv=${ZARRGATE_BENCH_VENV:-$HOME/.cache/zarrgate/venv-bench}
log() { printf 'bench-side-by-side: %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
	log "creating venv $venv"
	mkdir -p "$(dirname "$venv")"
	"$py" -m venv "$venv"
fi
req=clients/python/requirements-test.txt
stamp="$venv/.zarrgate-bench-stamp"
want=$( (cat "$req" bench/requirements.txt clients/python/pyproject.toml; echo "$root") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	log "installing $req, bench/requirements.txt and clients/python (editable) into $venv"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" -r bench/requirements.txt
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e clients/python
	echo "$want" >"$stamp"
fi
[ "${ZARRGATE_BENCH_VENV_ONLY:-}" = 1 ] && exit 0

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
log "building zarrgate, bench/sidebyside and the codecsvc test binary"
${GO:-go} build -o "$bin/zarrgate" ./cmd/zarrgate
${GO:-go} build -o "$bin/sidebyside" ./bench/sidebyside
${GO:-go} test -c -o "$bin/codecsvc.test" ./codecsvc
# The optional cgocodecs build (libzstd zstd encode and decode, libdeflate gzip decode)
# gets rows of its own next to the pure-Go default when pkg-config finds
# both libraries; else the table says those rows were skipped, and why.
if ! command -v pkg-config >/dev/null; then
	echo "no pkg-config on this machine" >"$bin/cgocodecs-skipped"
elif ! pkg-config --exists libzstd libdeflate; then
	echo "pkg-config finds no libzstd and libdeflate (Debian: libzstd-dev, libdeflate-dev)" >"$bin/cgocodecs-skipped"
else
	log "building the cgocodecs zarrgate and codecsvc test binary"
	if ! CGO_ENABLED=1 ${GO:-go} build -tags cgocodecs -o "$bin/zarrgate-cgo" ./cmd/zarrgate ||
		! CGO_ENABLED=1 ${GO:-go} test -c -tags cgocodecs -o "$bin/codecsvc-cgo.test" ./codecsvc ||
		! CGO_ENABLED=1 ${GO:-go} build -tags cgocodecs -o "$bin/sidebyside-cgo" ./bench/sidebyside; then
		rm -f "$bin/zarrgate-cgo" "$bin/codecsvc-cgo.test" "$bin/sidebyside-cgo"
		echo "the cgocodecs build failed (see above)" >"$bin/cgocodecs-skipped"
	fi
fi
[ -f "$bin/cgocodecs-skipped" ] && log "cgocodecs rows skipped: $(cat "$bin/cgocodecs-skipped")"
exec "$venv/bin/python" bench/side_by_side.py --bin "$bin" "$@"
