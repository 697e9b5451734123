#!/usr/bin/env bash
# Builds zarrgate as the container image does: the Dockerfile's
# `RUN ... go build` line, run as it is outside Docker, from the
# repository's root, into OUT (default bin/zarrgate-image) instead of
# /out/zarrgate. The line links libzstd and libdeflate statically
# (scripts/deps.sh installs Debian's libzstd-dev and libdeflate-dev).
# VERSION and REVISION are the image's build arguments: by default
# `git describe` and the commit; set them empty for what `go version -m`
# records instead (the e2e suite's --version test).
#
#   scripts/image-binary.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/zarrgate-image}
mkdir -p "$(dirname "$out")"
# The RUN instruction's lines joined, without BuildKit's --mount options.
line=$(sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' Dockerfile | grep -E '^RUN .*go build' | sed -e 's/^RUN //' -e 's/--mount=[^ ]*//g')
case "$line" in
*"-o /out/zarrgate "*) ;;
*) echo "image-binary: no 'RUN ... go build ... -o /out/zarrgate' line in Dockerfile" >&2; exit 1 ;;
esac
line=${line/-o \/out\/zarrgate /-o "$out" }
VERSION=${VERSION-$(git describe --tags --always --dirty 2>/dev/null || echo dev)} \
REVISION=${REVISION-$(git rev-parse HEAD 2>/dev/null || true)} \
	sh -c "$line"
