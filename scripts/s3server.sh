#!/usr/bin/env bash
# Builds (once) and runs the S3-compatible server the tests use: versitygw
# with its posix backend.
#
#   scripts/s3server.sh build            # build into $ZARRGATE_CACHE (default <repo>/.cache/bin)
#   scripts/s3server.sh run [PORT [DIR]] # serve DIR (default: a temp dir) on 127.0.0.1:PORT (default 7070)
#
# The Go tests (storesvc/s3, storesvc/storeurl) start their own server from
# the same binary via package storesvc/s3/s3test; CI runs `build` first and
# sets ZARRGATE_S3_REQUIRED=1 so that a missing binary fails the tests
# instead of skipping them.
set -euo pipefail

VERSION=v1.8.0
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ZARRGATE_CACHE:-$repo/.cache/bin}
bin=$cache/versitygw

build() {
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	mkdir -p "$cache"
	echo "building versitygw $VERSION into $cache (about 1.5 minutes)" >&2
	GOBIN=$cache GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$VERSION"
	echo "$bin"
}

case ${1:-build} in
build)
	build
	;;
run)
	build >/dev/null
	port=${2:-7070}
	dir=${3:-$(mktemp -d)}
	mkdir -p "$dir"
	echo "versitygw on http://127.0.0.1:$port over $dir (access key zarrgate-test, secret zarrgate-test-secret)" >&2
	ROOT_ACCESS_KEY=zarrgate-test ROOT_SECRET_KEY=zarrgate-test-secret exec "$bin" --port "127.0.0.1:$port" posix "$dir"
	;;
*)
	echo "usage: $0 build | run [PORT [DIR]]" >&2
	exit 2
	;;
esac
