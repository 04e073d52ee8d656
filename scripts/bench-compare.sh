#!/usr/bin/env bash
# bench-compare.sh BASE BENCH [BENCHTIME] [PKG]: runs one benchmark on commit BASE and on the
# work tree, one after the other in one run on this machine, and prints both sets of tables
# (benchtable): a change that claims a gain shows it against the code before it.
#
# BASE is checked out as a detached worktree under dist/compare/ with its own node_modules
# (npm ci), so the work tree's are never touched; it is removed at the end. The raw output of
# both goes to dist/compare.txt (COMPARE_OUT), the base's commands marked "base <sha>".
# Extra environment (BENCH_SCALE_SIZES, ...) reaches both runs.
#
#   scripts/bench-compare.sh HEAD~1 '^BenchmarkEndToEnd$'
#   BENCH_SCALE_SIZES=10000,100000 scripts/bench-compare.sh HEAD~1 '^BenchmarkScale$/^cap=256$'
set -euo pipefail
base=${1:?usage: bench-compare.sh BASE BENCH [BENCHTIME] [PKG]}
bench=${2:?usage: bench-compare.sh BASE BENCH [BENCHTIME] [PKG]}
benchtime=${3:-1x}
pkg=${4:-./internal/bench/}
root=$(git rev-parse --show-toplevel)
cd "$root"
sha=$(git rev-parse --short "$base")
out=${COMPARE_OUT:-dist/compare.txt}
wt=dist/compare/base-$sha
mkdir -p "$(dirname "$out")" dist/compare
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree remove --force "$wt" >/dev/null 2>&1 || true
git worktree add --detach "$wt" "$sha" >/dev/null
(cd "$wt" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
make -s tools >/dev/null

go run ./internal/bench/cmd/benchtable machine | tee "$out"
run() { # dir label
	local cmd="go test -run '^\$' -bench '$bench' -benchtime $benchtime -count=1 -timeout 0 $pkg"
	echo "$cmd  # $2" | tee -a "$out"
	{ (cd "$1" && go test -run '^$' -bench "$bench" -benchtime "$benchtime" -count=1 -timeout 0 "$pkg" 2>&1); echo "exit status $?"; } | tee -a "$out"
}
run "$wt" "base $sha"
run "$root" "work tree on $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + changes')"
echo
go run ./internal/bench/cmd/benchtable "$out"
