#!/usr/bin/env bash
# Runs every Go fuzz target of the module briefly (FUZZTIME, default 3s
# each): a smoke run of each decoder and parser on mutated input. Failing
# inputs land in the package's testdata/fuzz/ for `go test` to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
n=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "fuzz $pkg $target ($fuzztime)"
		log=$(mktemp)
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
			# Go's fuzz coordinator sometimes misses its own deadline; that is
			# not a finding (a finding says "Failing input"): try once more.
			if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input' "$log"; then
				go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1 || { cat "$log"; exit 1; }
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
