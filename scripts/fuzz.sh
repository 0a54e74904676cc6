#!/usr/bin/env bash
# Runs every fuzz target in the tree (func FuzzX(f *testing.F) in any
# *_test.go) for a bounded time: FUZZTIME, default 20s each. Their seed
# corpora (f.Add and testdata/fuzz/FuzzX/) already run in plain `go test`;
# this explores beyond them. An input that breaks a target is written to
# <pkg>/testdata/fuzz/FuzzX/: commit it with the fix, as a regression seed.
# The summary gives each target's executions and rate.
#
# FUZZMINIMIZETIME (default 1s) bounds how long a worker minimizes an input
# that found new coverage. Go's default (60s) spends a 20 s run minimizing
# one multi-kilobyte YAML seed, with "0/sec" in the log: each execution is
# cheap (no process, no key generation), the minimization was not.
#
# FUZZ_FINDINGS decides what a new finding does. "fail" (the default, for
# a developer running this script) exits 1. "report" (what scripts/test.sh,
# and so CI, uses) prints the finding with its reproducer in a box at the
# end and exits 0: exploration is random, and a bug that a change did not
# touch must not fail that change's landing at random. The determinism
# lives in plain `go test`: every committed input in testdata/fuzz/ runs
# there as a regression test, so once a finding is committed (with its
# fix) it fails or passes the same way on every run.
#
#   scripts/fuzz.sh                       # all targets, 20s each
#   FUZZTIME=2m scripts/fuzz.sh FuzzGenerate
#   FUZZ_FINDINGS=report scripts/fuzz.sh  # as CI runs it
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-20s}"
minimizetime="${FUZZMINIMIZETIME:-1s}"
findings="${FUZZ_FINDINGS:-fail}"
case $findings in
  fail | report) ;;
  *) echo "scripts/fuzz.sh: FUZZ_FINDINGS must be fail or report, not '$findings'" >&2; exit 2 ;;
esac

# selected NAME [TARGET...]: no targets named means all of them.
selected() {
  local name=$1 t
  shift
  [[ $# -eq 0 ]] && return 0
  for t in "$@"; do
    [[ $t == "$name" ]] && return 0
  done
  return 1
}

failed=0 ran=0 found=()
stamp=$(mktemp) log=$(mktemp)
trap 'rm -f "$stamp" "$log"' EXIT

# deadline_race NAME PKG: the run failed with nothing but "context deadline
# exceeded" and wrote no input, and every committed seed still passes.
# That is Go's fuzz coordinator racing its own -fuzztime deadline
# (go.dev/issue/75804, fixed in Go 1.27; this module's Go is 1.26), not a
# finding: nothing was found that could be reproduced.
deadline_race() {
  grep -q 'context deadline exceeded' "$log" || return 1
  grep -v 'context deadline exceeded' "$log" | grep -q '"Output":"[^"]*\(panic:\|Failing input written\|_test.go:[0-9]\)' && return 1
  go test -count=1 -run="^$1\$" "$2" >/dev/null 2>&1
}
while IFS=: read -r file name; do
  selected "$name" "$@" || continue
  pkg="./$(dirname "$file")"
  echo "--- $name ($pkg, $fuzztime)"
  ran=$((ran + 1))
  if ! go test -json -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimizetime" "$pkg" |
    tee "$log" | python3 scripts/gotest-summary.py; then
    # The input just found is the corpus file newer than the stamp.
    input=$(find "${pkg#./}/testdata/fuzz/$name" -type f -newer "$stamp" -printf '%f\n' 2>/dev/null | head -n 1)
    if [[ -z $input ]] && deadline_race "$name" "$pkg"; then
      echo "--- $name: not a finding: Go's fuzz coordinator stopped on its own -fuzztime deadline (context deadline exceeded, go.dev/issue/75804, fixed in Go 1.27); no input was written and every committed seed passes"
      continue
    fi
    failed=1
    if [[ -n $input ]]; then
      found+=("$name: go test -run='^$name/$input\$' $pkg   (input: ${pkg#./}/testdata/fuzz/$name/$input)")
    else
      found+=("$name: a committed seed fails (see its log above): go test -run='^$name\$' $pkg")
    fi
  fi
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . \
  | sed -E 's#^\./##; s#:func (Fuzz[A-Za-z0-9_]+).*#:\1#' | sort)

if [[ $ran -eq 0 ]]; then
  echo "scripts/fuzz.sh: no fuzz target matched ${*:-anything}" >&2
  exit 2
fi
if [[ $failed -eq 1 ]]; then
  echo
  echo "================ NEW FUZZ FINDING ================"
  echo "Exploratory fuzzing found an input that breaks a target. Reproduce, fix,"
  echo "and commit the input with the fix (it then runs in every go test):"
  printf '  %s\n' "${found[@]}"
  echo "=================================================="
  [[ $findings == report ]] && exit 0
fi
exit $failed
