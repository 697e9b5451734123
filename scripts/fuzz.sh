#!/usr/bin/env bash
# Runs every Go fuzz target of the module briefly (FUZZTIME, default 3s
# each): a smoke run of each decoder and parser on mutated input. Failing
# inputs land in the package's testdata/fuzz/ for `go test` to replay.
# FUZZ_PKGS (default ./...), FUZZ_TARGETS (a regexp of target names,
# default ^Fuzz) and FUZZ_TAGS (build tags: the cgocodecs build's C
# decoders) narrow or change what is fuzzed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
tags=(-tags "${FUZZ_TAGS:-}")
n=0
for pkg in $(go list "${tags[@]}" ${FUZZ_PKGS:-./...}); do
	for target in $(go test "${tags[@]}" -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' | grep -E "${FUZZ_TARGETS:-^Fuzz}" || true); do
		echo "fuzz $pkg $target ($fuzztime${FUZZ_TAGS:+, tags $FUZZ_TAGS})"
		log=$(mktemp)
		# Go's fuzz coordinator sometimes misses its own deadline ("context
		# deadline exceeded" without "Failing input"): that is not a
		# finding, so such a run is tried again, up to three times in all.
		# A finding, or any other failure, ends the script.
		for try in 1 2 3; do
			if go test "${tags[@]}" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
				break
			fi
			if [ "$try" = 3 ] || ! grep -q 'context deadline exceeded' "$log" || grep -q 'Failing input' "$log"; then
				cat "$log"
				exit 1
			fi
			echo "fuzz: $target: the coordinator missed its deadline (not a finding); again" >&2
		done
		rm -f "$log"
		n=$((n + 1))
	done
done
echo "fuzzed $n targets for $fuzztime each"
