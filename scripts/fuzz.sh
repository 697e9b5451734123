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
		if ! go test "${tags[@]}" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
			# Go's fuzz coordinator sometimes misses its own deadline; that is
			# not a finding (a finding says "Failing input"): try once more.
			if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input' "$log"; then
				go test "${tags[@]}" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1 || { cat "$log"; exit 1; }
			else
				cat "$log"
				exit 1
			fi
		fi
		rm -f "$log"
		n=$((n + 1))
	done
done
echo "fuzzed $n targets for $fuzztime each"
