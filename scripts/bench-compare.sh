#!/usr/bin/env bash
# Compares the Go benchmarks of the working tree with those of a base
# revision, side by side: both sides' test binaries are built first, then run
# in alternating rounds (base, head, base, head, ...) so that both see the same
# machine state, and benchstat summarises each benchmark's change.
#
#   scripts/bench-compare.sh [base-rev] [rounds]     (defaults: origin/main 5)
#
# BENCH (default '.') selects benchmarks, BENCHTIME (default 5x) their
# length, PKGS (default: every package with benchmarks, except e2e, whose
# benchmarks drive the real binary and third-party tools: `make bench`) the
# packages. Results are matched by benchmark name, not package, so a
# benchmark that moved to another package is still compared.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-origin/main}
rounds=${2:-5}
bench=${BENCH:-.}
benchtime=${BENCHTIME:-5x}
out=${OUT:-$(mktemp -d)}
root=$PWD

pkgs() { # the packages of a tree that have benchmarks
	(cd "$1" && grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sort -u | grep -v '^./e2e' || true)
}

wt=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" "$base"

build() { # tree side: one test binary per package
	local tree=$1 side=$2
	mkdir -p "$out/$side"
	for p in ${PKGS:-$(pkgs "$tree")}; do
		(cd "$tree" && go test -c -o "$out/$side/$(echo "${p#./}" | tr / _).test" "$p")
	done
}
build "$wt" base
build "$root" head

run() { # tree side: every binary once, in its package's directory (for
	# testdata); benchmark lines only, no pkg lines
	local tree=$1 side=$2
	for p in ${PKGS:-$(pkgs "$tree")}; do
		(cd "$tree/$p" && "$out/$side/$(echo "${p#./}" | tr / _).test" -test.run '^$' -test.bench "$bench" \
			-test.benchtime "$benchtime" -test.benchmem 2>/dev/null | grep -E '^(Benchmark|goos|goarch|cpu)' || true)
	done >>"$out/$side.txt"
}
for i in $(seq "$rounds"); do
	echo "round $i of $rounds" >&2
	run "$wt" base
	run "$root" head
done
go tool -modfile=tools/go.mod benchstat "base=$out/base.txt" "head=$out/head.txt"
echo "raw results: $out/base.txt $out/head.txt" >&2
