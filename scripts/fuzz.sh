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
#   scripts/fuzz.sh                       # all targets, 20s each
#   FUZZTIME=2m scripts/fuzz.sh FuzzGenerate
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-20s}"
minimizetime="${FUZZMINIMIZETIME:-1s}"

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

failed=0 ran=0
while IFS=: read -r file name; do
  selected "$name" "$@" || continue
  pkg="./$(dirname "$file")"
  echo "--- $name ($pkg, $fuzztime)"
  ran=$((ran + 1))
  if ! go test -json -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimizetime" "$pkg" |
    python3 scripts/gotest-summary.py; then
    failed=1
    echo "FAIL: $name; the input that broke it is in ${pkg#./}/testdata/fuzz/$name/" >&2
  fi
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . \
  | sed -E 's#^\./##; s#:func (Fuzz[A-Za-z0-9_]+).*#:\1#' | sort)

if [[ $ran -eq 0 ]]; then
  echo "scripts/fuzz.sh: no fuzz target matched ${*:-anything}" >&2
  exit 2
fi
exit $failed
